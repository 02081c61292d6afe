"""We read and write what delta-spark writes: a table per feature delta-spark can write here, made by
delta-spark's SQL, read by deltalog at every version equal to delta-spark's rows; then deltalog writes
to it (an append, a delete, a merge) wherever it can honour the feature, and delta-spark reads the
result equal to ours. A feature deltalog cannot write is refused by name, nothing committed.
"""
from __future__ import annotations

import glob
import os

import pytest

from deltalog import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.change_data import changes_dataframe
from tests.delta_spark.test_reads_what_we_write import delta_spark_rows, our_rows, rows_of
from tests.support.selection import FULL, full_only

pytestmark = pytest.mark.spark


def _sql(spark, *statements: str) -> None:
    for statement in statements:
        spark.sql(statement)


def _same_at_every_version(spark, uri: str) -> int:
    """Our rows equal delta-spark's at every version (a versioned delta-spark read costs seconds): in the
    selection, at the versions where how the log is read changes (the first ones, each checkpoint and
    the version after it, the last two), our reader alone at the others; every one with the full suite."""
    last = Snapshot.load(uri).version
    for v in range(last + 1):
        ours = our_rows(uri, v)
        if FULL or v in _telling_versions(uri, last):
            assert ours == delta_spark_rows(spark, uri, v), f"{uri} version {v}"
    return last


def _telling_versions(uri: str, last: int) -> set[int]:
    checkpoints = {int(os.path.basename(p).split(".")[0])
                   for p in glob.glob(os.path.join(uri, "_delta_log", "*.checkpoint*.*"))}
    return {0, 1, 2, last - 1, last} | checkpoints | {v + 1 for v in checkpoints}


def _we_write_then_delta_spark_reads(spark, uri: str, rows_sql: str, key: str = "id") -> None:
    """An append, a delete and a merge by deltalog on delta-spark's table; delta-spark reads each."""
    before = Snapshot.load(uri).version
    ops.write_dataframe(spark.sql(rows_sql), uri, mode="append")
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    ops.delete(spark, uri, f"`{key}` % 4 = 1")
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    ops.merge(spark, uri, spark.sql(rows_sql).limit(3), f"s.`{key}` = t.`{key}`",
              when_matched_delete_condition="true", source_alias="s", target_alias="t")
    assert Snapshot.load(uri).version == before + 3
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    # and delta-spark goes on writing after us (other ids)
    from pyspark.sql import functions as F

    spark.sql(rows_sql).withColumn(key, F.col(f"`{key}`") + 1_000_000).write.format("delta").mode("append").save(uri)
    assert our_rows(uri) == delta_spark_rows(spark, uri)


def test_deletion_vectors_from_delete_update_and_merge(spark, tmp_path):
    uri = str(tmp_path / "dv")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (id bigint, k int, s string) using delta "
                f"tblproperties ('delta.enableDeletionVectors' = 'true')",
         f"insert into {t} select id, id % 7, cast(id as string) from range(500)",
         f"delete from {t} where k = 3",
         f"update {t} set s = 'updated' where id % 10 = 0",
         f"merge into {t} t using (select id, -1 as k, 'merged' as s from range(0, 700, 9)) u on t.id = u.id "
         f"when matched then update set s = u.s when not matched then insert *")
    assert any(a.deletion_vector for a in Snapshot.load(uri).add_files())
    assert _same_at_every_version(spark, uri) == 4
    _we_write_then_delta_spark_reads(spark, uri, "select id, 1 as k, 'ours' as s from range(1000, 1020)")


def test_v2_checkpoints_with_sidecars(spark, tmp_path):
    uri = str(tmp_path / "v2cp")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (id bigint, s string) using delta "
                f"tblproperties ('delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2')")
    for i in range(5):
        spark.sql(f"insert into {t} select id, 'batch {i}' from range({i * 10}, {i * 10 + 10})")
    log = os.path.join(uri, "_delta_log")
    assert glob.glob(os.path.join(log, "*.checkpoint.*.json")) + glob.glob(os.path.join(log, "*.checkpoint.*.parquet"))
    assert glob.glob(os.path.join(log, "_sidecars", "*.parquet")), "delta-spark wrote no sidecar"
    assert "v2Checkpoint" in Snapshot.load(uri).protocol.writer_features
    _same_at_every_version(spark, uri)
    _we_write_then_delta_spark_reads(spark, uri, "select id, 'ours' as s from range(1000, 1020)")
    # a checkpoint of ours landed among theirs (interval 2): a V2-spec classic one, read by delta-spark afresh
    ours = sorted(glob.glob(os.path.join(log, "*.checkpoint.parquet")))
    assert ours
    import pyarrow.parquet as pq

    assert "checkpointMetadata" in pq.read_schema(ours[-1]).names
    spark.catalog.clearCache()
    assert _same_at_every_version(spark, uri) == Snapshot.load(uri).version


