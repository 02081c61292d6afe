"""A MERGE with a small source and key equality alone (merge-on-read, or copy-on-write whose updates set
every column from the source) is matched on the driver (the
target's key columns read with pyarrow, `deltalog.row_match`), not by a Spark scan of the table. Each
test runs the same merge both ways (the driver match turned off by a zero row limit) and checks that
the tables end the same, as delta-rs reads them."""
from __future__ import annotations

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import row_match
from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.dml.merge import match as merge_match

pytestmark = pytest.mark.spark
DVS = {"delta.enableDeletionVectors": "true"}
ON = "t.id = s.id"


def _rows(uri) -> list[dict]:
    ours = sorted(read_table(Snapshot.load(uri)).select(["id", "k", "s"]).to_pylist(), key=lambda r: (r["id"] is None, r["id"], r["s"]))
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri)).execute("select id, k, s from t")
    theirs = pa.table(query.read_all()).to_pylist()
    assert sorted(theirs, key=lambda r: (r["id"] is None, r["id"], r["s"])) == ours
    return ours


def _both_ways(spark, tmp_path, monkeypatch, build, change) -> tuple[list[dict], int]:
    """(the rows after `change`, how many times the driver matched) with the driver match on; the same
    change with it off must leave the same rows."""
    calls = []
    original = row_match.matching_rows

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    results = []
    for on_driver in (True, False):
        uri = str(tmp_path / f"t_{on_driver}")
        build(uri)
        with monkeypatch.context() as m:
            m.setattr(row_match, "matching_rows", counted)
            if not on_driver:
                m.setattr(merge_match, "_DRIVER_MATCH_SOURCE_ROWS", 0)
            change(uri)
        results.append(_rows(uri))
        if on_driver:
            matched_on_driver = len(calls)
    assert results[0] == results[1]
    return results[0], matched_on_driver


def _table(spark, uri, files=4, configuration=DVS):
    ops.write_dataframe(spark.range(1000).selectExpr("id", "id % 7 AS k", "'a' AS s").repartition(files), uri,
                        configuration=configuration)


def test_an_upsert_matches_on_the_driver_and_deleted_rows_never_match(spark, tmp_path, monkeypatch):
    def change(uri):
        ops.delete(spark, uri, "id % 100 = 3")  # marked in DVs: a source row with such an id is new again
        source = spark.sql("SELECT id, 100L AS k, 'b' AS s FROM range(3, 2000, 50)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")
        metrics = deltalake.DeltaTable(uri).history()[0]["operationMetrics"]
        assert metrics["numTargetRowsUpdated"] == "10" and metrics["numTargetRowsInserted"] == "30", metrics
        # ids within the key range of the file the first merge inserted (1003, 1053, ...): no row matches
        source = spark.sql("SELECT id, 1L AS k, 'n' AS s FROM range(1004, 1010)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch, lambda uri: _table(spark, uri), change)
    assert on_driver == 2
    by_id = {r["id"]: (r["k"], r["s"]) for r in rows}
    assert len(by_id) == len(rows) == 1000 - 10 + 30 + 6 and by_id[1009] == (1, "n")
    assert by_id[53] == (100, "b") and by_id[103] == (100, "b") and by_id[54] == (54 % 7, "a")


def test_two_source_rows_for_one_target_row_fail_naming_the_key(spark, tmp_path):
    uri = str(tmp_path / "t")
    _table(spark, uri)
    source = spark.sql("SELECT id, 1L AS k, 'b' AS s FROM range(10) UNION ALL SELECT 7L, 2L, 'c'")
    with pytest.raises(ops.MergeDuplicateSourceError, match=r"id=7\b.*appears 2 times"):
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t", when_matched_update="*")
    assert Snapshot.load(uri).version == 0  # nothing committed


def test_null_keys_never_match_and_two_keys_match_together(spark, tmp_path, monkeypatch):
    def build(uri):
        df = spark.sql("SELECT IF(id = 5, NULL, id) AS id, CAST(id % 3 AS STRING) AS s, id AS k FROM range(30)")
        ops.write_dataframe(df.repartition(3), uri, configuration=DVS)

    def change(uri):
        source = spark.sql("SELECT * FROM VALUES (CAST(NULL AS BIGINT), '2', 1000L), (4L, '1', 1004L), "
                           "(4L, '2', 2004L), (6L, '0', 1006L) AS v(id, s, k)")
        ops.merge(spark, uri, source, "t.id = s.id AND t.s = s.s", source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch, build, change)
    assert on_driver == 1
    got = {(r["id"], r["s"]): r["k"] for r in rows}
    assert got[(4, "1")] == 1004 and got[(4, "2")] == 2004 and got[(6, "0")] == 1006  # updated, inserted, updated
    assert sorted(r["k"] for r in rows if r["id"] is None) == [5, 1000]  # the null key row was inserted


def test_what_the_driver_cannot_match_exactly_goes_to_spark(spark, tmp_path, monkeypatch):
    # an int source key against a long column (Spark widens it), and a condition besides key equality
    def change(uri):
        source = spark.sql("SELECT CAST(id AS INT) AS id, 5L AS k, 'i' AS s FROM range(0, 100, 10)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")
        source = spark.sql("SELECT id, 6L AS k, 'c' AS s FROM range(0, 100, 5)")
        ops.merge(spark, uri, source, f"{ON} AND t.k < 6", source_alias="s", target_alias="t",
                  when_matched_update="*")

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch, lambda uri: _table(spark, uri), change)
    assert on_driver == 0
    by_id = {r["id"]: (r["k"], r["s"]) for r in rows}
    assert by_id[10] == (6, "c") and by_id[15] == (6, "c") and by_id[11] == (11 % 7, "a")


