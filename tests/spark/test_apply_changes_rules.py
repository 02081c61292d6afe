"""Change capture into a table (`deltalog.spark.apply_changes`), batch by batch as a stream's
`foreachBatch` hands them over, on real Spark: AutoCDC's rules for SCD type 1 (highest sequence wins
across and within batches, tombstones against late changes, re-inserts, retention, ignore_null_updates,
truncates) and type 2 (versions, late changes in their place, deletes closing versions, tracked
columns); merge-on-read commits that write only the changed rows; a batch replayed after a crash between
its two commits applies once; bad batches fail whole, by name. delta-rs reads every table."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable, QueryBuilder

from deltalog.spark import operations as ops
from deltalog.spark.apply_changes import ApplyChanges, ApplyChangesError, change_applier, state_table
from deltalog.table import DeltaTable

pytestmark = pytest.mark.spark

SOURCE = "id bigint, name string, city string, op string, seq bigint"
COLUMNS = ["id", "name", "city", "op", "seq"]
BASE = {"keys": ["id"], "sequence_by": "seq", "apply_as_deletes": "op = 'd'", "except_column_list": ["op", "seq"]}


def _applier(spark, uri, app="app", **more):
    return change_applier(uri, ApplyChanges.of({**BASE, **more}, "t"), app, COLUMNS)


def _apply(spark, applier, batch_id, changes):
    applier(spark.createDataFrame(changes, SOURCE), batch_id)


def _rows(uri, order=("id",)):
    read = pa.table(QueryBuilder().register("t", RsTable(str(uri))).execute("select * from t").read_all())
    return sorted(read.to_pylist(), key=lambda r: tuple(r[c] for c in order))


def _cities(uri):
    return {r["id"]: r["city"] for r in _rows(uri)}


def test_scd1_the_highest_sequence_wins_across_and_within_batches(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1), (2, "b", "Rome", "c", 1),
                             (2, "b", "Nice", "u", 3), (2, "b", "Pisa", "u", 2),   # out of order in a batch
                             (3, "c", "Lima", "c", 1), (3, "c", "Lima", "c", 1)])  # a duplicate delivery
    assert _cities(uri) == {1: "Oslo", 2: "Nice", 3: "Lima"}
    _apply(spark, apply, 1, [(2, "b", "Turin", "u", 2), (1, "a", "Bern", "u", 4), (3, None, None, "d", 5)])
    assert _cities(uri) == {1: "Bern", 2: "Nice"}  # key 2's change is older than what it holds
    _apply(spark, apply, 2, [(3, "c", "Quito", "u", 4)])  # older than its delete: the tombstone keeps it out
    assert _cities(uri) == {1: "Bern", 2: "Nice"}
    _apply(spark, apply, 3, [(3, "c", "Cusco", "u", 6), (1, None, None, "d", 4)])  # re-insert; a tie: the upsert
    assert _cities(uri) == {1: "Bern", 2: "Nice", 3: "Cusco"}
    assert [f.name for f in RsTable(uri).schema().fields] == ["id", "name", "city"]
    state = {r["id"]: (r["__deltalog_changes_sequence"], r["__deltalog_changes_deleted"])
             for r in _rows(state_table(DeltaTable(uri)).uri)}
    assert state == {1: (4, False), 2: (3, False), 3: (6, False)}


def test_a_delete_and_an_upsert_in_one_batch_and_a_delete_of_an_unknown_key(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1), (1, None, None, "d", 2), (2, None, None, "d", 7)])
    assert _rows(uri) == []
    _apply(spark, apply, 1, [(2, "b", "Rome", "c", 5), (1, "a", "Bergen", "u", 3)])  # 2 was deleted at 7
    assert _cities(uri) == {1: "Bergen"}


def test_tombstones_are_forgotten_after_their_retention(spark, tmp_path):
    uri = str(tmp_path / "t")
    keep = _applier(spark, uri)
    _apply(spark, keep, 0, [(1, "a", "Oslo", "c", 1)])
    _apply(spark, keep, 1, [(1, None, None, "d", 5)])
    _apply(spark, _applier(spark, uri), 2, [(1, "a", "Late", "u", 3)])  # a new run, 2 days' retention
    assert _rows(uri) == []
    # a run with no retention purges the tombstone first: the late change of the deleted key comes back
    _apply(spark, _applier(spark, uri, tombstone_retention="0 seconds"), 3, [(1, "a", "Later", "u", 4)])
    assert _cities(uri) == {1: "Later"}


def test_ignore_null_updates_keeps_the_values_an_update_leaves_null(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri, ignore_null_updates=True)
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1), (2, "b", "Rome", "c", 1)])
    _apply(spark, apply, 1, [(1, None, "Bern", "u", 2), (2, "B", None, "u", 2), (2, None, None, "u", 3)])
    assert _rows(uri) == [{"id": 1, "name": "a", "city": "Bern"}, {"id": 2, "name": "B", "city": "Rome"}]
    # after a delete in the same batch, nothing carries over from before it
    _apply(spark, apply, 2, [(1, None, None, "d", 4), (1, None, "Kyiv", "u", 5)])
    assert _rows(uri)[0] == {"id": 1, "name": None, "city": "Kyiv"}


def test_a_truncate_empties_the_table_and_older_changes_stay_out(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri, apply_as_truncates="op = 't'")
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1), (2, "b", "Rome", "c", 2)])
    _apply(spark, apply, 1, [(0, None, None, "t", 10), (3, "c", "Lima", "c", 11), (4, "d", "Pune", "c", 9)])
    assert _cities(uri) == {3: "Lima"}
    _apply(spark, apply, 2, [(1, "a", "Late", "u", 8), (5, "e", "Oran", "c", 12)])
    assert _cities(uri) == {3: "Lima", 5: "Oran"}


def test_merge_on_read_marks_the_changed_rows_and_writes_only_them(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    _apply(spark, apply, 0, [(i, f"n{i}", "Oslo", "c", 1) for i in range(2000)])
    before = DeltaTable(uri).snapshot()
    assert before.configuration["delta.enableDeletionVectors"] == "true"
    _apply(spark, apply, 1, [(5, "x", "Rome", "u", 2), (6, None, None, "d", 2), (7, "y", "Nice", "u", 2),
                             (5000, "z", "Lima", "c", 2)])
    after = DeltaTable(uri).snapshot()
    new = [f for f in after.files.to_pylist() if f["path"] not in set(before.files.column("path").to_pylist())]
    marked = [f for f in after.files.to_pylist() if f["deletion_vector"] is not None]
    assert sum(before.files.column("size").to_pylist()) > 10 * sum(f["size"] for f in new)
    assert sum(f["deletion_vector"]["cardinality"] for f in marked) == 3
    import json
    assert sum(json.loads(f["stats"])["numRecords"] for f in new) == 3  # two updated rows, one insert
    assert len(_rows(uri)) == 2000 and _cities(uri)[5] == "Rome" and 6 not in _cities(uri)


def test_a_batch_replayed_after_a_crash_between_its_commits_applies_once(spark, tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1), (2, "b", "Rome", "c", 1)])
    real_merge = ops.merge

    def state_lands_then_crash(spark_, table, *args, **kwargs):
        if table.uri == DeltaTable(uri).uri:
            raise RuntimeError("killed between the state's commit and the table's")
        return real_merge(spark_, table, *args, **kwargs)

    batch = [(1, None, None, "d", 2), (2, "b", "Paris", "u", 2), (3, "c", "Lima", "c", 1)]
    monkeypatch.setattr(ops, "merge", state_lands_then_crash)
    with pytest.raises(RuntimeError, match="killed"):
        _apply(spark, apply, 1, batch)
    state = state_table(DeltaTable(uri))
    assert state.snapshot().app_transactions["app"] == 1 and DeltaTable(uri).snapshot().app_transactions["app"] == 0
    monkeypatch.setattr(ops, "merge", real_merge)
    state_version = state.version()
    _apply(spark, _applier(spark, uri), 1, batch)  # the replay, in a new run
    assert _cities(uri) == {2: "Paris", 3: "Lima"} and state.version() == state_version
    version = DeltaTable(uri).version()
    _apply(spark, _applier(spark, uri), 1, batch)  # once more: both tables have it, nothing commits
    assert DeltaTable(uri).version() == version and _cities(uri) == {2: "Paris", 3: "Lima"}


@pytest.mark.parametrize("bad, message", [((None, "a", "Oslo", "c", 1), "NULL key id"),
                                          ((1, "a", "Oslo", "c", None), "NULL sequence")])
def test_a_batch_with_a_null_key_or_sequence_fails_whole(spark, tmp_path, bad, message):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1)])
    version = DeltaTable(uri).version()
    with pytest.raises(ApplyChangesError, match=message) as failure:
        _apply(spark, apply, 1, [(2, "b", "Rome", "c", 2), bad])
    assert DeltaTable(uri).uri in str(failure.value) and "Nothing of this batch was applied" in str(failure.value)
    assert DeltaTable(uri).version() == version


def test_requests_those_systems_refuse_are_refused_by_name():
    for given, message in [({"keys": ["id"]}, "needs sequence_by"),
                           ({**BASE, "stored_as_scd_type": 3}, "1 or 2"),
                           ({**BASE, "track_history_column_list": ["city"]}, "stored_as_scd_type 1"),
                           ({**BASE, "keys": "id", "tombstone_retention": "soon"}, "tombstone_retention"),
                           ({**BASE, "except_column_list": ["id"]}, None)]:
        if message is None:
            with pytest.raises(ApplyChangesError, match="key column"):
                ApplyChanges.of(given, "model x").output_columns(COLUMNS, "model x")
            continue
        with pytest.raises(ApplyChangesError, match=message):
            ApplyChanges.of(given, "model x")


SCD2 = {**BASE, "stored_as_scd_type": 2}


def _versions(uri):
    return [(r["id"], r["city"], r["name"], r["__START_AT"], r["__END_AT"]) for r in _rows(uri, ("id", "__START_AT"))]


def test_scd2_versions_with_late_changes_in_their_place(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri, stored_as_scd_type=2, track_history_except_column_list=["name"])
    _apply(spark, apply, 0, [(123, "Isabel", "Monterrey", "c", 1), (124, "Raul", "Oaxaca", "c", 1),
                             (125, "Mercedes", "Tijuana", "c", 2)])
    _apply(spark, apply, 1, [(125, "Mercedes", "Guadalajara", "u", 6), (123, "Isabela", "Monterrey", "u", 3),
                             (123, None, None, "d", 6), (124, "Raul", "Oaxaca", "u", 4)])
    _apply(spark, apply, 2, [(125, "Mercedes", "Mexicali", "u", 5)])  # late: lands between 2 and 6
    assert _versions(uri) == [
        (123, "Monterrey", "Isabela", 1, 6),  # the name is not tracked: updated in place; the delete closes it
        (124, "Oaxaca", "Raul", 1, None),     # the same tracked values again: no new version
        (125, "Tijuana", "Mercedes", 2, 5), (125, "Mexicali", "Mercedes", 5, 6),
        (125, "Guadalajara", "Mercedes", 6, None)]
    # a delete that arrives before the key's first change: kept, so the late upsert gets its end
    _apply(spark, apply, 3, [(200, None, None, "d", 9)])
    _apply(spark, apply, 4, [(200, "Ana", "Lima", "c", 4), (123, "Isabel", "Cancun", "u", 8)])
    assert [v for v in _versions(uri) if v[0] in (123, 200)] == [
        (123, "Monterrey", "Isabela", 1, 6), (123, "Cancun", "Isabel", 8, None), (200, "Lima", "Ana", 4, 9)]
    version = DeltaTable(uri).version()
    _apply(spark, apply, 4, [(200, "Ana", "Lima", "c", 4)])  # a replayed batch: nothing commits
    assert DeltaTable(uri).version() == version
    _apply(spark, apply, 5, [(125, "Mercedes", "Mexicali", "u", 5)])  # a duplicate delivery: no change
    assert len(_versions(uri)) == 7


def test_auto_compaction_purges_files_whose_rows_are_mostly_marked(spark, tmp_path):
    uri = str(tmp_path / "t")
    from deltalog.definition import TableDefinition

    apply = change_applier(uri, ApplyChanges.of(BASE, "t"), "app", COLUMNS,
                           definition=TableDefinition(properties={"delta.autoOptimize.autoCompact": "true"}))
    _apply(spark, apply, 0, [(i, f"n{i}", "Oslo", "c", 1) for i in range(100)])
    _apply(spark, apply, 1, [(i, "x", "Rome", "u", 2) for i in range(3)])  # 3 % of a file: kept marked
    assert any(f["deletion_vector"] for f in DeltaTable(uri).snapshot().files.to_pylist())
    _apply(spark, apply, 2, [(i, None, None, "d", 3) for i in range(50, 60)])  # past 5 %: rewritten
    snapshot = DeltaTable(uri).snapshot()
    assert not any(f["deletion_vector"] for f in snapshot.files.to_pylist())
    last = DeltaTable(uri).history(1)[0]
    assert last["operation"] == "OPTIMIZE" and all(not a.get("dataChange", False)
                                                   for a in _actions(uri, last["version"]))
    assert len(_rows(uri)) == 90 and _cities(uri)[1] == "Rome"


def _actions(uri, version):
    import json
    import os
    with open(os.path.join(uri, "_delta_log", f"{version:020d}.json")) as f:
        return [next(iter(a.values())) for a in map(json.loads, f) if "add" in a or "remove" in a]


def test_a_concurrent_optimize_passes_and_a_concurrent_fix_up_of_the_same_rows_conflicts(spark, tmp_path):
    """Another writer lands while a batch's MERGE is committing: a compaction (dataChange=false) passes
    (the batch lands too); a manual delete of a row the batch updates is a named conflict, nothing of the
    batch lands in the table, and the replay applies it once."""
    from deltalog.errors import ConcurrentModificationError
    from deltalog.spark.optimize import optimize
    from tests.support.races import winner_commits_first

    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    for batch_id in range(3):  # three files
        _apply(spark, apply, batch_id, [(batch_id * 10 + i, "n", "Oslo", "c", 1) for i in range(10)])
    with winner_commits_first(lambda table_uri: optimize(spark, table_uri), table_suffix="/t") as race:
        _apply(spark, apply, 3, [(1, "n", "Rome", "u", 2)])
    assert race["winner_version"] is not None and DeltaTable(uri).snapshot().app_transactions["app"] == 3
    assert _cities(uri)[1] == "Rome" and len(_rows(uri)) == 30

    batch = [(2, "n", "Nice", "u", 3), (25, "n", "Lima", "u", 3)]
    with winner_commits_first(lambda table_uri: ops.delete(spark, table_uri, "id = 2"), table_suffix="/t"):
        with pytest.raises(ConcurrentModificationError) as conflict:
            _apply(spark, apply, 4, batch)
    assert type(conflict.value).__name__.startswith("Concurrent") and DeltaTable(uri).uri in str(conflict.value)
    assert DeltaTable(uri).snapshot().app_transactions["app"] == 3 and 2 not in _cities(uri)
    _apply(spark, _applier(spark, uri), 4, batch)  # the next run replays the batch
    assert _cities(uri)[2] == "Nice" and _cities(uri)[25] == "Lima"


def test_scd2_ignore_null_updates_and_a_sequence_of_two_columns(spark, tmp_path):
    """sequence_by struct(lsn, n): ordered by lsn, then n; a NULL in an update keeps the version's value."""
    uri = str(tmp_path / "t")
    spec = ApplyChanges.of({"keys": ["id"], "sequence_by": "struct(lsn, n)", "apply_as_deletes": "op = 'd'",
                            "except_column_list": ["op", "lsn", "n"], "stored_as_scd_type": 2,
                            "ignore_null_updates": True}, "t")
    apply = change_applier(uri, spec, "app", ["id", "name", "city", "op", "lsn", "n"])
    schema = "id bigint, name string, city string, op string, lsn bigint, n int"
    apply(spark.createDataFrame([(1, "Ann", "Oslo", "c", 10, 1), (1, None, "Rome", "u", 10, 2)], schema), 0)
    apply(spark.createDataFrame([(1, "Anne", None, "u", 11, 0), (1, None, "Lima", "u", 10, 3)], schema), 1)
    versions = [(r["name"], r["city"], (r["__START_AT"]["lsn"], r["__START_AT"]["n"]),
                 r["__END_AT"] and (r["__END_AT"]["lsn"], r["__END_AT"]["n"])) for r in _rows(uri)]
    assert sorted(versions, key=lambda v: v[2]) == [("Ann", "Oslo", (10, 1), (10, 2)), ("Ann", "Rome", (10, 2), (10, 3)),
                        ("Ann", "Lima", (10, 3), (11, 0)), ("Anne", "Lima", (11, 0), None)]


