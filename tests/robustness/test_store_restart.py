"""The object store itself goes away in the middle of a write: a real SeaweedFS server stopped (SIGKILL)
just before a commit's put, or before a checkpoint's, then started again on the same data.

- Back within the client's retry window: the write lands once (the commit at the next version, the
  checkpoint complete), delta-rs reads each row once.
- Still down when the window (storage option `retry_timeout`) runs out: the write fails with a DeltaError
  naming the table and the log entry, never a secret; nothing landed half; once the store is back the
  next write carries on at the next version and VACUUM removes what the failed one left. A checkpoint that
  cannot be written leaves the commit standing (it is only an index), and a later one is written.
"""
from __future__ import annotations

import io
import threading
import time

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import Snapshot, write_deltalake

from deltalog.storage import files as filesystem
from deltalog.checkpoint_write import checkpoint_name
from deltalog.errors import DeltaError
from deltalog.storage.object_store import ObjectLogStore
from deltalog.operations.vacuum import vacuum
from tests.support.seaweed import SECRET_KEY, seaweedfs_or_skip


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        yield server


def options(s3, **extra) -> dict:
    return {**s3.storage_options(), **extra}


# The retry window of the writes that outlive a restart: a SeaweedFS restart takes seconds (more on a busy
# machine), and obstore's default 10 retries, with their randomised backoff, can all be spent in 2 s.
RIDES_OUT_A_RESTART = {"max_retries": "60", "retry_timeout": "120s"}


def rows(n0: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n0, n0 + n), pa.int64())})


def read_ids(s3, uri: str) -> tuple[int, list[int]]:
    dt = deltalake.DeltaTable(uri, storage_options=s3.storage_options())
    return dt.version(), sorted(dt.to_pyarrow_table().column("id").to_pylist())


@pytest.fixture
def stop_at(monkeypatch, s3):
    """stop_at(kind, back_after): the server is stopped just before the next put of a `kind` log entry
    ("commit" or "checkpoint"), and restarted `back_after` seconds later (None: the test restarts it)."""
    armed: dict = {}
    put_new, put_whole = ObjectLogStore.write_if_absent, ObjectLogStore.write_atomic

    def maybe_stop(name: str) -> None:
        kind = "checkpoint" if ".checkpoint." in name else "commit" if name.endswith(".json") else None
        if armed and kind == armed["kind"]:
            back_after = armed.pop("back_after")
            armed.clear()
            s3.stop()
            if back_after is not None:
                threading.Thread(target=lambda: (time.sleep(back_after), s3.restart()), daemon=True).start()

    def write_if_absent(self, name, data):
        maybe_stop(name)
        return put_new(self, name, data)

    def write_atomic(self, name, data):
        maybe_stop(name)
        return put_whole(self, name, data)

    monkeypatch.setattr(ObjectLogStore, "write_if_absent", write_if_absent)
    monkeypatch.setattr(ObjectLogStore, "write_atomic", write_atomic)

    def arm(kind: str, back_after: float | None) -> None:
        armed.update(kind=kind, back_after=back_after)
    yield arm
    if s3.proc.poll() is not None:
        s3.restart()


def test_store_restarted_during_a_commit_lands_it_once(s3, stop_at):
    uri = s3.uri("restart", "commit")
    write_deltalake(uri, rows(0, 5), storage_options=options(s3))
    stop_at("commit", back_after=1.0)
    started = time.time()
    assert write_deltalake(uri, rows(5, 5), mode="append", storage_options=options(s3, **RIDES_OUT_A_RESTART)) == 1
    print(f"the commit waited {time.time() - started:.1f} s for the store")
    assert read_ids(s3, uri) == (1, list(range(10)))
    assert len(deltalake.DeltaTable(uri, storage_options=s3.storage_options()).history()) == 2


def test_store_restarted_during_a_checkpoint_writes_it_whole(s3, stop_at):
    uri = s3.uri("restart", "checkpoint")
    write_deltalake(uri, rows(0, 5), storage_options=options(s3), configuration={"delta.checkpointInterval": "2"})
    write_deltalake(uri, rows(5, 5), mode="append", storage_options=options(s3))
    stop_at("checkpoint", back_after=1.0)
    assert write_deltalake(uri, rows(10, 5), mode="append", storage_options=options(s3, **RIDES_OUT_A_RESTART)) == 2
    store = ObjectLogStore(uri, s3.storage_options())
    checkpoint = pq.read_table(io.BytesIO(store.read(checkpoint_name(2))))  # whole: Parquet reads it
    assert sum(1 for a in checkpoint.column("add").to_pylist() if a) == 3
    assert read_ids(s3, uri) == (2, list(range(15)))


def test_store_down_for_good_during_a_commit_fails_by_name_and_the_next_write_carries_on(s3, stop_at):
    uri = s3.uri("restart", "down")
    short = options(s3, retry_timeout="3s")
    write_deltalake(uri, rows(0, 5), storage_options=short)
    stop_at("commit", back_after=None)
    started = time.time()
    with pytest.raises(DeltaError) as failed:
        write_deltalake(uri, rows(5, 5), mode="append", storage_options=short)
    waited = time.time() - started
    message = str(failed.value)
    assert uri in message and "00000000000000000001.json" in message, message
    assert SECRET_KEY not in message
    assert waited < 60, f"the failure took {waited:.0f} s with retry_timeout=3s"
    print(f"{type(failed.value).__name__} after {waited:.1f} s: {message}")
    s3.restart()
    assert read_ids(s3, uri) == (0, list(range(5)))  # nothing landed half
    assert write_deltalake(uri, rows(10, 5), mode="append", storage_options=short) == 1
    assert read_ids(s3, uri) == (1, list(range(5)) + list(range(10, 15)))
    filesystem.configure(s3.uri(), s3.storage_options())
    try:
        snapshot = Snapshot.load(uri)
        live = {a.path for a in snapshot.add_files()}
        vacuum(uri, retain_hours=0, force=True)
        left = {i.path for i in filesystem.list_files(uri) if not i.path.startswith("_delta_log")}
        assert left == live  # the failed write's data file went
    finally:
        filesystem.configure(s3.uri(), None)


def test_store_down_for_good_during_a_checkpoint_keeps_the_commit(s3, stop_at):
    uri = s3.uri("restart", "checkpoint-down")
    short = options(s3, retry_timeout="3s")
    write_deltalake(uri, rows(0, 5), storage_options=short, configuration={"delta.checkpointInterval": "2"})
    write_deltalake(uri, rows(5, 5), mode="append", storage_options=short)
    stop_at("checkpoint", back_after=None)
    assert write_deltalake(uri, rows(10, 5), mode="append", storage_options=short) == 2  # the commit stands
    s3.restart()
    store = ObjectLogStore(uri, s3.storage_options())
    assert not any(f.kind == "checkpoint" for f in store.list_from(0))
    assert read_ids(s3, uri) == (2, list(range(15)))
    write_deltalake(uri, rows(15, 5), mode="append", storage_options=short)
    assert write_deltalake(uri, rows(20, 5), mode="append", storage_options=short) == 4
    assert any(f.kind == "checkpoint" and f.version == 4 for f in store.list_from(0))
    assert read_ids(s3, uri) == (4, list(range(25)))
