"""The Iceberg metadata the engine writes after each commit of a `delta.universalFormat.enabledFormats =
iceberg` table (deltalog/iceberg/): incremental, caught up after a failed conversion, never backwards
when two converters race, and rebuilt whole when the commits it would replay have expired. Each time
pyiceberg reads every snapshot equal to delta-rs on the Delta version it names."""

from __future__ import annotations

import os
import threading

import pytest

from deltalog import Snapshot
from deltalog.iceberg import convert, latest_metadata
from deltalog.stores import log_store_for
from tests import iceberg_readers as ice

pytestmark = pytest.mark.spark

ICEBERG = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true",
           "delta.universalFormat.enabledFormats": "iceberg"}


def _rows(spark, start: int, n: int):
    return spark.sql(f"select id, concat('v', id) as v, id % 3 as grp from range({start}, {start + n})")


def _manifests(path) -> set:
    return {n for n in os.listdir(os.path.join(path, "metadata")) if n.endswith("-m0.avro")}


def test_an_append_writes_one_manifest_and_keeps_the_others(spark, tmp_path):
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 10), path, partition_by=["grp"], configuration=ICEBERG)
    before = _manifests(path)
    write_dataframe(_rows(spark, 10, 10), path)
    added = _manifests(path) - before
    assert len(added) == 1  # the new files' manifest; the first one is carried by reference
    table = ice.iceberg_table(path)
    head = table.metadata.snapshots[-1]
    assert {m.manifest_path.rsplit("/", 1)[1] for m in head.manifests(table.io)} == before | added
    assert ice.assert_every_snapshot_matches_delta(path) == 2


def test_a_failed_conversion_is_caught_up_by_the_next_write(spark, tmp_path, monkeypatch):
    from deltalog.iceberg import conversion
    from deltalog.spark.operations import delete, write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 10), path, configuration=ICEBERG)

    def crash(*args, **kwargs):
        raise OSError("the process died between the Delta commit and its Iceberg metadata")

    monkeypatch.setattr(conversion._Builder, "metadata_json", crash)
    write_dataframe(_rows(spark, 10, 5), path)  # committed to Delta; Iceberg still at version 0
    assert int(ice.iceberg_table(path).metadata.properties["delta-version"]) == 0
    monkeypatch.undo()
    delete(spark, path, "id < 3")
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["0", "1", "2"]
    assert ice.assert_every_snapshot_matches_delta(path) == 3


def test_two_converters_at_once_never_go_backwards(spark, tmp_path):
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 5), path, configuration=ICEBERG)
    for i in range(1, 4):
        write_dataframe(_rows(spark, i * 5, 5), path)
    store = log_store_for(path)
    snapshots = [Snapshot.load(path, version=v) for v in range(4)]
    barrier = threading.Barrier(4)
    errors = []

    def run(v):
        barrier.wait()
        try:
            convert(snapshots[v], store)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(v,)) for v in (3, 2, 1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    number, metadata = latest_metadata(path, store)
    assert int(metadata.properties["delta-version"]) == 3
    versions = []
    for n in range(1, number + 1):
        versions.append(int(ice.iceberg_table(path, n).metadata.properties["delta-version"]))
    assert versions == sorted(versions)  # each metadata file names a version at or after the one before
    assert ice.assert_every_snapshot_matches_delta(path) >= 1


def test_without_metadata_the_whole_table_is_one_snapshot(spark, tmp_path):
    """Turned on for a table that was Delta only, or with its metadata folder lost: the next commit's
    conversion writes one snapshot of every live file (there are no earlier Iceberg snapshots to extend)."""
    import shutil

    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 5), path, configuration={"delta.columnMapping.mode": "name"})
    write_dataframe(_rows(spark, 5, 5), path)
    assert not os.path.exists(os.path.join(path, "metadata"))
    write_dataframe(_rows(spark, 10, 5), path, configuration=ICEBERG)
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["2"]
    assert ice.iceberg_rows(table) == ice.delta_rows(path) and len(ice.delta_rows(path)) == 15

    shutil.rmtree(os.path.join(path, "metadata"))
    write_dataframe(_rows(spark, 20, 5), path)
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["3"]
    assert ice.iceberg_rows(table) == ice.delta_rows(path)


