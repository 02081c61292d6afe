"""MERGE (copy-on-write): only files holding matched rows are rewritten; conflicts, errors, metrics."""
import json

import pytest

from deltalog.errors import ConcurrentDeleteReadException, NotATableError
from deltalog.snapshot import Snapshot
from deltalog.spark.operations import MergeDuplicateSourceError, delete, merge, write_dataframe
from deltalog.spark.reader import snapshot_dataframe

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark

ON = "DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id"


def table_rows(spark, uri):
    return {r.id: r.asDict() for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect()}


def make_table(spark, uri, n=100, files=4):
    # ids in disjoint ranges per file, so min/max stats separate the files
    df = spark.sql(f"select id, concat('v', id) as val, id % 5 as grp from range({n}) t(id)")
    write_dataframe(df.repartitionByRange(files, "id"), uri, mode="error")
    return Snapshot.load(uri)


def test_merge_updates_subset_of_files_and_inserts(spark, tmp_path):
    uri = str(tmp_path / "m")
    before = make_table(spark, uri)
    assert before.num_files == 4
    source = spark.sql("select * from values (3L, 'new3', 0L), (4L, 'new4', 0L), (1000L, 'ins', 1L) as s(id, val, grp)")
    v = merge(spark, uri, source, ON, when_matched_update="*", when_not_matched_insert="*")
    after = Snapshot.load(uri)
    assert v == after.version == 1
    live_before = set(before.files.column("path").to_pylist())
    live_after = set(after.files.column("path").to_pylist())
    assert len(live_before - live_after) == 1  # only the file holding ids 3 and 4 was rewritten
    assert len(live_before & live_after) == 3   # the other files stay live, untouched
    rows = table_rows(spark, uri)
    assert len(rows) == 101
    assert rows[3]["val"] == "new3" and rows[4]["val"] == "new4" and rows[1000]["val"] == "ins"
    assert rows[5]["val"] == "v5"
    h = deltalake.DeltaTable(uri).history(1)[0]
    assert h["operation"] == "MERGE"
    m = h["operationMetrics"]
    assert (int(m["numTargetRowsUpdated"]), int(m["numTargetRowsInserted"]), int(m["numTargetRowsDeleted"])) == (2, 1, 0)
    assert int(m["numTargetFilesRemoved"]) == 1 and int(m["numSourceRows"]) == 3
    assert json.loads(h["operationParameters"]["matchedPredicates"]) == [{"actionType": "update"}]
    rs = {r["id"]: r for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert len(rs) == 101 and rs[3]["val"] == "new3"


def test_merge_update_columns_and_conditions(spark, tmp_path):
    uri = str(tmp_path / "mc")
    make_table(spark, uri, n=20, files=2)
    source = spark.sql("select * from values (1L, 'a', 9L), (2L, 'b', 9L), (50L, 'c', 9L), (51L, 'd', 8L) as s(id, val, grp)")
    merge(spark, uri, source, ON,
          when_matched_update={"grp": "DBT_INTERNAL_SOURCE.grp"},  # merge_update_columns: only grp
          when_matched_condition="DBT_INTERNAL_SOURCE.id <> 2",
          when_not_matched_insert="*", when_not_matched_condition="DBT_INTERNAL_SOURCE.grp = 9")
    rows = table_rows(spark, uri)
    assert rows[1]["val"] == "v1" and rows[1]["grp"] == 9  # val not updated
    assert rows[2]["grp"] == 2                             # condition false: unchanged
    assert 50 in rows and 51 not in rows                   # insert condition


def test_merge_delete_insert_pattern(spark, tmp_path):
    uri = str(tmp_path / "di")
    make_table(spark, uri, n=20, files=2)
    source = spark.sql("select * from values (1L, 'x', 0L, 'delete'), (1L, 'x', 0L, 'insert'), "
                       "(99L, 'y', 0L, 'insert') as s(id, val, grp, tag)")
    merge(spark, uri, source, ON + " and DBT_INTERNAL_SOURCE.tag = 'delete'",
          when_matched_delete_condition="true",
          when_not_matched_insert={c: f"DBT_INTERNAL_SOURCE.{c}" for c in ("id", "val", "grp")},
          when_not_matched_condition="DBT_INTERNAL_SOURCE.tag = 'insert'")
    rows = table_rows(spark, uri)
    assert rows[1]["val"] == "x" and rows[99]["val"] == "y" and len(rows) == 21
    m = deltalake.DeltaTable(uri).history(1)[0]["operationMetrics"]
    assert int(m["numTargetRowsDeleted"]) == 1 and int(m["numTargetRowsInserted"]) == 2


def test_merge_empty_source_commits_nothing(spark, tmp_path):
    uri = str(tmp_path / "empty")
    make_table(spark, uri, n=10, files=1)
    source = spark.sql("select * from values (1L, 'a', 1L) as s(id, val, grp) where false")
    assert merge(spark, uri, source, ON, when_matched_update="*", when_not_matched_insert="*") is None
    assert Snapshot.load(uri).version == 0


def test_merge_nothing_matched_nothing_inserted(spark, tmp_path):
    uri = str(tmp_path / "nochange")
    make_table(spark, uri, n=10, files=1)
    source = spark.sql("select * from values (1000L, 'a', 1L) as s(id, val, grp)")
    assert merge(spark, uri, source, ON, when_matched_update="*") is None
    assert Snapshot.load(uri).version == 0


def test_merge_duplicate_source_keys_fail_clearly(spark, tmp_path):
    uri = str(tmp_path / "dup")
    make_table(spark, uri, n=10, files=1)
    source = spark.sql("select * from values (7L, 'a', 1L), (7L, 'b', 1L) as s(id, val, grp)")
    with pytest.raises(MergeDuplicateSourceError) as e:
        merge(spark, uri, source, ON, when_matched_update="*", when_not_matched_insert="*")
    assert uri in str(e.value) and "id=7" in str(e.value)
    assert Snapshot.load(uri).version == 0


def test_merge_into_missing_table(spark, tmp_path):
    with pytest.raises(NotATableError):
        merge(spark, str(tmp_path / "none"), spark.sql("select 1L as id"), ON, when_matched_update="*")


def test_merge_records_read_files_for_conflicts(spark, tmp_path, monkeypatch):
    """A concurrent DELETE of a file the merge read makes the merge fail, with nothing committed."""
    uri = str(tmp_path / "conflict")
    df = spark.sql("select id, concat('v', id) as val, id % 2 as grp from range(40) t(id)")
    write_dataframe(df, uri, mode="error", partition_by=["grp"])
    from deltalog.spark.dml.merge import commit as merge_module

    real_write_files = merge_module.write_files

    def racing_write_files(*args, **kwargs):
        adds = real_write_files(*args, **kwargs)
        monkeypatch.setattr(merge_module, "write_files", real_write_files)
        delete(spark, uri, "grp = 1")  # another writer wins meanwhile, removing the files the merge read
        return adds

    monkeypatch.setattr(merge_module, "write_files", racing_write_files)
    source = spark.sql("select * from values (3L, 'new', 1L) as s(id, val, grp)")
    with pytest.raises(ConcurrentDeleteReadException) as e:
        merge(spark, uri, source, ON, when_matched_update="*")
    assert e.value.winning_version == 1
    assert Snapshot.load(uri).version == 1  # only the winner's commit


def test_merge_partitioned_table_and_incremental_predicate(spark, tmp_path):
    uri = str(tmp_path / "part")
    df = spark.sql("select id, concat('v', id) as val, id % 3 as p from range(30) t(id)")
    write_dataframe(df, uri, mode="error", partition_by=["p"])
    before = Snapshot.load(uri)
    source = spark.sql("select * from values (0L, 'zero', 0L), (3L, 'three', 0L) as s(id, val, p)")
    merge(spark, uri, source, ON + " and (DBT_INTERNAL_DEST.p = 0)", when_matched_update="*",
          when_not_matched_insert="*")
    after = Snapshot.load(uri)
    kept = set(before.files.column("path").to_pylist()) & set(after.files.column("path").to_pylist())
    untouched = [dict(pv)["p"] for p, pv in zip(before.files.column("path").to_pylist(),
                                                 before.files.column("partition_values").to_pylist()) if p in kept]
    assert untouched.count("1") + untouched.count("2") == sum(
        1 for pv in before.files.column("partition_values").to_pylist() if dict(pv)["p"] != "0")
    rows = table_rows(spark, uri)
    assert rows[0]["val"] == "zero" and rows[3]["val"] == "three" and len(rows) == 30
    m = deltalake.DeltaTable(uri).history(1)[0]["operationMetrics"]
    assert int(m["numTargetFilesScanned"]) < before.num_files  # pruned by stats and the predicate


def test_merge_condition_parsing():
    from deltalog import sql
    S, T = "DBT_INTERNAL_SOURCE", "DBT_INTERNAL_DEST"
    on = (f"{S}.id = {T}.id and (`{T}`.`Order Id` = {S}.oid) and ({T}.day >= '2024-01-01' and "
          f"{T}.x = 'band') and {S}.n <=> {T}.n and {T}.s = 'it''s and ' and abs({T}.q) in (1, 2) "
          f"and ({T}.a = 1 or {S}.b = 2) and {S}.flag = 'x'")
    assert [sql.to_sql(c) for c in sql.conjuncts("a = 1 and (b = 2 and c = 3) AND d = 'x and y'")] == [
        "a = 1", "b = 2", "c = 3", "d = 'x and y'"]
    # `<=>` matches NULL keys, so it is not a key min/max statistics may prune by
    assert sql.equi_keys(on, S, T) == [("id", "id"), ("oid", "Order Id")]
    assert sql.only_alias_conjuncts(on, T, S) == [
        "day >= '2024-01-01'", "x = 'band'", "s = 'it\\'s and '", "ABS(q) IN (1, 2)"]
    assert sql.only_alias_conjuncts(on.lower(), T, S)[0] == "day >= '2024-01-01'"  # aliases ignore case


def test_merge_into_delta_rs_table_with_timestamp_key(spark, tmp_path):
    import datetime as dt
    import pyarrow as pa
    uri = str(tmp_path / "rs")
    utc = dt.timezone.utc
    ts = [dt.datetime(2024, 1, 1, tzinfo=utc) + dt.timedelta(hours=i) for i in range(10)]
    deltalake.write_deltalake(uri, pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                                             "v": list(range(10)), "p": ["a"] * 5 + ["b"] * 5}),
                              partition_by=["p"])
    source = spark.sql("select timestamp'2024-01-01 03:00:00' as ts, 100L as v, 'a' as p union all "
                       "select timestamp'2024-02-01 00:00:00', 200L, 'c'")
    v = merge(spark, uri, source, "s.ts = t.ts", when_matched_update="*", when_not_matched_insert="*",
              source_alias="s", target_alias="t")
    assert v == 1
    rows = {r["ts"].astimezone(utc): r for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert len(rows) == 11
    assert rows[dt.datetime(2024, 1, 1, 3, tzinfo=utc)]["v"] == 100
    assert rows[dt.datetime(2024, 2, 1, tzinfo=utc)]["p"] == "c"
    m = deltalake.DeltaTable(uri).history(1)[0]["operationMetrics"]
    assert int(m["numTargetFilesRemoved"]) == 1  # only the file holding 03:00 is rewritten


def test_a_small_cached_source_is_broadcast_to_the_matching_join(spark):
    """Spark's size estimate comes through Py4J as a Python int (a Scala BigInt); reading it wrong made
    every source look too big, so a 15 MB source was sort-merge joined with a 10M-row target."""
    from pyspark import StorageLevel

    source = spark.range(100_000).selectExpr("id", "sha2(cast(id as string), 256) AS token")
    source = source.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        source.count()
        from deltalog.spark.dml.merge.plan import fits_broadcast

        assert fits_broadcast(source)
    finally:
        source.unpersist()
