"""Identity columns written by the Spark writer: table writes, appends, merge inserts, replace-where
(delete+insert) and streaming batches number the rows that leave the column out past the high-water mark
and commit the new mark with them; given values are refused (always) or kept (by default)."""
import json

import pytest

from deltalog import identity
from deltalog.errors import SchemaMismatchError
from deltalog.snapshot import Snapshot
from deltalog.spark.operations import merge, write_dataframe
from deltalog.spark.reader import snapshot_dataframe
from deltalog.spark.streaming import batch_writer

pytestmark = pytest.mark.spark


def schema(start=1, step=1, always=True, name="id"):
    return {"type": "struct", "fields": [
        {"name": name, "type": "long", "nullable": True, "metadata": {
            identity.START: start, identity.STEP: step, identity.ALLOW_EXPLICIT_INSERT: not always}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}}]}


def rows(spark, uri):
    return sorted((r.id, r.v) for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect())


def mark(uri):
    return identity.marks(Snapshot.load(uri).schema_json)["id"]


def values(spark, *vs, partitions=1):
    return spark.createDataFrame([(v,) for v in vs], "v string").repartition(partitions)


def test_a_new_table_and_appends_number_rows_past_the_mark(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b", "c"), uri, mode="error", table_schema=schema(start=100, step=10))
    snap = Snapshot.load(uri)
    assert snap.protocol.has_writer_feature("identityColumns")
    assert [r[0] for r in rows(spark, uri)] == [100, 110, 120]  # one task: dense
    assert mark(uri) == 120
    write_dataframe(values(spark, "d", "e"), uri, mode="append")
    ids = [r[0] for r in rows(spark, uri)]
    assert sorted(ids) == [100, 110, 120, 130, 140] and mark(uri) == 140
    # the mark lands in the same commit as the rows
    lines = [json.loads(x) for x in open(f"{uri}/_delta_log/{Snapshot.load(uri).version:020d}.json")]
    assert any("metaData" in x for x in lines) and any("add" in x for x in lines)


def test_many_tasks_give_unique_values_monotone_past_the_mark(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a"), uri, mode="error", table_schema=schema())
    df = spark.range(1000).selectExpr("cast(id as string) as v").repartition(4)
    write_dataframe(df, uri, mode="append")
    ids = [r[0] for r in rows(spark, uri)]
    assert len(ids) == len(set(ids)) == 1001
    assert min(i for i in ids if i != 1) > 1 and mark(uri) == max(ids)


def test_negative_step(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema(start=-1, step=-5))
    write_dataframe(values(spark, "c"), uri, mode="append")
    assert sorted(r[0] for r in rows(spark, uri)) == [-11, -6, -1] and mark(uri) == -11


def test_always_refuses_given_values_by_name_and_commits_nothing(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a"), uri, mode="error", table_schema=schema())
    given = spark.createDataFrame([(7, "x")], "id long, v string")
    with pytest.raises(SchemaMismatchError, match="column 'id' is an identity column generated always"):
        write_dataframe(given, uri, mode="append")
    assert Snapshot.load(uri).version == 0


def test_by_default_keeps_given_values_and_the_mark(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a"), uri, mode="error", table_schema=schema(always=False))
    write_dataframe(spark.createDataFrame([(50, "given")], "id long, v string"), uri, mode="append")
    assert mark(uri) == 1
    write_dataframe(values(spark, "b"), uri, mode="append")
    assert rows(spark, uri) == [(1, "a"), (2, "b"), (50, "given")] and mark(uri) == 2


def test_merge_inserts_are_numbered_and_updates_keep_theirs(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema())
    source = spark.createDataFrame([("b", "B"), ("c", "C")], "v string, w string")
    merge(spark, uri, source, "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v",
          when_matched_update={"v": "DBT_INTERNAL_SOURCE.w"}, when_not_matched_insert={"v": "DBT_INTERNAL_SOURCE.w"})
    assert rows(spark, uri) == [(1, "a"), (2, "B"), (3, "C")] and mark(uri) == 3
    with pytest.raises(SchemaMismatchError, match="column 'id'"):
        merge(spark, uri, spark.createDataFrame([(9, "z")], "id long, v string"),
              "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v", when_not_matched_insert="*")


def test_a_merge_gives_its_change_feed_the_identity_values_it_gives_the_table(spark, tmp_path):
    """The data files and the change feed's insert rows are two Spark jobs: numbered once, both hold the
    same values (and the numbering's count still reaches the mark)."""
    from deltalog.spark.change_data import changes_dataframe

    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema(),
                    configuration={"delta.enableChangeDataFeed": "true"})
    source = spark.createDataFrame([("b", "B")] + [(f"n{i}", f"N{i}") for i in range(300)], "v string, w string")
    merge(spark, uri, source.repartition(3), "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v",
          when_matched_update={"v": "DBT_INTERNAL_SOURCE.w"}, when_not_matched_insert={"v": "DBT_INTERNAL_SOURCE.w"})
    table = dict((v, i) for i, v in rows(spark, uri))
    feed = [r for r in changes_dataframe(spark, uri, 1, 1).collect() if r["_change_type"] == "insert"]
    assert len(feed) == 300 and all(table[r["v"]] == r["id"] for r in feed)
    assert mark(uri) == max(table.values()) and len(set(table.values())) == 302


def test_replace_where_and_streaming_batches_number_rows(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema())
    write_dataframe(values(spark, "b"), uri, mode="overwrite", replace_where="v = 'b'")
    assert rows(spark, uri) == [(1, "a"), (3, "b")] and mark(uri) == 3
    write = batch_writer(uri, "identity-stream")
    write(values(spark, "s1", "s2"), 0)
    write(values(spark, "s3"), 1)
    write(values(spark, "s3"), 1)  # a batch run again is not written twice
    assert rows(spark, uri)[2:] == [(4, "s1"), (5, "s2"), (6, "s3")] and mark(uri) == 6


def test_a_spark_write_that_loses_the_race_moves_its_values_past_the_winners(spark, tmp_path, monkeypatch):
    """Another writer commits between this write's files and its commit: the commit lands anyway, its
    files rewritten with values past the winner's mark (partition folders kept)."""
    import pyarrow as pa

    from deltalog.transaction import Transaction
    from deltalog.write import write_deltalake

    uri = str(tmp_path / "t")
    df = spark.createDataFrame([("a", "p"), ("b", "q")], "v string, part string")
    declared = schema()
    declared["fields"].append({"name": "part", "type": "string", "nullable": True, "metadata": {}})
    write_dataframe(df, uri, mode="error", table_schema=declared, partition_by=["part"])
    original, raced = Transaction.commit, []

    def commit_after_a_winner(self, *args, **kwargs):
        if not raced:
            raced.append(True)
            write_deltalake(uri, pa.table({"v": ["w1", "w2"], "part": ["p", "p"]}), mode="append")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transaction, "commit", commit_after_a_winner)
    write_dataframe(spark.createDataFrame([("c", "p"), ("d", "q")], "v string, part string").coalesce(1), uri,
                    mode="append")
    got = {r.v: (r.id, r.part) for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect()}
    ids = [g[0] for g in got.values()]
    assert len(set(ids)) == len(ids) == 6 and mark(uri) == max(ids)
    first, winner, loser = ([got[v][0] for v in vs] for vs in (("a", "b"), ("w1", "w2"), ("c", "d")))
    assert max(first) < min(winner) and max(winner) < min(loser)  # the loser moved past the winner's mark
    assert sorted(loser) == [max(winner) + 1, max(winner) + 2]  # by the same amount: still dense (one task)
    assert (got["c"][1], got["d"][1]) == ("p", "q")  # its files rewritten in their partition folders
    stats = [json.loads(s) for s in Snapshot.load(uri).files.column("stats").to_pylist()]
    assert max(s["maxValues"]["id"] for s in stats) == max(loser)


def test_overwrite_keeps_the_mark_and_a_replaced_schema_restarts_it(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema())
    write_dataframe(values(spark, "c", "d"), uri, mode="overwrite")
    assert [r[0] for r in rows(spark, uri)] == [3, 4] and mark(uri) == 4
    # a schema handed in without the mark (or with an older one) never moves it back
    write_dataframe(values(spark, "e"), uri, mode="append", table_schema=schema())
    assert [r[0] for r in rows(spark, uri)] == [3, 4, 5] and mark(uri) == 5
    # replacing the table and its schema (a full refresh) restarts at start, as CREATE OR REPLACE does
    write_dataframe(values(spark, "f"), uri, mode="overwrite", schema_mode="overwrite", table_schema=schema())
    assert rows(spark, uri) == [(1, "f")] and mark(uri) == 1


def test_a_merge_that_loses_to_a_numbering_writer_runs_again_past_its_mark(spark, tmp_path, monkeypatch):
    """A MERGE's inserts share files with the rows it keeps, so they cannot be moved in place: the merge
    runs again on the table as it now is, numbering its inserts past the winner's mark."""
    import pyarrow as pa

    from deltalog.transaction import Transaction
    from deltalog.write import write_deltalake

    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema())
    original, raced = Transaction.commit, []

    def commit_after_a_winner(self, *args, **kwargs):
        if not raced:
            raced.append(True)
            write_deltalake(uri, pa.table({"v": ["w"]}), mode="append")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transaction, "commit", commit_after_a_winner)
    source = spark.createDataFrame([("b", "B"), ("c", "C")], "v string, w string")
    merge(spark, uri, source, "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v",
          when_matched_update={"v": "DBT_INTERNAL_SOURCE.w"}, when_not_matched_insert={"v": "DBT_INTERNAL_SOURCE.w"})
    assert rows(spark, uri) == [(1, "a"), (2, "B"), (3, "w"), (4, "C")] and mark(uri) == 4


