"""Writers killed with SIGKILL — while writing data files, around the commit's put-if-absent, while
writing the `.crc`, the checkpoint or `_last_checkpoint`, and at random times.

After each crash the table must read at its last landed commit (deltalog and delta-rs agree, and the
rows are exactly those of the landed commits), every `.crc` that exists matches, no file of the dead
transaction is live in any version, a half-written checkpoint / `_last_checkpoint` / `.crc` is
ignored, the next writer carries on at the next version, and vacuum removes the dead files once they
are older than the retention period.
"""
from __future__ import annotations

import inspect
import os
import random
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from deltalog import Snapshot, write_deltalake
from deltalog.checkpoint_read import read_last_checkpoint
from deltalog.checkpoint_write import checkpoint_name
from deltalog.checksum import checksum_name
from tests.support.selection import full_only
from tests.support.table_checks import check_table, has_crc

from crash_child import FAULT_EXIT, batch_ids, batch_table

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_child.py")
INTERVAL = 3  # checkpoint at versions 3, 6, ...


def create(uri: str) -> None:
    write_deltalake(uri, batch_table(0), configuration={"delta.checkpointInterval": str(INTERVAL)},
                    max_rows_per_file=2, extra_commit_info={"batch": 0})


def landed_ids(uri: str) -> list[int]:
    """The rows the landed commits brought, from their commitInfo `batch`."""
    from tests.support.table_checks import commit_names, read_commit
    ids = []
    for v in range(len(commit_names(uri))):
        info = next(a["commitInfo"] for a in read_commit(uri, v) if "commitInfo" in a)
        ids.extend(batch_ids(info["batch"]))
    return ids


