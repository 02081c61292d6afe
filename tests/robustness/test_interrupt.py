"""Ctrl-C (KeyboardInterrupt) and errors around a commit, for every writer.

An interrupt can arrive after the commit's put-if-absent landed and before `commit()` returned. The
writer's clean-up must then leave the committed files alone: the table reads at the new version with
every row (deltalog and delta-rs agree, every live file exists). An interrupt before the commit landed
must leave the table at its previous version and delete the files written for the lost commit.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable

from deltalog import Snapshot, write_deltalake
from deltalog.errors import NotATableError
from deltalog.storage.log_store import LocalLogStore

pytestmark = pytest.mark.spark


def _interrupt_commits(monkeypatch, *, after_landing: bool):
    """Make the next commit raise KeyboardInterrupt, after (or instead of) landing it."""
    original = LocalLogStore.write_if_absent
    state = {"fired": False}

    def write_if_absent(self, name, data):
        if name.endswith(".json") and not state["fired"]:
            state["fired"] = True
            if after_landing:
                original(self, name, data)
            raise KeyboardInterrupt
        return original(self, name, data)

    monkeypatch.setattr(LocalLogStore, "write_if_absent", write_if_absent)
    return state


def _live_files_exist(uri: str) -> Snapshot:
    snap = Snapshot.load(uri)
    missing = [p for p in snap.file_uris() if not os.path.exists(p)]
    assert not missing, f"version {snap.version} names deleted files: {missing}"
    return snap


def _rows(uri: str) -> list[int]:
    return sorted(RsTable(uri).to_pyarrow_table().column("id").to_pylist())


def _data_files(uri: str) -> set[str]:
    out = set()
    for dirpath, dirs, names in os.walk(uri):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        out |= {os.path.join(dirpath, n) for n in names if n.endswith(".parquet")}
    return out


def _base(spark, uri):
    from deltalog.spark import operations

    df = spark.createDataFrame([(i, i % 3, f"v{i}") for i in range(30)], "id long, k int, v string")
    operations.write_dataframe(df.repartition(3), uri, mode="error")


def _writers(spark):
    from deltalog.spark import operations, optimize

    def append(uri):
        operations.write_dataframe(spark.createDataFrame([(100, 1, "new")], "id long, k int, v string"),
                                   uri, mode="append")

    def overwrite(uri):
        operations.write_dataframe(spark.createDataFrame([(i, 0, "o") for i in range(5)], "id long, k int, v string"),
                                   uri, mode="overwrite")

    def merge(uri):
        src = spark.createDataFrame([(1, 9, "upd"), (200, 9, "ins")], "id long, k int, v string")
        operations.merge(spark, uri, src, on="s.id = t.id", source_alias="s", target_alias="t",
                         when_matched_update="*", when_not_matched_insert="*")

    def delete(uri):
        operations.delete(spark, uri, "id % 2 = 0")

    def compact(uri):
        optimize.optimize(spark, uri)

    return {"append": (append, 31), "overwrite": (overwrite, 5), "merge": (merge, 31), "delete": (delete, 15),
            "optimize": (compact, 30)}


@pytest.mark.parametrize("writer", ["append", "overwrite", "merge", "delete", "optimize"])
def test_interrupt_after_the_commit_landed_keeps_its_files(spark, tmp_path, monkeypatch, writer):
    uri = str(tmp_path / writer)
    _base(spark, uri)
    run, expected_rows = _writers(spark)[writer]
    _interrupt_commits(monkeypatch, after_landing=True)
    with pytest.raises(KeyboardInterrupt):
        run(uri)
    snap = _live_files_exist(uri)
    assert snap.version == 1
    assert len(_rows(uri)) == expected_rows
    assert RsTable(uri).version() == 1


@pytest.mark.parametrize("writer", ["append", "merge", "delete", "optimize"])
def test_interrupt_before_the_commit_landed_deletes_only_its_own_files(spark, tmp_path, monkeypatch, writer):
    uri = str(tmp_path / writer)
    _base(spark, uri)
    before_files, before_rows = _data_files(uri), _rows(uri)
    run, _ = _writers(spark)[writer]
    _interrupt_commits(monkeypatch, after_landing=False)
    with pytest.raises(KeyboardInterrupt):
        run(uri)
    assert Snapshot.load(uri).version == 0
    assert _rows(uri) == before_rows
    assert _data_files(uri) == before_files  # the lost commit's files are gone, the table's are kept


def test_arrow_writer_interrupted_after_landing_keeps_its_files(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": list(range(10))}))
    _interrupt_commits(monkeypatch, after_landing=True)
    with pytest.raises(KeyboardInterrupt):
        write_deltalake(uri, pa.table({"id": list(range(10, 20))}), mode="append")
    assert _live_files_exist(uri).version == 1
    assert _rows(uri) == list(range(20))


def test_commit_into_a_table_deleted_meanwhile_fails_and_recreates_nothing(spark, tmp_path):
    import shutil

    from deltalog.table import DeltaTable

    uri = str(tmp_path / "t")
    _base(spark, uri)
    txn = DeltaTable(uri).transaction()
    txn.read_whole_table()
    shutil.rmtree(uri)
    with pytest.raises(NotATableError, match="deleted"):
        txn.commit(operation="WRITE")
    assert not os.path.exists(uri)

    # emptied log (folder kept): the version it read is gone
    _base(spark, uri)
    txn = DeltaTable(uri).transaction()
    for name in os.listdir(os.path.join(uri, "_delta_log")):
        os.unlink(os.path.join(uri, "_delta_log", name))
    with pytest.raises(NotATableError, match="version 0"):
        txn.commit(operation="WRITE")
    assert os.listdir(os.path.join(uri, "_delta_log")) == []