def test_row_match_reads_only_live_rows_of_the_files(spark, tmp_path):
    uri = str(tmp_path / "t")
    _table(spark, uri)
    ops.delete(spark, uri, "id < 500")
    snap = Snapshot.load(uri)
    keys = pa.table({"id": pa.array([1, 499, 500, 999, 5000], pa.int64()), "n": [0, 1, 2, 3, 4]})
    pairs = row_match.matching_rows(snap, snap.files, keys, ["id"])
    assert sorted(pairs.column("n").to_pylist()) == [2, 3]
    files = snap.files.column("path").to_pylist()
    for f, row, n in zip(*(pairs.column(c).to_pylist() for c in (row_match.FILE, row_match.ROW_INDEX, "n"))):
        stored = pq.read_table(f"{uri}/{files[f]}")  # the row it names, read straight from the file
        assert stored.column("id")[row].as_py() == (500 if n == 2 else 999)


def test_a_small_merge_on_read_writes_its_changed_rows_as_one_file_both_ways(spark, tmp_path, monkeypatch):
    """An upsert of 50 rows from an 8-partition source (every row updates one target row) and one with
    inserts too: the new rows go into as few files as their size needs, not one per source partition."""
    def upsert(uri, ids):
        source = spark.range(0, ids * 20, 20).selectExpr("id", "id % 7 AS k", "'b' AS s").repartition(8)
        ops.merge(spark, uri, source, ON, when_matched_update="*", when_not_matched_insert="*",
                  source_alias="s", target_alias="t")
        before = {a.path for a in Snapshot.load(uri, version=Snapshot.load(uri).version - 1).add_files()}
        return [a for a in Snapshot.load(uri).add_files() if a.path not in before]

    for ids, inserted in ((50, 0), (100, 50)):  # ids 0..980 update, 1000..1980 insert
        new_files = {}

        def change(uri):
            new_files[uri] = upsert(uri, ids)

        rows, on_driver = _both_ways(spark, tmp_path / str(ids), monkeypatch, lambda uri: _table(spark, uri), change)
        assert on_driver == 1
        assert len(rows) == 1000 + inserted
        assert sum(r["s"] == "b" for r in rows) == ids
        assert [len(adds) for adds in new_files.values()] == [1, 1]
        assert [sum(a.num_records for a in adds) for adds in new_files.values()] == [ids, ids]