def test_a_rebase_under_column_mapping_moves_the_physical_column(spark, tmp_path, monkeypatch):
    from deltalog.transaction import Transaction

    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a"), uri, mode="error", table_schema=schema(),
                    configuration={"delta.columnMapping.mode": "name"})
    original, raced = Transaction.commit, []

    def commit_after_a_winner(self, *args, **kwargs):
        if not raced:
            raced.append(True)
            write_dataframe(values(spark, "w"), uri, mode="append")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transaction, "commit", commit_after_a_winner)
    write_dataframe(values(spark, "b"), uri, mode="append")
    assert rows(spark, uri) == [(1, "a"), (2, "w"), (3, "b")] and mark(uri) == 3
    snap = Snapshot.load(uri)
    physical = snap.schema_json["fields"][0]["metadata"]["delta.columnMapping.physicalName"]
    assert physical != "id"  # the files name the column by its physical name: the rebase moved that one
    stats = [json.loads(s) for s in snap.files.column("stats").to_pylist()]
    assert sorted(s["maxValues"][physical] for s in stats) == [1, 2, 3]


@pytest.mark.parametrize("always", [True, False])
def test_a_merge_that_updates_an_identity_column_is_refused_by_name_and_commits_nothing(spark, tmp_path, always):
    uri = str(tmp_path / "t")
    write_dataframe(values(spark, "a", "b"), uri, mode="error", table_schema=schema(always=always))
    before = Snapshot.load(uri).version
    on = "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v"
    with pytest.raises(SchemaMismatchError, match="column 'id' is an identity column.*may not set it"):
        merge(spark, uri, spark.createDataFrame([(9, "b")], "id long, v string"), on, when_matched_update="*")
    with pytest.raises(SchemaMismatchError, match="column 'id' is an identity column"):
        merge(spark, uri, values(spark, "a"), on, when_matched_update={"id": "42"})
    assert Snapshot.load(uri).version == before and rows(spark, uri) == [(1, "a"), (2, "b")]
