"""Many writers, one table: real threads and real processes racing for versions.

Checks what a user would: no commit lost (every writer's commits are in the log), no version written
twice (versions contiguous, one commit file each, every txnId once), every row present exactly once,
read back both here and by delta-rs; a read-modify-write counter ends at exactly the number of
increments (no lost update), conflicts being raised and retried."""
from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable, Snapshot, write_deltalake
from deltalog.actions import AddFile, now_ms
from deltalog.errors import ConcurrentModificationError
from deltalog.paths import encode_path, new_data_file_path
from deltalog.stats import file_stats


# ---- workers (top level: multiprocessing pickles them by name) --------------------------------------

def append_worker(uri: str, writer: int, commits: int, rows_per_commit: int) -> list[int]:
    versions = []
    for c in range(commits):
        first = (writer * 1000 + c) * rows_per_commit
        data = pa.table({"id": pa.array(range(first, first + rows_per_commit), pa.int64()),
                         "writer": pa.array([writer] * rows_per_commit, pa.int64())})
        versions.append(write_deltalake(uri, data, mode="append",
                                        extra_commit_info={"writer": writer, "seq": c}))
    return versions


def replace_partition_worker(uri: str, writer: int, rounds: int) -> list[int]:
    """Overwrite its own partition again and again (replace where part = writer)."""
    versions = []
    for r in range(rounds):
        data = pa.table({"id": pa.array([writer * 100 + r], pa.int64()),
                         "part": pa.array([f"w{writer}"])})
        versions.append(write_deltalake(uri, data, mode="overwrite", predicate=f"part = 'w{writer}'"))
    return versions


def increment_worker(uri: str, increments: int) -> int:
    """Read the counter, replace its file with counter + 1; retry on conflicts. Returns conflicts."""
    conflicts = 0
    done = 0
    table = DeltaTable(uri)
    while done < increments:
        txn = table.transaction()
        files = txn.snapshot.add_files()
        txn.read_whole_table()
        txn.read_files(files)
        value = sum(pq.read_table(os.path.join(uri, f.path), columns=["n"]).column("n")[0].as_py()
                    for f in files)
        rel = new_data_file_path()
        full = os.path.join(uri, rel)
        rows = pa.table({"n": pa.array([value + 1], pa.int64())})
        pq.write_table(rows, full)
        txn.add_actions([*(f.remove() for f in files),
                         AddFile(encode_path(rel), {}, os.path.getsize(full), now_ms(), True,
                                 file_stats(rows, txn.snapshot.schema_json))])
        try:
            txn.commit(operation="UPDATE")
            done += 1
        except ConcurrentModificationError:
            os.unlink(full)
            conflicts += 1
    return conflicts


class timed:
    """Wraps a worker to return (result, seconds it ran), excluding process start-up."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        start = time.perf_counter()
        out = self.fn(*args)
        return out, time.perf_counter() - start


def _ready() -> int:
    return os.getpid()


@pytest.fixture(scope="module")
def process_pool():
    """Real worker processes (spawned: nothing inherited), started once for the module."""
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=3, mp_context=multiprocessing.get_context("spawn")) as pool:
        pids = set(f.result(timeout=120) for f in [pool.submit(_ready) for _ in range(6)])
        assert os.getpid() not in pids
        yield pool


def run_processes(pool, fn, arg_list, timeout=120):
    """Run fn(*args) for each args in the pool's separate processes, at the same time."""
    assert len(arg_list) <= 3
    futures = [pool.submit(fn, *args) for args in arg_list]
    return [f.result(timeout=timeout) for f in futures]


def runner_fn(runner: str, request):
    if runner == "threads":
        return run_threads
    pool = request.getfixturevalue("process_pool")
    return lambda fn, args: run_processes(pool, fn, args)


def run_threads(fn, arg_list):
    results, errors = [None] * len(arg_list), []
    barrier = threading.Barrier(len(arg_list))

    def target(i, args):
        barrier.wait()  # start together, so they really race
        try:
            results[i] = fn(*args)
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=target, args=(i, a)) for i, a in enumerate(arg_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


# ---- checks ----------------------------------------------------------------------------------------

def assert_log_consistent(uri: str, expected_commits: int) -> list[dict]:
    log = os.path.join(uri, "_delta_log")
    commits = sorted(n for n in os.listdir(log) if n.endswith(".json") and not n.startswith("."))
    assert commits == ["%020d.json" % v for v in range(expected_commits)], "versions not contiguous"
    infos = []
    for name in commits:
        with open(os.path.join(log, name)) as f:
            infos.append(json.loads(f.readline())["commitInfo"])
    txn_ids = [i["txnId"] for i in infos]
    assert len(set(txn_ids)) == len(txn_ids), "a transaction committed twice"
    assert not [n for n in os.listdir(log) if n.startswith(".tmp")], "temp files left behind"
    return infos


def assert_rows(uri: str, expected_ids: list[int]):
    import deltalake
    theirs = sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist())
    assert theirs == sorted(expected_ids)
    snap = Snapshot.load(uri)
    ours = sorted(i for p in snap.file_uris() for i in pq.read_table(p, columns=["id"]).column("id").to_pylist())
    assert ours == sorted(expected_ids)


