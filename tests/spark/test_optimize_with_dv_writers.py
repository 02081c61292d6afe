"""OPTIMIZE and DML on the same files of a table with deletion vectors (row-level concurrency): at
WriteSerializable neither fails the other. The loser runs again on the table as the winner left it,
which is a serial order because OPTIMIZE changes no row a reader sees. At Serializable the file-level
conflict stays.

The race is forced: the loser runs up to its commit (its snapshot read, its files written), then the
winner runs whole and lands first. Every outcome is read back by delta-rs."""
from __future__ import annotations

import glob
import os

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog.errors import ConcurrentAppendException, ConcurrentDeleteReadException
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.optimize import optimize
from deltalog.table import DeltaTable
from tests.support.races import winner_commits_first
from tests.support.row_ids import check_version, row_ids

pytestmark = pytest.mark.spark
ROWS = 400


def _table(spark, uri: str, level: str) -> None:
    """Four small files (bin-packed by OPTIMIZE), ids 0..399, `v` = 0."""
    ops.write_dataframe(spark.range(ROWS).selectExpr("id", "0L AS v").repartition(4, "id"), uri,
                        configuration={"delta.enableDeletionVectors": "true", "delta.isolationLevel": level})
    assert Snapshot.load(uri).num_files == 4


def _delta_rs_rows(uri: str) -> dict[int, int]:
    dt = deltalake.DeltaTable(uri)
    table = pa.table(QueryBuilder().register("t", dt).execute("select id, v from t").read_all())
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


def _dml(spark, uri: str, kind: str) -> int:
    if kind == "delete":
        return ops.delete(spark, uri, "id IN (3, 250)")
    source = spark.sql("SELECT id, 7L AS v FROM VALUES (3L), (250L), (1000L) AS s(id)")
    return ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",
                     when_matched_update="*", when_not_matched_insert="*")


def _after_dml(kind: str) -> dict[int, int]:
    rows = {i: 0 for i in range(ROWS)}
    if kind == "delete":
        del rows[3], rows[250]
    else:
        rows.update({3: 7, 250: 7, 1000: 7})
    return rows


def _files_no_version_names(uri: str) -> set[str]:
    """Data and DV files on disk that no version of the table names (a lost attempt's leftovers)."""
    from deltalog.deletion_vectors import dv_file_path
    from deltalog.paths import decode_path
    named = set()
    for v in range(Snapshot.load(uri).version + 1):
        files = Snapshot.load(uri, version=v).files
        named |= {os.path.basename(decode_path(p)) for p in files.column("path").to_pylist()}
        named |= {os.path.basename(dv_file_path(dv)) for dv in files.column("deletion_vector").to_pylist()
                  if dv and dv_file_path(dv)}
    on_disk = glob.glob(os.path.join(uri, "*.parquet")) + glob.glob(os.path.join(uri, "deletion_vector_*.bin"))
    return {os.path.basename(p) for p in on_disk} - named


