"""A stream of one of our tables (`deltalog.spark.table_stream`): the first batch is the table, later
batches the rows each commit added; OPTIMIZE (dataChange=false) adds nothing; a DELETE fails the stream
by name unless skipChangeCommits; startingVersion; deletion vectors apply; maxFilesPerTrigger and
maxBytesPerTrigger bound each batch (also under availableNow); readChangeFeed streams the change feed."""
from __future__ import annotations

import pytest

from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.optimize import optimize
from deltalog.spark.table_stream import stream_table

pytestmark = pytest.mark.spark


def _drain(spark, uri, checkpoint, **options) -> list[int]:
    """One availableNow run of a stream of `uri`; the ids it passed on, in the order of batches."""
    return [i for batch in _batches(spark, uri, checkpoint, **options) for i in sorted(r["id"] for r in batch)]


def _batches(spark, uri, checkpoint, **options) -> list[list]:
    """One availableNow run of a stream of `uri`; the rows of each non-empty batch."""
    got: list[list] = []

    def sink(batch, batch_id):
        rows = batch.collect()
        if rows:
            got.append(rows)

    query = (stream_table(spark, uri, **options).writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(300)
    query.stop()
    if query.exception() is not None:
        raise query.exception()
    return got


def test_a_table_read_as_a_stream_commit_by_commit(spark, tmp_path):
    uri, cp = str(tmp_path / "t"), str(tmp_path / "cp")
    conf = {"delta.enableDeletionVectors": "true"}
    ops.write_dataframe(spark.sql("select id from range(5)"), uri, mode="overwrite", configuration=conf)
    assert _drain(spark, uri, cp) == [0, 1, 2, 3, 4]
    ops.write_dataframe(spark.sql("select id from range(5, 8)"), uri, mode="append")
    optimize(spark, uri)  # dataChange=false: nothing new for the stream
    ops.write_dataframe(spark.sql("select id from range(8, 9)"), uri, mode="append")
    assert _drain(spark, uri, cp) == [5, 6, 7, 8]
    assert _drain(spark, uri, cp) == []  # nothing new
    ops.delete(spark, uri, "id = 3")
    with pytest.raises(Exception, match="deletes or updates rows.*skipChangeCommits"):
        _drain(spark, uri, cp)


def test_skip_change_commits_and_starting_version(spark, tmp_path):
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select id from range(3)"), uri, mode="overwrite",
                        configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, uri, "id = 1")  # version 1: marks a row deleted
    ops.write_dataframe(spark.sql("select id from range(3, 5)"), uri, mode="append")  # version 2
    # the first batch is the table as it is: the deleted row is not in it
    assert _drain(spark, uri, str(tmp_path / "cp1"), skipChangeCommits=True) == [0, 2, 3, 4]
    assert _drain(spark, uri, str(tmp_path / "cp2"), startingVersion=2) == [3, 4]
    ops.delete(spark, uri, "id = 4")
    ops.write_dataframe(spark.sql("select id from range(5, 6)"), uri, mode="append")
    assert _drain(spark, uri, str(tmp_path / "cp1"), skipChangeCommits=True) == [5]


def test_read_limits_split_batches_also_under_available_now(spark, tmp_path):
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select id from range(6)").repartition(3), uri, mode="overwrite")  # 3 files
    for start in (6, 8, 10):
        ops.write_dataframe(spark.sql(f"select id from range({start}, {start + 2})").repartition(2), uri, mode="append")
    files = Snapshot.load(uri).files.num_rows
    assert files >= 5
    batches = _batches(spark, uri, str(tmp_path / "cp"), maxFilesPerTrigger=2)
    assert len(batches) == (files + 1) // 2  # two files per batch, across the snapshot and the commits
    assert sorted(r["id"] for b in batches for r in b) == list(range(12))
    ops.write_dataframe(spark.sql("select id from range(12, 14)"), uri, mode="append")
    assert _drain(spark, uri, str(tmp_path / "cp"), maxFilesPerTrigger=2) == [12, 13]  # carries on where it was
    # a byte limit below one file's size still passes one file per batch
    assert len(_batches(spark, uri, str(tmp_path / "cp2"), maxBytesPerTrigger=1)) == Snapshot.load(uri).files.num_rows
    with pytest.raises(Exception, match="maxFilesPerTrigger='0' is not a positive whole number"):
        stream_table(spark, uri, maxFilesPerTrigger="0")
    with pytest.raises(Exception, match="option.*maxRowsPerTrigger unknown.*startingVersion"):
        stream_table(spark, uri, maxRowsPerTrigger=5)


def test_the_change_feed_as_a_stream(spark, tmp_path):
    uri, cp = str(tmp_path / "t"), str(tmp_path / "cp")
    conf = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
    ops.write_dataframe(spark.sql("select id, 'a' as v from range(4)"), uri, mode="overwrite", configuration=conf)

    def changes():
        return sorted((r["id"], r["v"], r["_change_type"], r["_commit_version"])
                      for b in _batches(spark, uri, cp, readChangeFeed=True) for r in b)

    assert changes() == [(i, "a", "insert", 0) for i in range(4)]  # the table as inserts at its version
    ops.delete(spark, uri, "id = 1")  # version 1
    source = spark.sql("select 2 as id, 'b' as v union all select 9 as id, 'n' as v")
    ops.merge(spark, uri, source, on="DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id",
              when_matched_update="*", when_not_matched_insert="*")  # version 2
    optimize(spark, uri)  # dataChange=false: no changes
    assert changes() == [(1, "a", "delete", 1), (2, "a", "update_preimage", 2), (2, "b", "update_postimage", 2),
                         (9, "n", "insert", 2)]
    assert changes() == []
    stamps = {r["_commit_timestamp"] is not None for b in _batches(spark, uri, str(tmp_path / "cp2"), readChangeFeed=True)
              for r in b}
    assert stamps == {True}