def make(uri: str, **config):
    write_deltalake(uri, pa.table({"id": pa.array([], pa.int64()), "writer": pa.array([], pa.int64())}),
                    configuration={"delta.checkpointInterval": "5", **config})


# ---- tests -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_concurrent_blind_appends(tmp_path, runner, request):
    uri = str(tmp_path / "t")
    make(uri)
    writers, commits, rows = (4, 12, 3) if runner == "threads" else (3, 8, 3)
    args = [(uri, w, commits, rows) for w in range(writers)]
    results = runner_fn(runner, request)(timed(append_worker), args)
    elapsed = max(r[1] for r in results)
    results = [r[0] for r in results]
    total = writers * commits
    infos = assert_log_consistent(uri, total + 1)
    # Every writer got distinct versions back, and each commit it made is in the log exactly once.
    all_versions = [v for r in results for v in r]
    assert sorted(all_versions) == list(range(1, total + 1))
    seen = {(i["writer"], i["seq"]) for i in infos[1:]}
    assert seen == {(w, c) for w in range(writers) for c in range(commits)}
    expected = [(w * 1000 + c) * rows + k for w in range(writers) for c in range(commits) for k in range(rows)]
    assert_rows(uri, expected)
    # Checkpoints were written on the way; the table loads through them and its crc matches.
    log = os.listdir(os.path.join(uri, "_delta_log"))
    assert "%020d.checkpoint.parquet" % 5 in log
    assert Snapshot.load(uri).version == total
    print(f"\n{runner}: {writers} writers x {commits} appends = {total} commits in {elapsed:.2f}s "
          f"({total / elapsed:.1f} commits/s)")


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_concurrent_partition_replacements_do_not_conflict(tmp_path, runner, request):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([0, 1, 2], pa.int64()), "part": ["w0", "w1", "w2"]}),
                    partition_by=["part"], configuration={"delta.isolationLevel": "Serializable"})
    writers, rounds = 3, 6
    args = [(uri, w, rounds) for w in range(writers)]
    runner_fn(runner, request)(replace_partition_worker, args)
    infos = assert_log_consistent(uri, writers * rounds + 1)
    assert all(i["isolationLevel"] == "Serializable" for i in infos[1:])
    assert_rows(uri, [w * 100 + rounds - 1 for w in range(writers)])


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_read_modify_write_counter_loses_no_update(tmp_path, runner, request):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"n": pa.array([0], pa.int64())}),
                    configuration={"delta.checkpointInterval": "4"})
    writers, increments = 3, 6
    args = [(uri, increments) for _ in range(writers)]
    conflicts = runner_fn(runner, request)(increment_worker, args)
    assert_log_consistent(uri, writers * increments + 1)
    snap = Snapshot.load(uri)
    assert snap.num_files == 1
    assert pq.read_table(snap.file_uris()[0]).column("n").to_pylist() == [writers * increments]
    import deltalake
    assert deltalake.DeltaTable(uri).to_pyarrow_table().column("n").to_pylist() == [writers * increments]
    # Only the committed files remain besides the removed ones: losers deleted their data files.
    data_files = [f for f in os.listdir(uri) if f.endswith(".parquet")]
    assert len(data_files) == writers * increments + 1
    print(f"\n{runner}: counter reached {writers * increments} with {sum(conflicts)} conflicts retried")


def create_or_append_worker(uri: str, writer: int) -> int:
    return write_deltalake(uri, pa.table({"id": pa.array([writer], pa.int64())}), mode="append")


@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_concurrent_creation_by_appends(tmp_path, runner, request):
    """Several writers append to a table that does not exist yet: one creates it, the others' version-0
    commits lose (ProtocolChangedException inside) and land as appends; every row is there."""
    uri = str(tmp_path / "t")
    writers = 4 if runner == "threads" else 3
    versions = runner_fn(runner, request)(
        create_or_append_worker, [(uri, w) for w in range(writers)])
    assert sorted(versions) == list(range(writers))
    assert_log_consistent(uri, writers)
    assert_rows(uri, list(range(writers)))
