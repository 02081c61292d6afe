"""Spark operations on tables in S3 (SeaweedFS) and Azure Blob (Azurite), real servers on 127.0.0.1
started here, through the pyarrow data path (no Hadoop connector for either in this Spark): writes,
deletes and merges with deletion vectors, the change feed, OPTIMIZE, RESTORE and VACUUM. delta-rs reads
every version from the store as we do."""
from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog.storage import files as filesystem
from deltalog.operations.restore import restore
from deltalog.operations.vacuum import vacuum
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.change_data import changes_dataframe
from deltalog.spark.optimize import optimize
from deltalog.spark.reader import snapshot_dataframe
from tests.support.azurite import azurite, azurite_binary
from tests.support.seaweed import seaweedfs_or_skip

pytestmark = pytest.mark.spark
DVS = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}


@pytest.fixture(scope="module", params=["s3", "azure"])
def s3(request):
    """The store (named s3 for the first of them)."""
    if request.param == "azure" and azurite_binary() is None:
        pytest.skip("Azurite is not installed (npm install --prefix .ci-cache/azurite azurite@3.35.0; .ci/run does)")
    with (seaweedfs_or_skip() if request.param == "s3" else azurite()) as server:
        filesystem.configure(server.uri(), server.storage_options())
        try:
            yield server
        finally:
            filesystem.configure(server.uri(), None)


def _spark_rows(spark, uri, version=None):
    df = snapshot_dataframe(spark, Snapshot.load(uri, version=version))
    return sorted((r["id"], r["k"], r["s"]) for r in df.collect())


def _delta_rs_rows(s3, uri, version=None):
    dt = deltalake.DeltaTable(uri, version=version, storage_options=s3.storage_options())
    t = pa.table(QueryBuilder().register("t", dt).execute("select id, k, s from t").read_all())
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "k", "s"))))


def test_dml_with_deletion_vectors_on_s3_reads_as_delta_rs_reads_it(spark, s3):
    uri = s3.uri("spark", "dv_orders")
    ops.write_dataframe(spark.range(2000).selectExpr("id", "id % 5 AS k", "'a' AS s").repartition(3), uri,
                        partition_by=["k"], configuration=DVS)
    written = {a.path for a in Snapshot.load(uri).add_files()}
    ops.delete(spark, uri, "id % 100 = 7")  # marks rows, rewrites nothing
    snap = Snapshot.load(uri)
    assert {a.path for a in snap.add_files()} == written
    marked = [dict(pv)["k"] for pv, dv in zip(snap.files.column("partition_values").to_pylist(),
                                              snap.files.column("deletion_vector").to_pylist()) if dv]
    assert marked == ["2"] * 3  # 7 % 5: the three files of partition k=2
    source = spark.range(0, 4000, 40).selectExpr("id", "id % 5 AS k", "'b' AS s")
    ops.merge(spark, uri, source, "t.id = s.id", when_matched_update="*", when_not_matched_insert="*",
              source_alias="s", target_alias="t")
    expected = sorted([(i, i % 5, "b" if i % 40 == 0 else "a") for i in range(2000) if i % 100 != 7]
                      + [(i, i % 5, "b") for i in range(2000, 4000, 40)])
    assert _spark_rows(spark, uri) == expected
    for v in range(Snapshot.load(uri).version + 1):
        assert _spark_rows(spark, uri, v) == _delta_rs_rows(s3, uri, v), f"version {v}"
    changes = changes_dataframe(spark, uri, 1, 1).collect()
    assert sorted(r["id"] for r in changes) == [i for i in range(2000) if i % 100 == 7]
    assert {r["_change_type"] for r in changes} == {"delete"}


def test_optimize_restore_and_vacuum_on_s3(spark, s3):
    uri = s3.uri("spark", "maintained")
    for i in range(4):
        ops.write_dataframe(spark.range(i * 100, (i + 1) * 100).selectExpr("id", "id % 3 AS k", "'x' AS s"), uri)
    before = _spark_rows(spark, uri)
    v = optimize(spark, uri)
    snap = Snapshot.load(uri)
    assert snap.version == v and snap.num_files == 1
    assert _spark_rows(spark, uri) == before == _delta_rs_rows(s3, uri)
    ops.delete(spark, uri, "id < 50")
    restored = restore(uri, version=v)
    assert _delta_rs_rows(s3, uri, restored) == before
    # every file but the live one is older than a zero retention: VACUUM deletes them from the bucket
    live = {a.path for a in Snapshot.load(uri).add_files()}
    deleted = vacuum(uri, retain_hours=0, force=True)
    assert deleted and not set(deleted) & live
    left = {i.path for i in filesystem.list_files(uri) if not i.path.startswith("_delta_log")}
    assert left == live
    assert _delta_rs_rows(s3, uri) == before


def test_a_table_handle_carries_its_store_options_to_every_spark_operation(spark, s3, monkeypatch, tmp_path):
    """A `DeltaTable` made with its storage options reaches the store through every operation and every
    Spark task (and the stream's Python workers) with nothing configured for its location and no
    credentials in the environment."""
    from deltalog import DeltaTable
    from deltalog.spark.table_stream import stream_table

    for name in [k for k in __import__("os").environ if k.startswith(("AWS_", "AZURE_"))]:
        monkeypatch.delenv(name)
    filesystem.configure(s3.uri(), None)
    try:
        table = DeltaTable(s3.uri("spark", "handle"), storage_options=s3.storage_options())
        ops.write_dataframe(spark.range(300).selectExpr("id", "id % 3 AS k", "'a' AS s"), table, configuration=DVS)
        ops.write_dataframe(spark.range(300, 400).selectExpr("id", "id % 3 AS k", "'a' AS s"), table)
        ops.delete(spark, table, "id % 10 = 0")
        ops.merge(spark, table, spark.range(0, 500, 50).selectExpr("id", "id % 3 AS k", "'b' AS s"), "t.id = s.id",
                  when_matched_update="*", when_not_matched_insert="*", source_alias="s", target_alias="t")
        assert optimize(spark, table) is not None
        # the deleted rows (id % 10 = 0) include every id of the source: all of them are inserted
        expected = sorted([(i, i % 3, "a") for i in range(400) if i % 10] + [(i, i % 3, "b") for i in range(0, 500, 50)])
        got = snapshot_dataframe(spark, table.snapshot()).collect()
        assert sorted((r["id"], r["k"], r["s"]) for r in got) == expected

        batches = []
        query = (stream_table(spark, table).writeStream
                 .foreachBatch(lambda df, _: batches.extend((r["id"], r["k"], r["s"]) for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        assert sorted(batches) == expected
        assert _delta_rs_rows(s3, table.uri) == expected
    finally:
        filesystem.configure(s3.uri(), s3.storage_options())