def _run_together(*jobs) -> None:
    """Each job in a thread of its own, all started before any is waited for."""
    import threading

    threads = [threading.Thread(target=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize("kind", ["delete", "merge"])
def test_dml_that_loses_to_optimize_runs_again_and_lands(spark, tmp_path, kind):
    uri = str(tmp_path / "t")
    _table(spark, uri, "WriteSerializable")
    with winner_commits_first(lambda _: optimize(spark, uri)) as state:
        version = _dml(spark, uri, kind)
    assert state["winner_version"] == 1 and version == 2
    history = DeltaTable(uri).history(limit=2)
    assert [h["operation"] for h in history] == [kind.upper(), "OPTIMIZE"]
    assert history[0]["readVersion"] == 1  # planned again on OPTIMIZE's files
    assert Snapshot.load(uri, version=1).num_files == 1
    expected = _after_dml(kind)
    assert _delta_rs_rows(uri) == expected
    # the rows were marked in OPTIMIZE's file, and the lost attempt left no file behind
    dvs = [dv for dv in Snapshot.load(uri).files.column("deletion_vector").to_pylist() if dv]
    assert [dv["cardinality"] for dv in dvs] == [2]
    assert glob.glob(os.path.join(uri, "deletion_vector_*.bin")) and _files_no_version_names(uri) == set()


@pytest.mark.parametrize("kind", ["delete", "merge"])
def test_optimize_that_loses_to_dml_runs_again_and_lands(spark, tmp_path, kind):
    uri = str(tmp_path / "t")
    _table(spark, uri, "WriteSerializable")
    with winner_commits_first(lambda _: _dml(spark, uri, kind)) as state:
        version = optimize(spark, uri)
    assert state["winner_version"] == 1 and version == 2
    history = DeltaTable(uri).history(limit=2)
    assert [h["operation"] for h in history] == ["OPTIMIZE", kind.upper()]
    assert history[0]["readVersion"] == 1
    assert _delta_rs_rows(uri) == _after_dml(kind)
    # OPTIMIZE compacted what the DML left, without the rows it deleted (no DV remains)
    snapshot = Snapshot.load(uri)
    assert snapshot.num_files == 1
    assert snapshot.files.column("deletion_vector").null_count == 1
    # the lost attempt's files are gone: every file on disk is one some version names
    assert _files_no_version_names(uri) == set()


@pytest.mark.parametrize("loser", ["delete", "optimize"])
def test_at_serializable_optimize_and_dml_on_the_same_files_still_conflict(spark, tmp_path, loser):
    uri = str(tmp_path / "t")
    _table(spark, uri, "Serializable")
    if loser == "delete":
        with winner_commits_first(lambda _: optimize(spark, uri)) as state:
            # OPTIMIZE rewrote the files the delete read into the partition it read: delta-spark's name
            with pytest.raises(ConcurrentAppendException, match="OPTIMIZE committed as version 1"):
                _dml(spark, uri, "delete")
    else:
        with winner_commits_first(lambda _: _dml(spark, uri, "delete")) as state:
            with pytest.raises(ConcurrentDeleteReadException, match="DELETE committed as version 1"):
                optimize(spark, uri)
    assert state["calls"] == 2  # the loser's commit and the winner's: no second run
    assert Snapshot.load(uri).version == 1


def test_deletes_and_purges_racing_in_threads_all_land(spark, tmp_path):
    """Not forced: one thread deletes three disjoint sets of rows while another purges the DVs until it
    is done (REORG ... APPLY (PURGE): every file with a DV rewritten). Neither fails, every delete's rows
    are gone, no DV is left, and delta-rs reads what we read. A purge has work only after a delete, so a
    delete loses at most once and a purge at most three times, which the reruns cover."""
    import threading

    uri = str(tmp_path / "t")
    _table(spark, uri, "WriteSerializable")
    errors: list[BaseException] = []
    deleted = [range(10, 20), range(150, 160), range(300, 310)]

    done = threading.Event()

    def deletes():
        try:
            for rows in deleted:
                ops.delete(spark, uri, f"id >= {rows.start} AND id < {rows.stop}")
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)
        finally:
            done.set()

    def purges():
        try:
            while not done.is_set():
                optimize(spark, uri, purge=True)
            optimize(spark, uri, purge=True)
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    _run_together(deletes, purges)
    assert errors == []
    gone = {i for rows in deleted for i in rows}
    assert _delta_rs_rows(uri) == {i: 0 for i in range(ROWS) if i not in gone}
    operations = [h["operation"] for h in DeltaTable(uri).history()]
    assert operations.count("DELETE") == 3 and operations[0] == "REORG"
    assert Snapshot.load(uri).files.column("deletion_vector").null_count == Snapshot.load(uri).num_files
    from deltalog.scan import read_table
    assert sorted(read_table(Snapshot.load(uri)).column("id").to_pylist()) == sorted(_delta_rs_rows(uri))


def _tracked_table(spark, uri: str) -> dict[int, int]:
    """The four-file table with row tracking too; returns every row's row ID by `id`."""
    ops.write_dataframe(spark.range(ROWS).selectExpr("id", "0L AS v").repartition(4, "id"), uri,
                        configuration={"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true",
                                       "delta.isolationLevel": "WriteSerializable"})
    assert Snapshot.load(uri).num_files == 4
    return row_ids(uri, 0)


@pytest.mark.parametrize("kind", ["delete", "merge"])
@pytest.mark.parametrize("loser", ["dml", "optimize"])
def test_with_row_tracking_the_loser_carries_its_marks_by_row_id_and_does_not_run_again(spark, tmp_path, kind, loser):
    """Row IDs say where OPTIMIZE put each row, so the loser lands on its first run: a losing DML marks its
    rows in OPTIMIZE's new file; a losing OPTIMIZE marks the rows the DML deleted or updated in its own."""
    uri = str(tmp_path / "t")
    before = _tracked_table(spark, uri)
    if loser == "dml":
        with winner_commits_first(lambda _: optimize(spark, uri)) as state:
            version = _dml(spark, uri, kind)
        operations = [kind.upper(), "OPTIMIZE"]
    else:
        with winner_commits_first(lambda _: _dml(spark, uri, kind)) as state:
            version = optimize(spark, uri)
        operations = ["OPTIMIZE", kind.upper()]
    assert state["winner_version"] == 1 and version == 2
    assert state["calls"] == 2  # the winner's commit and the loser's one run: nothing ran again
    history = DeltaTable(uri).history(limit=2)
    assert [h["operation"] for h in history] == operations
    assert history[0]["readVersion"] == 0  # planned on the files of version 0, carried to version 2
    expected = _after_dml(kind)
    assert _delta_rs_rows(uri) == expected
    from deltalog.scan import read_table
    ours = read_table(Snapshot.load(uri))
    assert dict(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist())) == expected
    # one file holds the original rows, with the two rows marked in its DV
    snapshot = Snapshot.load(uri)
    dvs = [dv for dv in snapshot.files.column("deletion_vector").to_pylist() if dv]
    assert [dv["cardinality"] for dv in dvs] == [2]
    assert snapshot.num_files == (1 if kind == "delete" else 2)
    # every untouched row kept its row ID through both commits; the protocol holds at each version
    for v in (1, 2):
        check_version(uri, v)
    after = row_ids(uri, 2)
    assert {k: after[k] for k in before if k in expected and k not in (3, 250)} == \
        {k: before[k] for k in before if k in expected and k not in (3, 250)}
    # nothing the first attempt wrote is left unnamed
    assert _files_no_version_names(uri) == set()


