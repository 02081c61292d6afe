"""Change data feed: DELETE, MERGE and replace_where on a table with `delta.enableChangeDataFeed=true`
record the rows they change in `_change_data/` files (`cdc` actions), appends and whole-file removes
need none, and `changes_dataframe` reads any range as delta-rs's `load_cdf` does — for our tables and
for the change data feed tables other engines wrote."""
from __future__ import annotations

import json
import os

import deltalake
import pyarrow as pa
import pytest

from deltalog.errors import UnsupportedFeatureError
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.change_data import changes_dataframe
from deltalog.spark.reader import snapshot_dataframe
from tests.support.shared_data import WILD, require

pytestmark = pytest.mark.spark

CDF = {"delta.enableChangeDataFeed": "true"}


def _ours(spark, uri, start, end=None) -> list[tuple]:
    rows = changes_dataframe(spark, uri, start, end).collect()
    return sorted((tuple(sorted(r.asDict().items())) for r in rows), key=str)


def _theirs(uri, start, end=None) -> list[tuple]:
    rows = pa.table(deltalake.DeltaTable(uri).load_cdf(starting_version=start, ending_version=end).read_all())
    return sorted((tuple(sorted(r.items())) for r in rows.to_pylist()), key=str)


def _changes(spark, uri, version) -> list[tuple]:
    """(change type, id, v) of one version's changes."""
    return sorted((r["_change_type"], r["id"], r["v"]) for r in changes_dataframe(spark, uri, version, version).collect())


def _commit(uri, version) -> dict:
    with open(os.path.join(uri, "_delta_log", "%020d.json" % version)) as f:
        actions = [json.loads(line) for line in f if line.strip()]
    return {k: [a[k] for a in actions if k in a] for k in ("add", "remove", "cdc")}


