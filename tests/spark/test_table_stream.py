"""A stream of one of our tables (`deltalog.spark.table_stream`): the first batch is the table, later
batches the rows each commit added; OPTIMIZE (dataChange=false) adds nothing; a DELETE fails the stream
by name unless skipChangeCommits; startingVersion; deletion vectors apply."""
from __future__ import annotations

import pytest

from deltalog.spark import operations as ops
from deltalog.spark.optimize import optimize
from deltalog.spark.table_stream import stream_table

pytestmark = pytest.mark.spark


def _drain(spark, uri, checkpoint, **options) -> list[int]:
    """One availableNow run of a stream of `uri`; the ids it passed on, in the order of batches."""
    got: list[int] = []

    def sink(batch, batch_id):
        got.extend(sorted(r["id"] for r in batch.select("id").collect()))

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
