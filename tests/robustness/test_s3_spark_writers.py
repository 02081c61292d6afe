"""Spark writers on one S3 table (SeaweedFS on 127.0.0.1, a real server that refuses a second
conditional create), each in its own process with its own Spark:

- three processes x 15 commits (6 outside the full suite: appends, and read-modify-write merges of one
  counter row) land every commit exactly once: versions 1..45 (1..18), no rows lost or duplicated, the
  counter equals the merges that landed, and every conflict a loser met is a named exception;
- writers killed with SIGKILL after their data files reached the bucket, just before and just after
  their log entry's put, and at random moments: delta-rs reads the table at its last landed version
  with exactly the landed commits' rows, the next writer carries on at the next version, and VACUUM
  removes what the dead writers left.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import deltalake
import pyarrow as pa
import pytest

from deltalog import Snapshot, write_deltalake

from deltalog.storage import files as filesystem
from deltalog.operations.vacuum import vacuum
from s3_spark_child import COUNTER_ID, append_ids
from tests.support.seaweed import seaweedfs_or_skip
from tests.support.selection import FULL, full_only

pytestmark = pytest.mark.spark
CHILD = __import__("s3_spark_child").__file__
COMMITS = 15 if FULL else 6  # per writer in the three-writer race
NAMED_CONFLICTS = {"ConcurrentAppendException", "ConcurrentDeleteReadException",
                   "ConcurrentDeleteDeleteException", "ConcurrentTransactionException"}


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        filesystem.configure(server.uri(), server.storage_options())
        try:
            yield server
        finally:
            filesystem.configure(server.uri(), None)


def create(s3, name: str) -> str:
    uri = s3.uri("writers", name)
    write_deltalake(uri, pa.table({"id": pa.array([COUNTER_ID], pa.int64()), "v": pa.array([0], pa.int64())}),
                    storage_options=s3.storage_options(), configuration={"delta.checkpointInterval": "10"})
    return uri


def child(s3, uri: str, writer: int, commits: int, hook: str | None = None) -> subprocess.Popen:
    argv = [sys.executable, CHILD, uri, json.dumps(s3.storage_options()), str(writer), str(commits)]
    return subprocess.Popen(argv + ([hook] if hook else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def commit_infos(s3, uri: str) -> list[dict]:
    """commitInfo of every version, from delta-rs's history (oldest first)."""
    return list(reversed(deltalake.DeltaTable(uri, storage_options=s3.storage_options()).history()))


def expected_rows(infos: list[dict]) -> dict[int, int]:
    """{id: v} the landed commits add up to."""
    rows = {COUNTER_ID: 0}
    for info in infos:
        if "writer" not in info:
            continue
        if info["seq"] % 3 == 2:
            rows[COUNTER_ID] += 1
        else:
            rows.update({i: info["writer"] for i in append_ids(info["writer"], info["seq"])})
    return rows


def check(s3, uri: str) -> tuple[int, dict[int, int]]:
    """The table as delta-rs reads it equals what its landed commits wrote, each commit once, and
    deltalog reads the same version. Returns (version, rows)."""
    dt = deltalake.DeltaTable(uri, storage_options=s3.storage_options())
    ids = dt.to_pyarrow_table().to_pylist()
    rows = {r["id"]: r["v"] for r in ids}
    assert len(rows) == len(ids), "a row appears twice"
    infos = commit_infos(s3, uri)
    assert [i["version"] for i in infos] == list(range(dt.version() + 1)), "versions not contiguous"
    tagged = [(i["writer"], i["seq"]) for i in infos if "writer" in i]
    assert len(tagged) == len(set(tagged)), "a commit landed twice"
    assert rows == expected_rows(infos)
    assert Snapshot.load(uri).version == dt.version()
    return dt.version(), rows


def test_three_spark_processes_land_every_commit_once_on_s3(s3):
    uri = create(s3, "race")
    procs = [child(s3, uri, w, COMMITS) for w in range(3)]
    landed, conflicts = [], []
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        landed += [v for _, _, v in report["landed"]]
        conflicts += report["conflicts"]
    assert sorted(landed) == list(range(1, 3 * COMMITS + 1))  # every commit once, no version twice
    version, rows = check(s3, uri)
    merges = COMMITS // 3  # per writer: commit i merges when i % 3 == 2, else appends 20 rows
    assert version == 3 * COMMITS and rows[COUNTER_ID] == 3 * merges
    assert len(rows) == 1 + 3 * (COMMITS - merges) * 20
    # the losers met conflicts a user can read: the exception's name and the version that won
    for name, message in conflicts:
        assert name in NAMED_CONFLICTS and "version" in message, (name, message)
    print(f"{len(conflicts)} conflicts retried: {sorted({n for n, _ in conflicts})}")


@pytest.mark.parametrize("hook", [
    pytest.param("files_written:1", marks=full_only("the random kills below land before and after the files")),
    "commit_put:2",
    pytest.param("commit_landed:1", marks=full_only("the random kills below land after the commit too"))])
def test_a_spark_writer_killed_on_s3_leaves_the_last_landed_version(s3, hook):
    uri = create(s3, "killed-" + hook.replace(":", "-"))
    p = child(s3, uri, 0, 4, hook)
    _, err = p.communicate(timeout=600)
    assert p.returncode == -9, f"the hook did not fire ({p.returncode}): {err[-3000:]}"
    version, _ = check(s3, uri)
    landed = int(hook.split(":")[1]) + (1 if hook.startswith("commit_landed") else 0)
    assert version == landed  # commits 0..K-1 landed (and K itself when killed after its put)
    recover_and_vacuum(s3, uri, version)


@full_only("a writer killed mid-commit on S3 is the commit_put case above; random kills on S3 are "
           "tests/robustness/test_random_kills.py's S3 trial")
def test_spark_writers_killed_at_random_moments_on_s3(s3):
    uri = create(s3, "random-kills")
    rng = random.Random(11)
    for trial in range(3):
        p = child(s3, uri, trial + 1, 30)
        time.sleep(rng.uniform(6, 14))  # the child's Spark starts in ~5 s, then commits every ~second
        p.kill()
        p.communicate(timeout=60)
        check(s3, uri)
    recover_and_vacuum(s3, uri, Snapshot.load(uri).version)


def recover_and_vacuum(s3, uri: str, version: int) -> None:
    """The next writer lands the next version; VACUUM (zero retention, forced) deletes the dead
    writers' files and no live one; the table reads the same afterwards."""
    p = child(s3, uri, 9, 1)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["landed"] == [[0, "append", version + 1]]
    _, rows = check(s3, uri)
    live = {a.path for a in Snapshot.load(uri).add_files()}
    data = {i.path for i in filesystem.list_files(uri) if not i.path.startswith("_delta_log")}
    deleted = set(vacuum(uri, retain_hours=0, force=True))
    assert not deleted & live
    # what is left is what the live version names (the dead writers' files were older versions' or orphans)
    left = {i.path for i in filesystem.list_files(uri) if not i.path.startswith("_delta_log")}
    assert left == live and deleted == data - live
    assert check(s3, uri)[1] == rows