def test_with_row_tracking_optimize_carries_rows_a_delete_removed_with_their_whole_file(spark, tmp_path):
    """A DELETE that empties a file removes it; OPTIMIZE, losing, marks every row of that file deleted
    in its new file."""
    uri = str(tmp_path / "t")
    _tracked_table(spark, uri)
    first = Snapshot.load(uri).add_files()[0]
    from deltalog.scan import read_data_file
    snap = Snapshot.load(uri)
    in_first = read_data_file(snap.store, snap.schema_json, snap.configuration, [], first.path, {}, None)
    ids = sorted(in_first.column("id").to_pylist())
    predicate = f"id IN ({', '.join(map(str, ids))})"
    with winner_commits_first(lambda _: ops.delete(spark, uri, predicate)) as state:
        version = optimize(spark, uri)
    assert version == 2 and state["calls"] == 2
    removed = [a for a in DeltaTable(uri).history(limit=2)]
    assert removed[1]["operation"] == "DELETE"
    expected = {i: 0 for i in range(ROWS) if i not in set(ids)}
    assert _delta_rs_rows(uri) == expected
    dvs = [dv for dv in Snapshot.load(uri).files.column("deletion_vector").to_pylist() if dv]
    assert [dv["cardinality"] for dv in dvs] == [len(ids)]
    check_version(uri, 2)
    assert _files_no_version_names(uri) == set()


def test_with_row_tracking_a_purge_that_loses_runs_again_and_leaves_no_deleted_row(spark, tmp_path):
    """REORG ... APPLY (PURGE) is run to leave no deleted row in any file: losing to a DELETE, it does
    not carry the DELETE's marks into its files; it runs again."""
    uri = str(tmp_path / "t")
    _tracked_table(spark, uri)
    ops.delete(spark, uri, "id < 40")  # gives files DVs, for the purge to have work
    with winner_commits_first(lambda _: ops.delete(spark, uri, "id IN (100, 300)")) as state:
        version = optimize(spark, uri, purge=True)
    assert state["calls"] == 3 and version == 3  # the loser's first run, the winner's, the rerun
    assert DeltaTable(uri).history(limit=1)[0]["readVersion"] == 2
    assert Snapshot.load(uri).files.column("deletion_vector").null_count == Snapshot.load(uri).num_files
    assert _delta_rs_rows(uri) == {i: 0 for i in range(40, ROWS) if i not in (100, 300)}


def test_with_row_tracking_dml_and_optimize_racing_in_threads_all_land_keeping_row_ids(spark, tmp_path):
    """Not forced: deletes and merges in one thread, compactions in another until it is done. Every
    commit lands, the rows are those of the DML alone, read alike by delta-rs, and every row no DML
    touched keeps the row ID it had at version 0; each version is a valid row-tracked one."""
    import threading

    uri = str(tmp_path / "t")
    before = _tracked_table(spark, uri)
    errors: list[BaseException] = []
    done = threading.Event()
    expected = {i: 0 for i in range(ROWS)}

    def dml():
        try:
            for start in (10, 150, 300):
                ops.delete(spark, uri, f"id >= {start} AND id < {start + 10}")
                for i in range(start, start + 10):
                    del expected[i]
                source = spark.sql(f"SELECT id, 9L AS v FROM VALUES ({start + 20}L), ({start + 1000}L) AS s(id)")
                ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",
                          when_matched_update="*", when_not_matched_insert="*")
                expected.update({start + 20: 9, start + 1000: 9})
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)
        finally:
            done.set()

    def compactions():
        try:
            while not done.is_set():
                optimize(spark, uri)
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    _run_together(dml, compactions)
    assert errors == []
    assert _delta_rs_rows(uri) == expected
    last = Snapshot.load(uri).version
    for v in range(1, last + 1):
        check_version(uri, v)
    after = row_ids(uri, last)
    untouched = [k for k in before if expected.get(k) == 0]
    assert {k: after[k] for k in untouched} == {k: before[k] for k in untouched}
    assert "OPTIMIZE" in [h["operation"] for h in DeltaTable(uri).history()]
