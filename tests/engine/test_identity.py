"""Identity columns in the engine: the declaration's rules, the Arrow writer's numbering, the feature in
the protocol, and concurrent writers that all land with unique values (the loser's files rebased)."""
from __future__ import annotations

import glob
import json
import multiprocessing

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import identity
from deltalog.actions import Metadata
from deltalog.errors import InvalidTableError, SchemaMismatchError
from deltalog.snapshot import Snapshot
from deltalog.table import DeltaTable
from deltalog.write import write_deltalake


def identity_field(name="id", start=1, step=1, always=True, mark=None, type_="long"):
    md = {identity.START: start, identity.STEP: step, identity.ALLOW_EXPLICIT_INSERT: not always}
    if mark is not None:
        md[identity.HIGH_WATER_MARK] = mark
    return {"name": name, "type": type_, "nullable": True, "metadata": md}


def create(path, *fields):
    schema = {"type": "struct", "fields": [*fields, {"name": "v", "type": "string", "nullable": True, "metadata": {}}]}
    txn = DeltaTable(str(path)).transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(schema)))
    txn.commit(operation="CREATE TABLE")
    return str(path)


def ids(path, column="id"):
    snap = Snapshot.load(path)
    return sorted(v for uri in snap.file_uris() for v in pq.read_table(uri).column(column).to_pylist())


def mark(path, column="id"):
    return identity.marks(Snapshot.load(path).schema_json)[column]


@pytest.mark.parametrize("start, step, mark_, expected", [
    (1, 1, None, 1), (1, 1, 4, 5), (10, 5, 20, 25), (10, 5, 22, 25), (-1, -1, None, -1), (-1, -1, -7, -8),
    (100, -10, 80, 70), (100, -10, 200, 100), (1, 1, -50, 1)])
def test_first_value_past_the_mark(start, step, mark_, expected):
    assert identity.first_value_past(start, step, mark_) == expected


def test_declarations_are_checked_by_column(tmp_path):
    with pytest.raises(InvalidTableError, match="'id'.*type is 'integer'.*must be long"):
        identity.identity_columns({"fields": [identity_field(type_="integer")]}, "t")
    with pytest.raises(InvalidTableError, match="'id'.*step=0 is not allowed"):
        identity.identity_columns({"fields": [identity_field(step=0)]}, "t")
    bad = identity_field()
    del bad["metadata"][identity.START]
    with pytest.raises(InvalidTableError, match="'id' lacks delta.identity.start"):
        identity.identity_columns({"fields": [bad]}, "t")
    with pytest.raises(InvalidTableError, match="'id'.*not a whole number"):
        identity.identity_columns({"fields": [identity_field(mark="x")]}, "t")
    # a table is never created with a malformed declaration: nothing is committed
    with pytest.raises(InvalidTableError, match="must be long"):
        create(tmp_path / "t", identity_field(type_="string"))
    assert not DeltaTable(str(tmp_path / "t")).exists()


def test_arrow_writes_number_rows_past_the_mark_and_commit_it(tmp_path):
    t = create(tmp_path / "t", identity_field(start=10, step=5))
    snap = Snapshot.load(t)
    assert snap.protocol.has_writer_feature("identityColumns")
    assert mark(t) is None
    write_deltalake(t, pa.table({"v": ["a", "b", "c"]}), mode="append")
    assert (ids(t), mark(t)) == ([10, 15, 20], 20)
    write_deltalake(t, pa.table({"v": ["d"]}), mode="append")
    assert (ids(t), mark(t)) == ([10, 15, 20, 25], 25)
    deltalake = pytest.importorskip("deltalake")  # delta-rs reads the table (it writes no identity columns)
    assert sorted(deltalake.DeltaTable(t).to_pyarrow_table().column("id").to_pylist()) == [10, 15, 20, 25]
    # the mark is committed with the rows, in the same version's metaData
    version = Snapshot.load(t).version
    lines = [json.loads(x) for x in open(f"{t}/_delta_log/{version:020d}.json")]
    assert any("metaData" in x for x in lines) and any("add" in x for x in lines)


def test_negative_step_counts_down(tmp_path):
    t = create(tmp_path / "t", identity_field(start=-1, step=-2))
    write_deltalake(t, pa.table({"v": ["a", "b"]}), mode="append")
    write_deltalake(t, pa.table({"v": ["c"]}), mode="append")
    assert (ids(t), mark(t)) == ([-5, -3, -1], -5)


