"""Every cell of DESIGN.md's conflict table, at both isolation levels, with two real transactions.

Both transactions start at the same version; the winner commits first, then the loser commits. Where
the table says "no conflict" both land (the loser retries at the next version) and the final state
holds both changes; where it says conflict, the loser raises the named exception, carrying the winning
version and operation, and writes no commit file.

Kinds (how the transaction behaves, as DESIGN.md defines them):
- insert:          blind append — only adds, reads nothing
- update/merge:    reads files (and the partition predicate), removes them, adds the rewritten rows
- delete:          reads files (and the partition predicate), removes them
- insert_reading:  an INSERT that reads the target (subquery on it): reads, only adds — counts as MERGE
- optimize:        reads files, removes and re-adds them with dataChange=false

"Same" = both touch partition `a` (the same files); "disjoint" = the winner works in partition `b`.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable, write_deltalake
from deltalog.actions import AddFile, now_ms
from deltalog.errors import (
    ConcurrentAppendException, ConcurrentDeleteDeleteException, ConcurrentDeleteReadException,
    ConcurrentModificationError,
)
from deltalog.paths import encode_path, new_data_file_path, partition_folder
from deltalog.expressions import col
from deltalog.stats import file_stats

LEVELS = ["Serializable", "WriteSerializable"]
LOSERS = ["insert", "update", "delete", "merge", "insert_reading", "optimize"]
WINNERS = ["insert", "update", "delete", "merge", "insert_reading", "optimize"]
OPERATION = {"insert": "WRITE", "update": "UPDATE", "delete": "DELETE", "merge": "MERGE",
             "insert_reading": "MERGE", "optimize": "OPTIMIZE"}


def make_table(path, level: str, partitioned: bool = True) -> DeltaTable:
    """Four one-row files: two in partition a, two in partition b (or unpartitioned)."""
    data = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "part": ["a", "a", "b", "b"]})
    write_deltalake(str(path), data, partition_by=["part"] if partitioned else None,
                    configuration={"delta.isolationLevel": level}, max_rows_per_file=1)
    return DeltaTable(str(path))


def new_file(table: DeltaTable, part: str | None, ids: list[int], data_change: bool = True) -> AddFile:
    """A real Parquet data file in the partition's folder and its add action."""
    snap_md = DeltaTable(table.uri).snapshot().metadata
    parts = list(snap_md.partition_columns)
    values = {"part": part} if parts else {}
    rel = new_data_file_path(partition_folder(parts, values) if parts else "")
    full = os.path.join(table.uri, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    rows = pa.table({"id": pa.array(ids, pa.int64())} if parts else
                    {"id": pa.array(ids, pa.int64()), "part": [part] * len(ids)})
    pq.write_table(rows, full)
    return AddFile(encode_path(rel), values, os.path.getsize(full), now_ms(), data_change,
                   file_stats(rows, snap_md.schema_json, parts))


def files_of(txn, part: str | None) -> list[AddFile]:
    files = txn.snapshot.add_files()
    if part is None:
        return sorted(files, key=lambda f: f.path)
    return sorted((f for f in files if f.partition_values.get("part") == part), key=lambda f: f.path)


_next_id = [100]


def stage(kind: str, table: DeltaTable, txn, part: str, partitioned: bool = True) -> dict:
    """Record the reads and actions of one operation in `txn`; returns what it adds/removes."""
    _next_id[0] += 10
    pid = part if partitioned else None
    ids = [_next_id[0]]
    pred = col("part") == part
    files = files_of(txn, pid)
    if not partitioned:  # "same"/"disjoint" in an unpartitioned table: first or last two files
        files = files[:2] if part == "a" else files[2:]
    adds, removes = [], []
    if kind == "insert":
        adds = [new_file(table, part, ids)]
    elif kind in ("update", "merge", "delete"):
        touched = files[:1]
        if kind == "merge":
            txn.read_predicate(lambda pv, p=part: pv.get("part") == p)  # a plain callable
        else:
            txn.read_predicate(pred)
        txn.read_files(touched)
        removes = [f.remove() for f in touched]
        if kind != "delete":
            adds = [new_file(table, part, ids)]
    elif kind == "insert_reading":
        txn.read_predicate(pred)
        txn.read_files(files)
        adds = [new_file(table, part, ids)]
    elif kind == "optimize":
        txn.read_files(files)
        removes = [f.remove(data_change=False) for f in files]
        adds = [new_file(table, part, [1, 2], data_change=False)]
    txn.add_actions([*removes, *adds])
    return {"adds": {a.path for a in adds}, "removes": {r.path for r in removes}}


def expected(loser: str, winner: str, same: bool, level: str, partitioned: bool = True):
    """DESIGN.md's table, resolved to the exception delta-spark's rule order raises."""
    if loser == "insert":
        return None                                    # blind insert: never
    if winner == "insert":
        if loser == "optimize":
            return None                                # optimize vs insert: never
        # Update/delete/merge vs blind insert: Serializable only (into what the loser read).
        return ConcurrentAppendException if level == "Serializable" and same else None
    if not same:
        return None                                    # disjoint partitions: never
    if winner == "insert_reading" and loser == "optimize":
        return None                                    # it removed nothing; optimize reads no new rows
    if loser != "optimize" and winner in ("update", "merge", "insert_reading", "optimize"):
        # the winner's files land in what the loser read: new rows, or (OPTIMIZE) rows it rewrote from a
        # file the loser read; delta-spark checks added files first and names both so
        return ConcurrentAppendException
    return ConcurrentDeleteReadException               # winner removed a file the loser read


def run_pair(tmp_path, loser: str, winner: str, same: bool, level: str, partitioned: bool = True):
    table = make_table(tmp_path / "t", level, partitioned)
    base = {f.path for f in table.snapshot().add_files()}
    t_loser, t_winner = table.transaction(), table.transaction()
    assert t_loser.read_version == t_winner.read_version == 0
    lose = stage(loser, table, t_loser, "a", partitioned)
    win = stage(winner, table, t_winner, "a" if same else "b", partitioned)
    assert t_winner.commit(operation=OPERATION[winner]) == 1
    return table, base, t_loser, lose, win


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("same", [True, False], ids=["same", "disjoint"])
@pytest.mark.parametrize("winner", WINNERS)
@pytest.mark.parametrize("loser", LOSERS)
def test_conflict_table(tmp_path, loser, winner, same, level):
    table, base, t_loser, lose, win = run_pair(tmp_path, loser, winner, same, level)
    exc = expected(loser, winner, same, level)
    log_dir = os.path.join(table.uri, "_delta_log")
    if exc is None:
        assert t_loser.commit(operation=OPERATION[loser]) == 2
        live = {f.path for f in table.snapshot().add_files()}
        assert live == (base - win["removes"] - lose["removes"]) | win["adds"] | lose["adds"]
        info = table.history(limit=1)[0]
        assert info["readVersion"] == 0 and info["operation"] == OPERATION[loser]
    else:
        with pytest.raises(exc) as err:
            t_loser.commit(operation=OPERATION[loser])
        e = err.value
        assert type(e) is exc
        assert e.winning_version == 1 and e.winning_operation == OPERATION[winner]
        msg = str(e)
        assert table.uri in msg and "version 1" in msg and OPERATION[winner] in msg
        assert "Partition the table" in msg or "retry" in msg.lower()
        assert not os.path.exists(os.path.join(log_dir, "%020d.json" % 2))
        assert table.version() == 1
        live = {f.path for f in table.snapshot().add_files()}
        assert live == (base - win["removes"]) | win["adds"]


def test_isolation_level_recorded(tmp_path):
    table = make_table(tmp_path / "t", "Serializable")
    txn = table.transaction()
    stage("update", table, txn, "a")
    txn.commit(operation="UPDATE")
    txn = table.transaction()
    stage("optimize", table, txn, "b")
    txn.commit(operation="OPTIMIZE")
    hist = table.history()
    assert [h["isolationLevel"] for h in hist[:2]] == ["SnapshotIsolation", "Serializable"]
    assert [h["isBlindAppend"] for h in hist[:2]] == [False, False]
    assert hist[-1]["isBlindAppend"] is True


# ---- unpartitioned tables: any new row may match what an update read ------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_unpartitioned_updates_of_different_files_conflict(tmp_path, level):
    """As in Delta Lake: without partitions, a concurrent UPDATE's new rows may match the loser's
    predicate, so the loser raises ConcurrentAppendException even on different files."""
    table, _, t_loser, _, _ = run_pair(tmp_path, "update", "update", False, level, partitioned=False)
    with pytest.raises(ConcurrentAppendException):
        t_loser.commit(operation="UPDATE")


@pytest.mark.parametrize("level", LEVELS)
def test_unpartitioned_update_vs_blind_insert(tmp_path, level):
    table, _, t_loser, _, _ = run_pair(tmp_path, "update", "insert", False, level, partitioned=False)
    if level == "Serializable":
        with pytest.raises(ConcurrentAppendException):
            t_loser.commit(operation="UPDATE")
    else:
        assert t_loser.commit(operation="UPDATE") == 2


@pytest.mark.parametrize("level", LEVELS)
def test_unpartitioned_update_vs_optimize_of_other_files(tmp_path, level):
    """OPTIMIZE's dataChange=false adds only rewrite rows; on different files both land."""
    table, _, t_loser, _, _ = run_pair(tmp_path, "update", "optimize", False, level, partitioned=False)
    assert t_loser.commit(operation="UPDATE") == 2


@pytest.mark.parametrize("level", LEVELS)
def test_unpartitioned_optimize_vs_update_same_files(tmp_path, level):
    table, _, t_loser, _, _ = run_pair(tmp_path, "optimize", "update", True, level, partitioned=False)
    with pytest.raises(ConcurrentDeleteReadException):
        t_loser.commit(operation="OPTIMIZE")


# ---- the remaining rules --------------------------------------------------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_delete_delete_on_a_file_not_read(tmp_path, level):
    """Removing a file without having read it (e.g. replacing it by path) meets a concurrent delete."""
    table = make_table(tmp_path / "t", level)
    t1, t2 = table.transaction(), table.transaction()
    victim = files_of(t1, "a")[0]
    t1.add_actions([victim.remove()])
    t2.add_actions([victim.remove()])
    t2.commit(operation="DELETE")
    with pytest.raises(ConcurrentDeleteDeleteException) as err:
        t1.commit(operation="DELETE")
    assert err.value.winning_version == 1 and err.value.winning_operation == "DELETE"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("winner,exc", [("delete", ConcurrentDeleteReadException),
                                        # its rewritten files land in what was read: named as delta-spark does
                                        ("optimize", ConcurrentAppendException)])
def test_whole_table_read_conflicts_with_any_remove(tmp_path, level, winner, exc):
    table = make_table(tmp_path / "t", level)
    t1, t2 = table.transaction(), table.transaction()
    t1.read_whole_table()
    t1.add_actions([new_file(table, "a", [7])])
    stage(winner, table, t2, "b")
    t2.commit(operation=OPERATION[winner])
    with pytest.raises(exc):
        t1.commit(operation="MERGE")


def test_read_files_without_predicate_counts_as_whole_table(tmp_path):
    """A transaction that read files but declared no partition predicate cannot be kept apart."""
    table = make_table(tmp_path / "t", "Serializable")
    t1, t2 = table.transaction(), table.transaction()
    t1.read_files(files_of(t1, "a"))
    t1.add_actions([files_of(t1, "a")[0].remove()])
    t2.add_actions([new_file(table, "b", [9])])
    t2.commit()
    with pytest.raises(ConcurrentAppendException):
        t1.commit(operation="DELETE")


def test_loser_retries_past_several_winners(tmp_path):
    """No conflict with any of three winners: the loser lands after all of them."""
    table = make_table(tmp_path / "t", "WriteSerializable")
    loser = table.transaction()
    stage("update", table, loser, "a")
    for _ in range(3):
        w = table.transaction()
        stage("insert", table, w, "a")
        w.commit()
    assert loser.commit(operation="UPDATE") == 4
    assert loser.attempts == 2  # one lost race, then straight to version 4
    assert table.history(limit=1)[0]["readVersion"] == 0


def test_conflict_on_second_winner_names_it(tmp_path):
    table = make_table(tmp_path / "t", "WriteSerializable")
    loser = table.transaction()
    stage("update", table, loser, "a")
    w1 = table.transaction()
    stage("insert", table, w1, "b")
    w1.commit()
    w2 = table.transaction()
    stage("delete", table, w2, "a")
    w2.commit(operation="DELETE")
    with pytest.raises(ConcurrentModificationError) as err:
        loser.commit(operation="UPDATE")
    assert err.value.winning_version == 2 and err.value.winning_operation == "DELETE"
    assert not os.path.exists(os.path.join(table.uri, "_delta_log", "%020d.json" % 3))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("update_first", [True, False], ids=["update_wins", "optimize_wins"])
def test_update_and_optimize_of_other_files_in_one_partition(tmp_path, level, update_first):
    """Same partition, different files: OPTIMIZE's rewritten rows are not new rows, so both land."""
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "part": ["a", "a", "a"]})
    write_deltalake(str(tmp_path / "t"), data, partition_by=["part"], max_rows_per_file=1,
                    configuration={"delta.isolationLevel": level})
    table = DeltaTable(str(tmp_path / "t"))
    upd, opt = table.transaction(), table.transaction()
    a1, a2, a3 = files_of(upd, "a")
    upd.read_predicate(col("part") == "a")
    upd.read_files([a1])
    upd.add_actions([a1.remove(), new_file(table, "a", [10])])
    opt.read_files([a2, a3])
    opt.add_actions([a2.remove(data_change=False), a3.remove(data_change=False),
                     new_file(table, "a", [2, 3], data_change=False)])
    first, second = (upd, opt) if update_first else (opt, upd)
    assert first.commit(operation="UPDATE" if first is upd else "OPTIMIZE") == 1
    assert second.commit(operation="UPDATE" if second is upd else "OPTIMIZE") == 2
    assert table.snapshot().num_files == 2