def test_vacuum_keeps_the_metadata_and_expires_the_snapshots_whose_files_it_deleted(spark, tmp_path):
    from deltalog.operations.vacuum import vacuum
    from deltalog.spark.operations import write_dataframe

    path = str(tmp_path / "t")
    write_dataframe(_rows(spark, 0, 10), path, partition_by=["grp"], configuration=ICEBERG)
    write_dataframe(_rows(spark, 10, 10), path)
    write_dataframe(_rows(spark, 100, 5), path, mode="overwrite")  # the first two versions' files removed
    write_dataframe(_rows(spark, 200, 5), path)
    before = set(os.listdir(os.path.join(path, "metadata")))
    deleted = vacuum(path, retain_hours=0, force=True)
    assert deleted and not any(d.startswith("metadata/") for d in deleted)
    after = set(os.listdir(os.path.join(path, "metadata")))
    assert {n for n in before if n.endswith(".metadata.json")} <= after  # every metadata version stays
    table = ice.iceberg_table(path)
    assert [s.summary["delta-version"] for s in table.metadata.snapshots] == ["2", "3"]
    assert ice.assert_every_snapshot_matches_delta(path) == 2
    # the manifests only the expired snapshots listed are gone; the kept snapshots' all read
    listed = {m.manifest_path.rsplit("/", 1)[1] for s in table.metadata.snapshots for m in s.manifests(table.io)}
    assert {n for n in after if n.endswith("-m0.avro")} == listed


def test_on_s3_through_the_tables_store(spark):
    """The same on an object store (S3 on SeaweedFS): metadata written through the table's own store and
    client, read by pyiceberg over S3 equal to delta-rs."""
    from pyiceberg.table import StaticTable

    from deltalog import filesystem
    from deltalog.spark.operations import delete, write_dataframe
    from tests.seaweed import seaweedfs_or_skip

    with seaweedfs_or_skip() as s3:
        filesystem.configure(s3.uri(), s3.storage_options())
        try:
            uri = s3.uri("iceberg", "t")
            write_dataframe(_rows(spark, 0, 10), uri, partition_by=["grp"], configuration=ICEBERG)
            write_dataframe(_rows(spark, 10, 10), uri)
            delete(spark, uri, "id < 4")
            options = s3.storage_options()
            io = {"s3.endpoint": options["AWS_ENDPOINT_URL"], "s3.access-key-id": options["AWS_ACCESS_KEY_ID"],
                  "s3.secret-access-key": options["AWS_SECRET_ACCESS_KEY"], "s3.region": options["AWS_REGION"]}
            number, metadata = latest_metadata(uri, log_store_for(uri))
            assert int(metadata.properties["delta-version"]) == 2 and number == 3
            table = StaticTable.from_metadata(f"{uri}/metadata/v{number}.metadata.json", properties=io)
            import deltalake
            import pyarrow as pa

            for snapshot in table.metadata.snapshots:
                version = int(snapshot.summary["delta-version"])
                delta = deltalake.DeltaTable(uri, version=version, storage_options=options)
                expected = pa.table(deltalake.QueryBuilder().register("t", delta).execute("select * from t").read_all())
                assert ice.iceberg_rows(table, snapshot.snapshot_id) == ice.rows(expected), version
        finally:
            filesystem.configure(s3.uri(), None)


def test_a_stream_into_an_iceberg_table_makes_one_snapshot_a_micro_batch(spark, tmp_path):
    """A streaming table's exactly-once sink: each micro-batch is one Delta commit, and so one Iceberg
    snapshot; a batch run again after a crash (same batch id) commits nothing, and adds no snapshot."""
    from deltalog.spark.operations import write_dataframe
    from deltalog.spark.streaming import batch_writer
    from deltalog.spark.table_stream import stream_table

    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for i in range(3):
        write_dataframe(_rows(spark, i * 10, 10), source)
    sink = batch_writer(target, app_id="iceberg-stream", configuration=ICEBERG)
    query = (stream_table(spark, source, maxFilesPerTrigger=1).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    table = ice.iceberg_table(target)
    batches = len(table.metadata.snapshots)
    assert batches >= 3
    assert ice.assert_every_snapshot_matches_delta(target) == batches
    sink(_rows(spark, 0, 10), 0)  # batch 0 again: already committed
    assert len(ice.iceberg_table(target).metadata.snapshots) == batches