def test_type_widening(spark, tmp_path):
    uri = str(tmp_path / "tw")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (id int, small short, d date, amount decimal(6, 2)) using delta "
                f"tblproperties ('delta.enableTypeWidening' = 'true', 'delta.feature.timestampNtz' = 'supported')",
         f"insert into {t} select cast(id as int), cast(id as short), date'2024-01-01' + cast(id as int), "
         f"cast(id / 4 as decimal(6, 2)) from range(40)",
         f"alter table {t} change column id type bigint",
         f"alter table {t} change column small type int",
         f"alter table {t} change column d type timestamp_ntz",
         f"alter table {t} change column amount type decimal(10, 4)",
         f"insert into {t} select id + 5000000000, 70000, timestamp_ntz'2025-06-01 10:00:00', 123456.7891 "
         f"from range(3)")
    snapshot = Snapshot.load(uri)
    assert "typeWidening" in snapshot.protocol.writer_features
    assert _same_at_every_version(spark, uri) == snapshot.version
    # a filter on a widened column: files written before the change hold date stats, not timestamps
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    _we_write_then_delta_spark_reads(
        spark, uri, "select id + 6000000000 as id, 80000 as small, timestamp_ntz'2025-07-01 00:00:00' as d, "
                    "cast(1.5 as decimal(10, 4)) as amount from range(8)")
    from deltalog.spark.optimize import optimize

    optimize(spark, uri)  # old narrow files rewritten at the wide types
    assert our_rows(uri) == delta_spark_rows(spark, uri)


def test_row_tracking_clustering_and_in_commit_timestamps(spark, tmp_path):
    uri = str(tmp_path / "rt")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (id bigint, k int) using delta cluster by (k) tblproperties "
                f"('delta.enableRowTracking' = 'true', 'delta.enableInCommitTimestamps' = 'true', "
                f"'delta.enableDeletionVectors' = 'true')",
         f"insert into {t} select id, id % 5 from range(50)",
         f"update {t} set k = 9 where id < 5",
         f"optimize {t}")
    _same_at_every_version(spark, uri)
    _we_write_then_delta_spark_reads(spark, uri, "select id, 7 as k from range(100, 120)")
    got = spark.read.format("delta").load(uri).select("id", "_metadata.row_id").collect()
    assert len({r["row_id"] for r in got}) == len(got)  # row IDs stay unique across both writers
    from tests.support.row_ids import row_ids

    assert {r["id"]: r["row_id"] for r in got} == row_ids(uri, Snapshot.load(uri).version)
    detail = spark.sql(f"describe detail {t}").collect()[0].asDict()
    assert list(detail["clusteringColumns"]) == ["k"]


def test_change_data_feed_of_delta_spark_and_ours(spark, tmp_path):
    uri = str(tmp_path / "cdf")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (id bigint, v int) using delta "
                f"tblproperties ('delta.enableChangeDataFeed' = 'true')",
         f"insert into {t} select id, 0 from range(20)",
         f"update {t} set v = 1 where id < 5",
         f"delete from {t} where id >= 18")
    ops.merge(spark, uri, spark.sql("select id, 2 as v from range(15, 25)"), "s.id = t.id",
              when_matched_update={"v": "s.v"}, when_not_matched_insert={"id": "s.id", "v": "s.v"},
              source_alias="s", target_alias="t")
    columns = ["id", "v", "_change_type", "_commit_version"]
    theirs = spark.sql(f"select * from table_changes_by_path('{uri}', 0)").collect()
    ours = changes_dataframe(spark, uri, 0).collect()
    assert rows_of([r.asDict() for r in theirs], columns) == rows_of([r.asDict() for r in ours], columns)


def test_partitioned_and_column_mapped_with_awkward_names(spark, tmp_path):
    uri = str(tmp_path / "awkward")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (`id` bigint, `the value` string, `p,q` string, `n(1)` int) using delta "
                f"partitioned by (`p,q`) tblproperties ('delta.columnMapping.mode' = 'name')",
         f"insert into {t} values (1, 'a', 'x y', 1), (2, 'b', 'a/b', 2), (3, 'c', '%20é', 3), (4, 'd', null, 4), "
         f"(5, 'e', '', 5)",
         f"alter table {t} rename column `the value` to `renamed value`",
         f"alter table {t} drop column `n(1)`")
    _same_at_every_version(spark, uri)
    _we_write_then_delta_spark_reads(spark, uri, "select id, 'ours' as `renamed value`, 'x y' as `p,q` "
                                                 "from range(10, 18)")


@pytest.mark.parametrize("interval", [pytest.param(1, marks=full_only("interval 3 checkpoints too")), 3,
                                      pytest.param(10, marks=full_only("interval 3 checkpoints too"))])
def test_checkpoints_at_several_intervals(spark, tmp_path, interval):
    uri = str(tmp_path / f"cp{interval}")
    t = f"delta.`{uri}`"
    _sql(spark, f"create table {t} (id bigint) using delta tblproperties ('delta.checkpointInterval' = '{interval}')")
    for i in range(12):
        spark.sql(f"insert into {t} select id from range({i * 5}, {i * 5 + 5})")
    spark.sql(f"delete from {t} where id % 3 = 0")
    _same_at_every_version(spark, uri)
    _we_write_then_delta_spark_reads(spark, uri, "select id from range(100, 110)")


# Every table feature delta-spark writes here (identity and generated columns, defaults included) is
# written by us too: tests/delta_spark/test_identity_interop.py and test_generated_interop.py.
