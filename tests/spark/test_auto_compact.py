"""Auto-compaction (`delta.autoOptimize.autoCompact`, deltalog/spark/auto_compact.py): after a write, the
partitions it touched that hold at least minNumFiles small files are compacted in a dataChange=false
OPTIMIZE commit (parameter auto=true); untouched partitions and tables without the property are left
alone; rows are unchanged for us and delta-rs, and a stream of the table passes no row twice."""
from __future__ import annotations

import json

import deltalake
import pytest

from deltalog.history import history
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.table_stream import stream_table

pytestmark = pytest.mark.spark


@pytest.fixture
def four_files(spark):
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "4")
    yield
    spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")


def _files_by_partition(uri: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for values in Snapshot.load(uri).files.column("partition_values").to_pylist():
        key = dict(values)["k"]
        out[key] = out.get(key, 0) + 1
    return out


def test_small_files_of_touched_partitions_are_compacted(spark, tmp_path, four_files):
    uri, checkpoint = str(tmp_path / "t"), str(tmp_path / "cp")
    got: list[int] = []

    def drain():
        def sink(batch, _):
            got.extend(r["id"] for r in batch.collect())
        q = stream_table(spark, uri).writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint) \
            .trigger(availableNow=True).start()
        q.awaitTermination(300)
        assert q.exception() is None

    conf = {"delta.autoOptimize.autoCompact": "true"}
    ops.write_dataframe(spark.sql("select 0L as id, 0L as k union all select 1L, 1L"), uri, mode="overwrite",
                        partition_by=["k"], configuration=conf)
    for i in range(1, 3):  # 3 small files in each partition: below the threshold
        ops.write_dataframe(spark.sql(f"select {2 * i}L as id, 0L as k union all select {2 * i + 1}L, 1L"), uri,
                            mode="append")
    assert _files_by_partition(uri) == {"0": 3, "1": 3}
    drain()
    version = ops.write_dataframe(spark.sql("select 100L as id, 0L as k"), uri, mode="append")  # k=0: 4 small files
    # the append, then the compaction of partition k=0 only
    assert Snapshot.load(uri).version == version + 1
    assert _files_by_partition(uri) == {"0": 1, "1": 3}
    last = history(uri, limit=1)[0]
    assert last["operation"] == "OPTIMIZE" and last["operationParameters"]["auto"] == "true"
    commit = (tmp_path / "t" / "_delta_log" / ("%020d.json" % (version + 1))).read_text().splitlines()
    actions = [json.loads(line) for line in commit]
    assert all(not a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a)
    expected = [0, 1, 2, 3, 4, 5, 100]
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == expected
    drain()  # the stream saw the append and skips the compaction
    assert sorted(got) == expected


def test_without_the_property_nothing_is_compacted(spark, tmp_path, four_files):
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select 0L as id, 0L as k"), uri, mode="overwrite", partition_by=["k"])
    for i in range(1, 6):
        ops.write_dataframe(spark.sql(f"select {i}L as id, 0L as k"), uri, mode="append")
    assert _files_by_partition(uri) == {"0": 6}
    assert Snapshot.load(uri).version == 5