def run_child(uri: str, hook: str, first: int, batches: int, timeout: float = 60, raise_instead: bool = False) -> int:
    env = dict(os.environ, CRASH_MODE="raise" if raise_instead else "kill")
    proc = subprocess.run([sys.executable, CHILD, uri, hook, str(first), str(batches)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode not in (0, -9, FAULT_EXIT):
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.returncode


def log_file(uri: str, name: str) -> str:
    return os.path.join(uri, "_delta_log", name)


def recover_and_check(uri: str, first_batch: int, batches: int = 4):
    """Another writer carries on after the crash; the table stays consistent."""
    before = Snapshot.load(uri).version
    for b in range(first_batch, first_batch + batches):
        v = write_deltalake(uri, batch_table(b), mode="append", max_rows_per_file=2,
                            extra_commit_info={"batch": b})
        assert v == before + 1 + (b - first_batch)
    return check_table(uri, landed_ids(uri))


# (hook, versions landed after the crash, what the crash leaves behind)
CASES = {
    # batch 1 = data files 1-3 (6 rows, 2 per file), batch 2 = files 4-6
    "data_file:5": (1, "orphans"),
    "torn_data:4": (1, "orphans"),
    "commit_temp:2": (1, "orphans+temp"),
    "commit_landed:2": (2, "no crc"),
    "crc_temp:2": (2, "no crc"),
    "crc_torn:2": (2, "torn crc"),
    "checkpoint_temp:1": (3, "no checkpoint"),
    "checkpoint_torn:1": (3, "torn checkpoint"),
    "before_last_checkpoint:1": (3, "checkpoint, no _last_checkpoint"),
    "last_checkpoint_torn:1": (3, "torn _last_checkpoint"),
}


@pytest.mark.parametrize("hook", list(CASES))
def test_kill_at_step(tmp_path, hook):
    uri = str(tmp_path / "t")
    create(uri)
    assert run_child(uri, hook, first=1, batches=4) == -9, "the hook did not fire"
    landed, left = CASES[hook]

    # delta-rs (1.6) fails on a torn checkpoint under its final name ("Corrupt footer"); our own
    # writer never leaves one (temp file + rename), so this case only models a non-atomic store.
    chk = check_table(uri, landed_ids(uri), compare_deltalake=(left != "torn checkpoint"))
    assert chk.version == landed
    assert chk.ids_deltalog == sorted(id for b in range(landed + 1) for id in batch_ids(b))
    if left.startswith("orphans"):
        assert chk.orphans, "the dead transaction's data files should be on disk, unreferenced"
    else:
        assert not chk.orphans
    if left == "orphans+temp":
        assert chk.temp_files, "the unlinked commit's temp file should be left in _delta_log"
        assert not os.path.exists(log_file(uri, "%020d.json" % 2))
    if left == "no crc":
        assert not has_crc(uri, landed)
    if left == "torn crc":
        assert has_crc(uri, landed) and landed not in chk.crc_verified  # present, unreadable, ignored
    if "checkpoint" in left:
        assert has_crc(uri, 3) and 3 in chk.crc_verified  # the crc is written before the checkpoint
    if left == "no checkpoint":
        assert not os.path.exists(log_file(uri, checkpoint_name(3)))
    if left == "torn checkpoint":
        assert os.path.getsize(log_file(uri, checkpoint_name(3))) > 0
    if left == "checkpoint, no _last_checkpoint":
        assert os.path.exists(log_file(uri, checkpoint_name(3)))
        assert read_last_checkpoint(Snapshot.load(uri).store) is None
    if left == "torn _last_checkpoint":
        assert os.path.exists(log_file(uri, "_last_checkpoint"))
        assert read_last_checkpoint(Snapshot.load(uri).store) is None  # unreadable: ignored

    # The next writer lands right after the last commit, and a later checkpoint works.
    chk = recover_and_check(uri, first_batch=10, batches=7 - landed)
    assert chk.version == 7
    assert has_crc(uri, chk.version) and chk.version in chk.crc_verified
    assert os.path.exists(log_file(uri, checkpoint_name(6)))
    last = read_last_checkpoint(Snapshot.load(uri).store)
    assert last is not None and last["version"] == 6


# (hook, versions landed) when the step raises an I/O error instead of killing the process: before
# the commit lands the write fails and cleans up after itself; after, it stands (a failed .crc or
# checkpoint is logged, never raised: the commit is durable).
RAISE_CASES = {
    "data_file:5": 1, "torn_data:4": 1, "commit_temp:2": 1, "commit_landed:2": 2,
    "crc_temp:2": 4, "crc_torn:2": 4, "checkpoint_temp:1": 4, "checkpoint_torn:1": 4,
    "before_last_checkpoint:1": 4, "last_checkpoint_torn:1": 4,
}


@pytest.mark.parametrize("hook", list(RAISE_CASES))
def test_exception_at_step(tmp_path, hook):
    uri = str(tmp_path / "t")
    create(uri)
    landed = RAISE_CASES[hook]
    code = run_child(uri, hook, first=1, batches=4, raise_instead=True)
    assert code == (FAULT_EXIT if landed < 4 else 0)
    chk = check_table(uri, landed_ids(uri), compare_deltalake=not hook.startswith("checkpoint_torn"))
    assert chk.version == landed
    assert chk.ids_deltalog == sorted(id for b in range(landed + 1) for id in batch_ids(b))
    # a failed write removes what it wrote; a landed one keeps every file it committed
    assert not chk.orphans, f"files of the failed write left behind: {chk.orphans}"
    chk = recover_and_check(uri, first_batch=10, batches=7 - landed)
    assert chk.version == 7


def test_recovered_torn_checkpoint_is_not_used_for_time_travel(tmp_path):
    """Version 3's torn checkpoint stays on disk after later checkpoints; loading versions 3..5
    falls back to the commits and gives exactly the rows of commits 0..v (delta-rs 1.6 cannot read
    these versions: it trusts the torn checkpoint)."""
    uri = str(tmp_path / "t")
    create(uri)
    assert run_child(uri, "checkpoint_torn:1", first=1, batches=4) == -9
    recover_and_check(uri, first_batch=10)
    import pyarrow.parquet  # noqa: F401
    for v in (3, 4, 5):
        ours = sorted(id for p in Snapshot.load(uri, version=v).file_uris()
                      for id in pa.parquet.read_table(p, columns=["id"]).column("id").to_pylist())
        expected = [i for b in range(4) for i in batch_ids(b)] + \
            [i for b in range(10, 10 + v - 3) for i in batch_ids(b)]
        assert ours == sorted(expected)


def kill_at_random(uri: str, first: int, rng: random.Random, batches: int = 40) -> float:
    proc = subprocess.Popen([sys.executable, CHILD, uri, "none", str(first), str(batches)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        delay = rng.uniform(0.02, 0.5)
        time.sleep(delay)
        proc.kill()  # SIGKILL
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
    return delay


def test_random_kills_then_vacuum(tmp_path):
    """Five writers in a row killed at random times on the same table: after each the table is
    consistent; then vacuum (with the dead files aged past retention) removes exactly the orphans."""
    uri = str(tmp_path / "t")
    create(uri)
    rng = random.Random(5)
    first = 1
    for trial in range(5):
        kill_at_random(uri, first, rng)
        chk = check_table(uri, landed_ids(uri), every_version=False)
        first += 100  # batch numbers never reused: ids stay unique across trials
    chk = recover_and_check(uri, first_batch=first, batches=1)
    run_vacuum_and_check(uri, chk)


def test_vacuum_removes_dead_transaction_files(tmp_path):
    uri = str(tmp_path / "t")
    create(uri)
    assert run_child(uri, "data_file:5", first=1, batches=4) == -9
    assert run_child(uri, "commit_temp:1", first=20, batches=2) == -9
    chk = check_table(uri, landed_ids(uri))
    assert len(chk.orphans) >= 4
    run_vacuum_and_check(uri, chk)


def _vacuum_function():
    try:
        from deltalog.operations import vacuum as module
    except ImportError:
        pytest.skip("deltalog/operations/vacuum.py does not exist yet")
    fn = getattr(module, "vacuum", None)
    if fn is None:
        pytest.skip("deltalog.operations.vacuum has no vacuum()")
    return fn


def run_vacuum_and_check(uri: str, chk) -> None:
    """Age the orphans past the default 7-day retention and vacuum with the default retention:
    exactly the orphans go; every live file stays; the table reads the same."""
    vacuum = _vacuum_function()
    old = time.time() - 8 * 24 * 3600
    for p in chk.orphans:
        os.utime(p, (old, old))
    young = set()
    # An orphan younger than the retention may belong to a writer still running: it must stay.
    if chk.orphans:
        keep = sorted(chk.orphans)[0]
        os.utime(keep, None)
        young.add(keep)
    live_before = set(Snapshot.load(uri).file_uris())
    version_before = Snapshot.load(uri).version
    params = inspect.signature(vacuum).parameters
    kwargs = {}
    if "dry_run" in params:
        kwargs["dry_run"] = False
    vacuum(uri, **kwargs)
    after = check_table(uri, landed_ids(uri), every_version=False)
    assert after.orphans == young, f"vacuum left {after.orphans - young}, removed {young - after.orphans}"
    assert set(Snapshot.load(uri).file_uris()) == live_before
    assert all(os.path.exists(p) for p in live_before)
    assert after.ids_deltalog == chk.ids_deltalog
    assert Snapshot.load(uri).version >= version_before


SPARK_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_crash_child.py")


@pytest.mark.spark
@pytest.mark.parametrize("hook", ["adopt:1"])  # commit_temp is the same log path as the engine case
def test_spark_writer_killed(tmp_path, hook):
    """A Spark write (executors' Parquet output staged in `_delta_staging/`, then moved into the table)
    killed before its commit: the table is unchanged, the staged and moved files are orphans that no
    version lists, and vacuum removes them (staging folder included) once past retention."""
    pytest.importorskip("pyspark")
    uri = str(tmp_path / "t")
    create(uri)
    proc = subprocess.run([sys.executable, SPARK_CHILD, uri, hook, "7"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, f"the hook did not fire ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    chk = check_table(uri, batch_ids(0))
    assert chk.version == 0 and chk.orphans
    staged = [p for p in chk.orphans if "_delta_staging" in p]
    if hook == "adopt:1":
        assert staged, "the files not yet adopted should still be in _delta_staging"
        assert len(chk.orphans) > len(staged), "the adopted file should be in the table folder"
    run_vacuum_and_check(uri, chk)


def _dv_rows(uri: str) -> tuple[int, list[int]]:
    """(version, ids) as delta-rs reads a table with deletion vectors (through its query engine)."""
    import deltalake
    from deltalake import QueryBuilder
    dt = deltalake.DeltaTable(uri)
    t = QueryBuilder().register("t", dt).execute("select id from t").read_all()
    return dt.version(), sorted(t.column("id").to_pylist())


@pytest.mark.spark
@pytest.mark.parametrize("hook", ["dv_written:1", pytest.param("commit_temp", marks=full_only(
    "a kill at commit_temp is the engine's own log path, killed in test_kill_at_step"))])
def test_spark_dv_delete_killed(tmp_path, hook):
    """A DELETE on a table with deletion vectors killed after its DV file is written (or with its commit
    in the log's temp file): the table still reads at the last version with every row (deltalog and
    delta-rs), the dead DV file is an orphan no version names, the next DELETE lands the next version
    marking the rows, and vacuum removes the orphan once past retention and keeps the live DV."""
    pytest.importorskip("pyspark")
    from deltalog.deletion_vectors import dv_file_path
    from deltalog.operations.vacuum import vacuum
    from deltalog.scan import read_table

    uri = str(tmp_path / "t")
    write_deltalake(uri, batch_table(0), configuration={"delta.enableDeletionVectors": "true"})
    everything = sorted(batch_ids(0))
    proc = subprocess.run([sys.executable, SPARK_CHILD, uri, hook, "1", "delete"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, f"the hook did not fire ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert _dv_rows(uri) == (0, everything)
    assert sorted(read_table(Snapshot.load(uri)).column("id").to_pylist()) == everything
    dead = [p for p in os.listdir(uri) if p.startswith("deletion_vector_")]
    assert len(dead) == 1  # written before the kill, named by no commit
    proc = subprocess.run([sys.executable, SPARK_CHILD, uri, "none", "2", "delete"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    odd = [i for i in everything if i % 2]
    assert _dv_rows(uri) == (1, odd)
    live = {dv_file_path(a.deletion_vector) for a in Snapshot.load(uri).add_files() if a.deletion_vector}
    assert live and dead[0] not in live
    old = time.time() - 8 * 24 * 3600
    for name in os.listdir(uri):
        if name.startswith("deletion_vector_") or name.endswith(".parquet"):
            os.utime(os.path.join(uri, name), (old, old))
    assert vacuum(uri) == dead
    assert sorted(p for p in os.listdir(uri) if p.startswith("deletion_vector_")) == sorted(live)
    assert _dv_rows(uri) == (1, odd)