def test_scd2_a_late_change_splits_a_version_that_took_changes_in_place(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri, stored_as_scd_type=2, track_history_except_column_list=["name"])
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 10)])
    _apply(spark, apply, 1, [(1, "b", "Oslo", "u", 20), (1, "c", "Oslo", "u", 30)])  # taken in place
    assert _versions(uri) == [(1, "Oslo", "c", 10, None)]
    _apply(spark, apply, 2, [(1, "x", "Rome", "u", 25)])  # late: between the two in-place changes
    assert _versions(uri) == [(1, "Oslo", "b", 10, 25), (1, "Rome", "x", 25, 30), (1, "Oslo", "c", 30, None)]
    _apply(spark, apply, 3, [(1, "y", "Rome", "u", 27)])  # later still: taken in place by the late version
    assert _versions(uri) == [(1, "Oslo", "b", 10, 25), (1, "Rome", "y", 25, 30), (1, "Oslo", "c", 30, None)]


def test_the_state_table_is_compacted_as_batches_add_files(spark, tmp_path):
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri)
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "3")
    try:
        for batch_id in range(6):
            _apply(spark, apply, batch_id, [(batch_id * 10 + i, "n", "Oslo", "c", 1) for i in range(3)])
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")
    state = state_table(DeltaTable(uri))
    assert any(h["operation"] == "OPTIMIZE" for h in state.history())
    assert state.snapshot().num_files < 6 and len(_rows(state.uri)) == 18 and len(_rows(uri)) == 18


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_warm_up_rehearses_batches_in_a_scratch_folder_and_commits_nothing(spark, tmp_path, caplog, monkeypatch,
                                                                             scd_type):
    """The warm-up applies made-up batches to a scratch table in a temporary folder, removed after it:
    the table and its state keep their versions, and the stream's batches then apply as ever."""
    import tempfile

    from deltalog.spark.apply_changes import applier as applier_module

    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    # a folder left by a warm-up killed before (its process gone) is removed; a live process's is kept
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left_over = scratch_root / f"{applier_module.WARM_UP_PREFIX}{gone.pid}-abc"
    live = scratch_root / f"{applier_module.WARM_UP_PREFIX}{os.getppid()}-abc"
    for folder in (left_over, live):
        (folder / "table").mkdir(parents=True)
    rehearsed = []
    original = applier_module.Applier.__call__
    monkeypatch.setattr(applier_module.Applier, "__call__",
                        lambda self, batch, batch_id: rehearsed.append((self.table.uri, batch.count()))
                        or original(self, batch, batch_id))
    uri = str(tmp_path / "t")
    apply = _applier(spark, uri, stored_as_scd_type=scd_type)
    with caplog.at_level("INFO", logger="deltalog.spark.apply_changes.applier"):
        apply.warm_up(spark.createDataFrame([], SOURCE))  # no table yet
    assert "warmed up" in caplog.text and "skipped" not in caplog.text, caplog.text
    assert [n for _, n in rehearsed] == [applier_module.REHEARSAL_ROWS] * applier_module.REHEARSED_BATCHES
    assert all(u.startswith(str(scratch_root)) for u, _ in rehearsed) and list(scratch_root.iterdir()) == [live]
    assert not DeltaTable(uri).exists()
    _apply(spark, apply, 0, [(1, "a", "Oslo", "c", 1), (2, "b", "Rome", "c", 1)])
    versions = (DeltaTable(uri).version(), state_table(DeltaTable(uri)).version())
    again = _applier(spark, uri, stored_as_scd_type=scd_type)  # a new run of the stream
    caplog.clear()
    with caplog.at_level("INFO", logger="deltalog.spark.apply_changes.applier"):
        again.warm_up(spark.createDataFrame([], SOURCE))
    assert "warmed up" in caplog.text and "skipped" not in caplog.text
    assert (DeltaTable(uri).version(), state_table(DeltaTable(uri)).version()) == versions
    _apply(spark, again, 1, [(1, "a", "Bern", "u", 2)])
    assert {r["id"]: r["city"] for r in _rows(uri) if r.get("__END_AT") is None} == {1: "Bern", 2: "Rome"}
