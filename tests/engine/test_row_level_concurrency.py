"""Row-level concurrency on tables with deletion vectors: at WriteSerializable two transactions that
mark different rows of the same file deleted both land (the later one rebases its DV on the winner's);
marking a row the winner already deleted or updated raises ConcurrentDeleteDeleteException naming the
winner; Serializable keeps the file-level rules. Every outcome is read back by delta-rs."""
from __future__ import annotations

import threading

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog import DeltaTable, Snapshot, write_deltalake
from deltalog.actions import now_ms
from deltalog.deletion_vectors import mark_rows, read_deletion_vector
from deltalog.errors import ConcurrentDeleteDeleteException, ConcurrentDeleteReadException
from deltalog.scan import read_table

ROWS = 100


def make_table(path, level: str) -> DeltaTable:
    """Two files of ROWS rows each (ids 0-99 and 100-199)."""
    for start in (0, ROWS):
        write_deltalake(str(path), pa.table({"id": pa.array(range(start, start + ROWS), pa.int64())}),
                        mode="append", configuration={"delta.isolationLevel": level,
                                                       "delta.enableDeletionVectors": "true"})
    return DeltaTable(str(path))


def first_file(txn):
    return min(txn.snapshot.add_files(), key=lambda a: min_id(a))


def min_id(add) -> int:
    import json
    return json.loads(add.stats)["minValues"]["id"]


def stage_delete(txn, rows: list[int], add=None) -> None:
    """DELETE the rows at these positions of the first file (ids 0-99): they go into its DV."""
    add = add or first_file(txn)
    txn.read_files([add])
    marked = mark_rows(txn.store, [(add, rows)], now_ms())
    txn.add_actions([*marked.removes, *marked.adds])


def ids(uri) -> list[int]:
    return sorted(read_table(Snapshot.load(uri)).column("id").to_pylist())


def delta_rs_ids(uri) -> list[int]:
    dt = deltalake.DeltaTable(uri)
    return sorted(pa.table(QueryBuilder().register("t", dt).execute("select id from t").read_all())
                  .column("id").to_pylist())


def test_disjoint_rows_of_one_file_both_land_at_write_serializable(tmp_path):
    table = make_table(tmp_path / "t", "WriteSerializable")
    winner, loser = table.transaction(), table.transaction()
    stage_delete(winner, [1, 2, 3])
    stage_delete(loser, [10, 11])
    v = winner.commit(operation="DELETE")
    assert loser.commit(operation="DELETE") == v + 1
    expected = [i for i in range(2 * ROWS) if i not in (1, 2, 3, 10, 11)]
    assert ids(table.uri) == expected == delta_rs_ids(table.uri)
    # the loser's remove names the winner's DV, and its add holds both writers' rows
    snap = Snapshot.load(table.uri)
    add = min(snap.add_files(), key=min_id)
    assert sorted(read_deletion_vector(snap.store, add.deletion_vector)) == [1, 2, 3, 10, 11]
    assert snap.num_files == 2


def test_a_row_the_winner_deleted_raises_delete_delete_naming_the_winner(tmp_path):
    table = make_table(tmp_path / "t", "WriteSerializable")
    winner, loser = table.transaction(), table.transaction()
    stage_delete(winner, [1, 2, 3])
    stage_delete(loser, [3, 4])
    v = winner.commit(operation="MERGE")
    with pytest.raises(ConcurrentDeleteDeleteException) as err:
        loser.commit(operation="DELETE")
    assert err.value.winning_version == v and err.value.winning_operation == "MERGE"
    assert "1 row(s), e.g. row 3" in str(err.value)
    assert table.version() == v  # nothing committed
    assert ids(table.uri) == [i for i in range(2 * ROWS) if i not in (1, 2, 3)] == delta_rs_ids(table.uri)


def test_serializable_keeps_the_file_level_rule(tmp_path):
    table = make_table(tmp_path / "t", "Serializable")
    winner, loser = table.transaction(), table.transaction()
    stage_delete(winner, [1])
    stage_delete(loser, [50])
    winner.commit(operation="DELETE")
    with pytest.raises(ConcurrentDeleteReadException):
        loser.commit(operation="DELETE")


def test_marking_a_file_this_transaction_only_read_does_not_conflict(tmp_path):
    """The loser read both files (its predicate matched nothing in the first) and marked rows of the
    second; the winner marked rows of the first. Deleting rows adds none the loser should have seen."""
    table = make_table(tmp_path / "t", "WriteSerializable")
    winner, loser = table.transaction(), table.transaction()
    stage_delete(winner, [5])
    second = max(loser.snapshot.add_files(), key=min_id)
    loser.read_files(loser.snapshot.add_files())
    stage_delete(loser, [7], add=second)
    winner.commit(operation="DELETE")
    loser.commit(operation="DELETE")
    assert ids(table.uri) == [i for i in range(2 * ROWS) if i not in (5, ROWS + 7)] == delta_rs_ids(table.uri)


def test_rebasing_past_several_winners(tmp_path):
    table = make_table(tmp_path / "t", "WriteSerializable")
    txns = [table.transaction() for _ in range(4)]
    for i, txn in enumerate(txns):
        stage_delete(txn, [i * 10, i * 10 + 1])
    for txn in txns:
        txn.commit(operation="DELETE")
    assert ids(table.uri) == [i for i in range(2 * ROWS) if i not in (0, 1, 10, 11, 20, 21, 30, 31)]
    assert delta_rs_ids(table.uri) == ids(table.uri)


def test_threads_marking_disjoint_rows_all_land(tmp_path):
    table = make_table(tmp_path / "t", "WriteSerializable")
    errors = []

    def worker(n: int) -> None:
        try:
            for k in range(5):
                txn = DeltaTable(table.uri).transaction()
                stage_delete(txn, [n * 20 + k])
                txn.commit(operation="DELETE")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    deleted = {n * 20 + k for n in range(4) for k in range(5)}
    assert ids(table.uri) == [i for i in range(2 * ROWS) if i not in deleted] == delta_rs_ids(table.uri)
    assert table.version() == 1 + 20