@pytest.mark.parametrize("changed_data,row_level,runs", [(False, True, 4), (True, True, 1), (False, False, 1)],
                         ids=["optimize-won-row-level", "dml-won", "file-level-table"])
def test_an_operation_runs_again_only_past_a_rearranging_winner_and_at_most_reruns_times(changed_data, row_level,
                                                                                           runs):
    """reruns_after_conflict(rearranged_only), as DELETE / MERGE / writes use it: a loss to a commit that
    only rearranged rows (OPTIMIZE) on a table with row-level concurrency runs the operation again, up to
    RERUNS times, then the conflict is raised; any other loss is raised at once."""
    from deltalog.transaction import RERUNS, rearranged_only, reruns_after_conflict

    calls = []

    @reruns_after_conflict(rearranged_only)
    def operation():
        calls.append(1)
        raise ConcurrentDeleteReadException("lost", winning_version=len(calls), winning_operation="OPTIMIZE",
                                            winner_changed_data=changed_data, row_level=row_level)

    with pytest.raises(ConcurrentDeleteReadException) as raised:
        operation()
    assert RERUNS == 3 and len(calls) == runs
    assert raised.value.winning_version == runs and raised.value.winning_operation == "OPTIMIZE"
    # after the last rerun the message says it ran again; a conflict raised at once reads as it was
    assert ("It ran 4 times" in str(raised.value)) == (runs > 1)