def test_a_copy_on_write_upsert_matches_on_the_driver_and_copies_the_rest_of_each_touched_file(
        spark, tmp_path, monkeypatch):
    """Without deletion vectors the touched files are rewritten whole: their unmatched rows copied, the
    matched ones replaced by the source's (metrics as delta-spark counts them), both ways alike."""
    def change(uri):
        source = spark.sql("SELECT id, 100L AS k, 'b' AS s FROM range(3, 2000, 50)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")
        table = deltalake.DeltaTable(uri)
        metrics = table.history()[0]["operationMetrics"]
        assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == ("20", "20"), metrics
        assert metrics["numTargetRowsCopied"] == str(1000 - 20) and metrics["numTargetFilesRemoved"] == "4"
        assert not any(a.deletion_vector for a in Snapshot.load(uri).add_files())  # nothing marked: rewritten

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch,
                                 lambda uri: _table(spark, uri, configuration={}), change)
    assert on_driver == 1
    by_id = {r["id"]: (r["k"], r["s"]) for r in rows}
    assert len(by_id) == len(rows) == 1000 + 20
    assert by_id[53] == (100, "b") and by_id[1953] == (100, "b") and by_id[54] == (54 % 7, "a")


def test_copy_on_write_over_files_with_deletion_vectors_keeps_deleted_rows_deleted(spark, tmp_path, monkeypatch):
    """A table whose files still carry deletion vectors after they were turned off: the copy leaves out
    both the rows deleted before and the rows this merge replaces."""
    def build(uri):
        _table(spark, uri)
        ops.delete(spark, uri, "id % 10 = 0")  # marked in DVs
        deltalake.DeltaTable(uri).alter.set_table_properties({"delta.enableDeletionVectors": "false"})

    def change(uri):
        source = spark.sql("SELECT id, 9L AS k, 'u' AS s FROM range(0, 1000, 4)")  # ids % 20 == 0 are gone
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch, build, change)
    assert on_driver == 1
    by_id = {r["id"]: (r["k"], r["s"]) for r in rows}
    assert len(by_id) == len(rows) == 950  # 100 deleted, the 50 of them in the source inserted again
    assert by_id[20] == (9, "u") and by_id[4] == (9, "u") and 10 not in by_id and by_id[7] == (0, "a")


def test_copy_on_write_on_the_driver_keeps_partitions_and_mapped_column_names(spark, tmp_path, monkeypatch):
    """The copied rows are read back by logical name (column mapping) with their partition values."""
    def build(uri):
        df = spark.range(600).selectExpr("id", "id % 3 AS `part key`", "CAST(id AS STRING) AS `a b`")
        ops.write_dataframe(df.repartition(4), uri, partition_by=["part key"],
                            configuration={"delta.columnMapping.mode": "name"})

    def change(uri):
        source = spark.sql("SELECT id, id % 3 AS `part key`, 'new' AS `a b` FROM range(5, 700, 10)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")

    def rows(uri):
        query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri)).execute(
            'select id, "part key", "a b" from t')
        return sorted((r["id"], r["part key"], r["a b"]) for r in pa.table(query.read_all()).to_pylist())

    results, calls = [], []
    original = row_match.matching_rows
    for on_driver in (True, False):
        uri = str(tmp_path / f"t_{on_driver}")
        build(uri)
        with monkeypatch.context() as m:
            m.setattr(row_match, "matching_rows", lambda *a, **k: calls.append(1) or original(*a, **k))
            if not on_driver:
                m.setattr(merge_match, "_DRIVER_MATCH_SOURCE_ROWS", 0)
            change(uri)
        results.append(rows(uri))
    assert calls == [1] and results[0] == results[1]
    assert len(results[0]) == 600 + 10 and (15, 0, "new") in results[0] and (16, 1, "16") in results[0]


def _metrics(uri) -> dict:
    m = deltalake.DeltaTable(uri).history()[0]["operationMetrics"]
    return {k: m[k] for k in ("numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsInserted",
                              "numTargetRowsCopied", "numSourceRows")}