def test_dml_records_its_changed_rows_as_delta_rs_reads_them(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = spark.sql("select id, id * 10 as v, cast(id % 2 as string) as p from range(6)")
    ops.write_dataframe(df, uri, partition_by=["p"], configuration=CDF)  # 0
    snap = Snapshot.load(uri)
    assert "changeDataFeed" in (snap.protocol.writer_features or [])
    assert _changes(spark, uri, 0) == [("insert", i, i * 10) for i in range(6)]

    ops.delete(spark, uri, "id = 2")  # 1: rewrites the p=0 file
    assert _changes(spark, uri, 1) == [("delete", 2, 20)]
    assert len(_commit(uri, 1)["cdc"]) == 1 and _commit(uri, 1)["cdc"][0]["path"].startswith("_change_data/p=0/")

    source = spark.sql("select * from values (1, 11, '1'), (4, 44, '0'), (9, 90, '1') as s(id, v, p)")
    ops.merge(spark, uri, source, on="DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id",
              when_matched_update="*", when_not_matched_insert="*")  # 2
    assert _changes(spark, uri, 2) == [("insert", 9, 90), ("update_postimage", 1, 11), ("update_postimage", 4, 44),
                                       ("update_preimage", 1, 10), ("update_preimage", 4, 40)]

    gone = spark.sql("select * from values (3, 0, '1') as s(id, v, p)")
    ops.merge(spark, uri, gone, on="DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id",
              when_matched_delete_condition="true")  # 3
    assert _changes(spark, uri, 3) == [("delete", 3, 30)]

    ops.write_dataframe(spark.sql("select 5L as id, 555L as v, '1' as p"), uri, mode="overwrite",
                        replace_where="id = 5")  # 4: a data predicate rewrites part of a file
    assert _changes(spark, uri, 4) == [("delete", 5, 50), ("insert", 5, 555)]

    ops.write_dataframe(spark.sql("select 7L as id, 70L as v, '0' as p"), uri, mode="append")  # 5
    assert _commit(uri, 5)["cdc"] == []  # an append's adds are its inserts
    ops.delete(spark, uri, "p = '0'")  # 6: whole files removed, no change data files needed
    assert _commit(uri, 6)["cdc"] == [] and _commit(uri, 6)["remove"]
    assert _changes(spark, uri, 6) == [("delete", 0, 0), ("delete", 4, 44), ("delete", 7, 70)]

    assert _ours(spark, uri, 0) == _theirs(uri, 0)
    assert _ours(spark, uri, 2, 4) == _theirs(uri, 2, 4)
    # the table itself is what the changes add up to
    assert sorted(r["id"] for r in pa.table(deltalake.DeltaTable(uri).to_pyarrow_table()).to_pylist()) == [1, 5, 9]


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_column_mapped_change_data_files(spark, tmp_path, method):
    """Under column mapping the change data files hold physical names too; delta-rs cannot read the feed
    of a mapped table, so the rows are checked against what the operations did."""
    uri = str(tmp_path / "t")
    df = spark.sql("select id, id * 10 as v from range(4)")
    ops.write_dataframe(df, uri, configuration={**CDF, "delta.columnMapping.mode": "name"}, method=method)
    ops.delete(spark, uri, "id = 1", method=method)
    source = spark.sql("select 2L as id, 21L as v")
    ops.merge(spark, uri, source, on="DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id", when_matched_update="*",
              method=method)
    cdc = _commit(uri, 2)["cdc"][0]["path"]
    names = pa.parquet.read_schema(os.path.join(uri, cdc)).names
    assert all(n.startswith("col-") for n in names if n != "_change_type")
    assert _changes(spark, uri, 1) == [("delete", 1, 10)]
    assert _changes(spark, uri, 2) == [("update_postimage", 2, 21), ("update_preimage", 2, 20)]


def test_vacuum_removes_change_data_past_the_retention(spark, tmp_path):
    from deltalog.errors import VersionNotFoundError
    from deltalog.operations.vacuum import vacuum

    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select id, id * 10 as v from range(4)"), uri, configuration=CDF)
    ops.delete(spark, uri, "id = 1")
    cdc = _commit(uri, 1)["cdc"][0]["path"]
    assert vacuum(uri, retain_hours=1, dry_run=True, force=True) == []  # still young
    doomed = vacuum(uri, retain_hours=0, dry_run=True, force=True)
    assert cdc in doomed
    vacuum(uri, retain_hours=0, force=True)
    assert not os.path.exists(os.path.join(uri, cdc))
    with pytest.raises(VersionNotFoundError, match="VACUUM"):
        changes_dataframe(spark, uri, 1)
    assert sorted(r["id"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()) == [0, 2, 3]


def test_a_rewrite_made_while_the_feed_was_off_is_refused_by_version(spark, tmp_path):
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select id, id as v from range(4)"), uri)
    ops.delete(spark, uri, "id = 1")  # 1: rewritten without change data
    with pytest.raises(UnsupportedFeatureError) as err:
        changes_dataframe(spark, uri, 0)
    assert "version 1" in str(err.value) and "delta.enableChangeDataFeed" in str(err.value)


@pytest.mark.parametrize("name", ["deltars/cdf-table", "deltars/cdf-table-non-partitioned", "deltars/cdc_ict_table",
                                  "deltars/simple_table_with_cdc"])
def test_other_writers_change_data_reads_as_delta_rs_reads_it(spark, name):
    uri = str(require(WILD / name))
    assert _ours(spark, uri, 0) == _theirs(uri, 0)


def test_rows_marked_in_deletion_vectors_without_change_data_files(spark, tmp_path):
    """Another writer's DELETEs that marked rows in DVs and wrote no change data: each commit's changes
    are exactly the rows its new DV added (read from the file through the DVs), then, when the file
    goes, its rows still live; a DV shrinking (rows brought back) reads as inserts."""
    from deltalog import DeltaTable, write_deltalake
    from deltalog.actions import now_ms
    from deltalog.deletion_vectors import mark_rows

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([7] * 10, pa.int64())}),
                    configuration={**CDF, "delta.enableDeletionVectors": "true"})
    table = DeltaTable(uri)

    def commit(actions_of):
        txn = table.transaction()
        add = txn.snapshot.add_files()[0]
        txn.read_files([add])
        txn.add_actions(actions_of(txn, add))
        return txn.commit(operation="DELETE")

    def marked(rows):
        return lambda txn, add: (lambda m: [*m.removes, *m.adds])(mark_rows(txn.store, [(add, rows)], now_ms()))

    v1 = commit(marked([1, 2]))
    v2 = commit(marked([2, 5]))  # row 2 was already gone: only 5 is new
    v3 = commit(lambda txn, add: [add.remove()])  # the file goes with its DV: its live rows
    assert _changes(spark, uri, v1) == [("delete", 1, 7), ("delete", 2, 7)]
    assert _changes(spark, uri, v2) == [("delete", 5, 7)]
    assert _changes(spark, uri, v3) == [("delete", i, 7) for i in range(10) if i not in (1, 2, 5)]
    every = changes_dataframe(spark, uri, 0).collect()
    assert sorted((r["_commit_version"], r["id"]) for r in every if r["_change_type"] == "delete") == \
        [(1, 1), (1, 2), (2, 5)] + [(3, i) for i in range(10) if i not in (1, 2, 5)]
    assert sorted(r["id"] for r in every if r["_change_type"] == "insert") == list(range(10))

    # a DV replaced by a smaller one (rows brought back, as RESTORE does): those rows read as inserts
    uri2 = str(tmp_path / "t2")
    write_deltalake(uri2, pa.table({"id": pa.array(range(4), pa.int64()), "v": pa.array([1] * 4, pa.int64())}),
                    configuration={**CDF, "delta.enableDeletionVectors": "true"})
    table = DeltaTable(uri2)
    commit(marked([0, 3]))
    before = Snapshot.load(uri2, version=0).add_files()[0]
    back = commit(lambda txn, add: [add.remove(), before])  # the file without its DV again
    assert _changes(spark, uri2, back) == [("insert", 0, 1), ("insert", 3, 1)]


@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_a_merge_gives_its_feed_the_values_it_gives_the_table(spark, tmp_path, dvs):
    """A MERGE writes its data files and its change data files in two Spark jobs: what it computes itself
    (here `current_timestamp()`, different in each job) must be computed once, or the feed's inserts and
    postimages disagree with the table they describe."""
    uri = str(tmp_path / "t")
    config = {**CDF, "delta.enableDeletionVectors": "true"} if dvs else CDF
    ops.write_dataframe(spark.sql("select id, cast(null as timestamp) as ts from range(0, 4000, 2)"), uri,
                        configuration=config)
    source = spark.sql("select id from range(1000, 3000)")  # 500 rows matched, 1,000 inserted
    ops.merge(spark, uri, source, on="DBT_INTERNAL_DEST.id = DBT_INTERNAL_SOURCE.id",
              when_matched_update={"ts": "current_timestamp()"},
              when_not_matched_insert={"id": "DBT_INTERNAL_SOURCE.id", "ts": "current_timestamp()"})
    # both read by Spark: delta-rs reads no change feed of a table with deletion vectors
    table = {r["id"]: r["ts"] for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect()}
    feed = [r.asDict() for r in changes_dataframe(spark, uri, 1, 1).collect()]
    new = [r for r in feed if r["_change_type"] in ("insert", "update_postimage")]
    assert sorted(r["_change_type"] for r in new).count("insert") == 1000 and len(new) == 2000
    assert [r for r in new if r["ts"] != table[r["id"]]] == []
