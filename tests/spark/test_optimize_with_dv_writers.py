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

from deltalog.errors import ConcurrentDeleteReadException
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.optimize import optimize
from deltalog.table import DeltaTable
from tests.races import winner_commits_first

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
            with pytest.raises(ConcurrentDeleteReadException, match="OPTIMIZE committed as version 1"):
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

    threads = [threading.Thread(target=deletes), threading.Thread(target=purges)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    gone = {i for rows in deleted for i in rows}
    assert _delta_rs_rows(uri) == {i: 0 for i in range(ROWS) if i not in gone}
    operations = [h["operation"] for h in DeltaTable(uri).history()]
    assert operations.count("DELETE") == 3 and operations[0] == "REORG"
    assert Snapshot.load(uri).files.column("deletion_vector").null_count == Snapshot.load(uri).num_files
    from deltalog.scan import read_table
    assert sorted(read_table(Snapshot.load(uri)).column("id").to_pylist()) == sorted(_delta_rs_rows(uri))