def test_always_refuses_given_values_by_default_keeps_them(tmp_path):
    t = create(tmp_path / "t", identity_field())
    with pytest.raises(SchemaMismatchError, match="column 'id' is an identity column generated always"):
        write_deltalake(t, pa.table({"id": [7], "v": ["x"]}), mode="append")
    assert Snapshot.load(t).version == 0
    d = create(tmp_path / "d", identity_field(always=False))
    write_deltalake(d, pa.table({"v": ["a"]}), mode="append")
    write_deltalake(d, pa.table({"id": [100], "v": ["given"]}), mode="append")
    assert (ids(d), mark(d)) == ([1, 100], 1)  # a given value leaves the mark where it was (as Delta)
    write_deltalake(d, pa.table({"v": ["b"]}), mode="append")
    assert (ids(d), mark(d)) == ([1, 2, 100], 2)


def test_a_loser_moves_its_values_past_the_winners_mark(tmp_path):
    """Two transactions read the same mark; the second to commit rewrites its file past the first's."""
    t = create(tmp_path / "t", identity_field(start=1, step=3))
    table = DeltaTable(t)

    def staged(values):
        txn = table.transaction()
        numbering = identity.numberings(txn.metadata.schema_json, ["v"], t)[0]
        data = pa.table({"id": numbering.take(len(values), t), "v": values})
        path = f"part-{values[0]}.parquet"
        pq.write_table(data, f"{t}/{path}")
        from deltalog.stats import StatsCollector
        stats = StatsCollector(txn.metadata.schema_json)
        stats.update(data)
        from deltalog.actions import AddFile
        import os
        add = AddFile(path, {}, os.path.getsize(f"{t}/{path}"), 0, True, stats.to_json())
        txn.add_actions([add])
        txn.record_identity([numbering.generated([path])])
        return txn

    first, second = staged(["a", "b"]), staged(["c", "d", "e"])
    assert first.commit() == 1
    assert second.commit() == 2
    assert (ids(t), mark(t)) == ([1, 4, 7, 10, 13], 13)
    assert not glob.glob(f"{t}/part-c.parquet")  # the loser's first file is gone, its rebased one committed
    snap = Snapshot.load(t)
    stats = [json.loads(s) for s in snap.files.column("stats").to_pylist()]
    assert sorted((s["minValues"]["id"], s["maxValues"]["id"]) for s in stats) == [(1, 4), (7, 13)]


def test_a_loser_that_cannot_move_its_values_conflicts_and_others_land(tmp_path):
    """A commit whose generated values share files with kept rows (a MERGE) cannot be moved: it conflicts,
    nothing committed. A commit that numbered nothing (a removal) lands after a winner that moved the mark."""
    from deltalog.errors import MetadataChangedException

    t = create(tmp_path / "t", identity_field())
    write_deltalake(t, pa.table({"v": ["a"]}), mode="append")
    table = DeltaTable(t)
    mixed, removal = table.transaction(), table.transaction()
    column = identity.identity_columns(mixed.metadata.schema_json, t)[0]
    mixed.record_identity([identity.GeneratedValues(column, 2, 2, frozenset(), rebasable=False)])
    removal.add_actions([f.remove() for f in removal.snapshot.add_files()])
    write_deltalake(t, pa.table({"v": ["winner"]}), mode="append")
    with pytest.raises(MetadataChangedException, match="identity column 'id' values were generated concurrently"):
        mixed.commit()
    assert removal.commit() == 3
    assert (ids(t), mark(t)) == ([2], 2)


def _appender(args):
    path, worker, appends = args
    for i in range(appends):
        write_deltalake(path, pa.table({"v": [f"{worker}-{i}-{k}" for k in range(3)]}), mode="append")


def test_four_processes_append_at_once_and_every_row_lands_with_a_unique_id(tmp_path):
    t = create(tmp_path / "t", identity_field())
    workers, appends = 4, 25
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_appender, [(t, w, appends) for w in range(workers)])
    snap = Snapshot.load(t)
    rows = [r for uri in snap.file_uris() for r in pq.read_table(uri).to_pylist()]
    assert sorted(r["v"] for r in rows) == sorted(f"{w}-{i}-{k}" for w in range(workers) for i in range(appends)
                                                  for k in range(3))
    values = [r["id"] for r in rows]
    assert len(set(values)) == len(values) == workers * appends * 3
    assert mark(t) == max(values)
    # each loser moved exactly past its winner's mark: no value skipped either
    assert sorted(values) == list(range(1, workers * appends * 3 + 1))
    assert snap.version == workers * appends


def test_a_mark_never_moves_back_within_the_tables_life(tmp_path):
    t = create(tmp_path / "t", identity_field())
    write_deltalake(t, pa.table({"v": ["a", "b"]}), mode="append")
    txn = DeltaTable(t).transaction()
    stale = identity.with_marks(txn.metadata.schema_json, {"id": 1})
    txn.update_metadata(Metadata(schema_string=json.dumps(stale)))
    assert identity.marks(txn.metadata.schema_json)["id"] == 2
    txn = DeltaTable(t).transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(stale)), replaces_table=True)
    assert identity.marks(txn.metadata.schema_json)["id"] == 1  # a replace may restart