@pytest.mark.parametrize("configuration", [DVS, {}], ids=["merge-on-read", "copy-on-write"])
def test_clause_conditions_of_the_source_alone_match_on_the_driver(spark, tmp_path, monkeypatch, configuration):
    """A change-capture MERGE: delete where the change is a delete, update (every column but the key,
    which the match keeps) where it is an upsert, insert unmatched upserts. A pair no clause acts on
    changes nothing and is no insert; two source rows on one target row are no error while at most one
    acts. Rows and metrics are those of Spark's match."""
    metrics = {}

    def change(uri):
        source = spark.sql(
            "SELECT * FROM VALUES (3L, 30L, 'u', 'x'), (4L, 40L, 'd', 'x'), (5L, 50L, 'n', 'x'), "
            "(6L, 60L, 'n', 'x'), (6L, 61L, 'u', 'y'), (2000L, 7L, 'u', 'z'), (2001L, 8L, 'd', 'z'), "
            "(2002L, 9L, 'n', 'z') AS v(id, k, op, s)")
        update = {"k": "s.k", "s": "s.s"} if configuration else "*"
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_delete_condition="s.op = 'd'", when_matched_condition="s.op = 'u'",
                  when_matched_update=update, when_not_matched_insert={"id": "s.id", "k": "s.k", "s": "s.s"},
                  when_not_matched_condition="s.op = 'u'")
        metrics[uri] = _metrics(uri)

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch, lambda uri: _table(spark, uri, configuration=configuration),
                                 change)
    assert on_driver == 1
    by_id = {r["id"]: (r["k"], r["s"]) for r in rows}
    assert by_id[3] == (30, "x") and 4 not in by_id and by_id[5] == (5, "a") and by_id[6] == (61, "y")
    assert by_id[2000] == (7, "z") and 2001 not in by_id and 2002 not in by_id and len(by_id) == len(rows) == 1000
    first, second = metrics.values()
    assert first == second, metrics
    assert (first["numTargetRowsUpdated"], first["numTargetRowsDeleted"], first["numTargetRowsInserted"]) == \
        ("2", "1", "1")


def test_two_acting_source_rows_on_one_target_row_fail_on_the_driver(spark, tmp_path):
    uri = str(tmp_path / "t")
    _table(spark, uri)
    source = spark.sql("SELECT * FROM VALUES (7L, 1L, 'u', 'b'), (7L, 2L, 'd', 'c') AS v(id, k, op, s)")
    with pytest.raises(ops.MergeDuplicateSourceError, match=r"id=7\b.*appears 2 times"):
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_delete_condition="s.op = 'd'", when_matched_update={"k": "s.k", "s": "s.s"})
    assert Snapshot.load(uri).version == 0  # nothing committed


def test_a_condition_on_the_target_or_unqualified_goes_to_spark(spark, tmp_path, monkeypatch):
    """A condition reading the target, or naming a column without its side (which only the join's
    analysis tells), is matched by Spark."""
    def change(uri):
        source = spark.sql("SELECT id, 100L AS k, 'b' AS s, 'u' AS op FROM range(0, 50, 5)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_condition="t.k < 3", when_matched_update={"k": "s.k", "s": "s.s"})
        source = spark.sql("SELECT id, 200L AS k, 'c' AS s, IF(id = 40, 'u', 'x') AS op FROM range(40, 50)")
        ops.merge(spark, uri, source, ON, source_alias="s", target_alias="t",
                  when_matched_condition="op = 'u'", when_matched_update={"k": "s.k", "s": "s.s"})

    rows, on_driver = _both_ways(spark, tmp_path, monkeypatch, lambda uri: _table(spark, uri), change)
    assert on_driver == 0
    by_id = {r["id"]: (r["k"], r["s"]) for r in rows}
    assert by_id[15] == (100, "b") and by_id[5] == (5, "a")  # 15 % 7 = 1 < 3; 5 % 7 = 5
    assert by_id[40] == (200, "c") and by_id[41] == (41 % 7, "a")
