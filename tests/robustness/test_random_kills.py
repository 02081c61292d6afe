"""SIGKILL at random moments over a mixed workload (append, MERGE and DELETE with deletion vectors,
OPTIMIZE, a checkpoint every 3 versions), on local disk and on S3 (SeaweedFS).

Each trial starts a Spark writer (`mixed_child.py`) as a new writer, waits until it reported a random
number (0-7) of commits, and kills it with SIGKILL after a further random delay (0-0.6 s): in the
middle of writing data files, a deletion vector, a commit, a `.crc`, a checkpoint or `_last_checkpoint`,
wherever the moment falls. After every kill:

- delta-rs reads the last landed version, and deltalog reads the same version;
- its rows are exactly what the landed commits wrote (each tagged commit once, none lost, none twice);
- versions are contiguous, and the next trial's writer lands its first commit at the next version.

At the end a writer that is not killed runs a full cycle, and VACUUM (retention 0) deletes exactly what
no live version names.

How many trials: `DELTALOG_KILL_TRIALS=<local>,<s3>`; the suite runs 2 and 1 (about 3 minutes), the
full run the benchmarks page reports is `DELTALOG_KILL_TRIALS=100,30 pytest tests/robustness/test_random_kills.py -s`
(about 25 minutes on 2 cores).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog import Snapshot, write_deltalake

from deltalog.storage import files as filesystem
from deltalog.deletion_vectors import dv_file_path
from deltalog.operations.vacuum import vacuum
from deltalog.scan import read_table
from mixed_child import COUNTER_ID, TABLE_CONFIGURATION, expected_rows
from tests.support.seaweed import seaweedfs_or_skip

pytestmark = pytest.mark.spark
CHILD = __import__("mixed_child").__file__
LOCAL_TRIALS, S3_TRIALS = (int(n) for n in os.environ.get("DELTALOG_KILL_TRIALS", "2,1").split(","))
KILL_WITHIN = 0.6  # seconds after the chosen commit: a warm commit takes ~0.2-0.4 s
OPERATIONS = ("append", "merge", "delete", "optimize")


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        filesystem.configure(server.uri(), server.storage_options())
        try:
            yield server
        finally:
            filesystem.configure(server.uri(), None)


def create(uri: str, options: dict | None) -> None:
    import pyarrow as pa
    write_deltalake(uri, pa.table({"id": pa.array([COUNTER_ID], pa.int64()), "v": pa.array([0], pa.int64())}),
                    configuration=TABLE_CONFIGURATION, storage_options=options)


def start(uri: str, options: dict | None, writer: int, commits: int) -> subprocess.Popen:
    argv = [sys.executable, CHILD, uri, json.dumps(options) if options else "-", str(writer), str(commits)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reported(out: str) -> list[int | None]:
    """The version of each commit the child reported done (None: OPTIMIZE had nothing to do); a kill
    may fall between a landing and its line."""
    return [None if line.split()[2] == "None" else int(line.split()[2]) for line in out.splitlines()
            if line.startswith("landed ")]


def landed(out: str) -> list[int]:
    return [v for v in reported(out) if v is not None]


def check(uri: str, options: dict | None) -> int:
    """delta-rs and deltalog read the same version, holding exactly the landed commits' rows."""
    dt = deltalake.DeltaTable(uri, storage_options=options)
    rows = pa.table(QueryBuilder().register("t", dt).execute("select id, v from t").read_all()).to_pylist()
    table = {r["id"]: r["v"] for r in rows}
    assert len(table) == len(rows), "a row appears twice"
    infos = list(reversed(dt.history()))
    assert [i["version"] for i in infos] == list(range(dt.version() + 1)), "versions not contiguous"
    tags = [(i["writer"], i["seq"]) for i in infos if "writer" in i]
    assert len(tags) == len(set(tags)), "a commit landed twice"
    assert table == expected_rows(infos)
    snapshot = Snapshot.load(uri)
    assert snapshot.version == dt.version()
    ours = read_table(snapshot).to_pylist()
    assert {r["id"]: r["v"] for r in ours} == table and len(ours) == len(rows)
    return dt.version()


def run_trials(uri: str, options: dict | None, trials: int, seed: int) -> dict:
    create(uri, options)
    rng = random.Random(seed)
    version, report = 0, {"trials": 0, "commits_landed": 0, "killed_in": {}}
    for trial in range(trials):
        proc = start(uri, options, trial + 1, 400)
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-3000:]
        # after 0-7 commits, somewhere in the next one or two: every operation of the cycle gets its share
        lines = [proc.stdout.readline() for _ in range(rng.randrange(8))]
        time.sleep(rng.uniform(0, KILL_WITHIN))
        proc.kill()
        out, _ = proc.communicate(timeout=60)
        out = "".join(lines) + out
        versions = landed(out)
        if versions:  # this writer carried on where the last one was killed
            assert versions[0] == version + 1, (versions, version)
        after = check(uri, options)
        assert after >= (versions[-1] if versions else version)
        report["trials"] += 1
        # what the kill interrupted: the commit after the last one reported (or its post-commit work)
        seq = len(reported(out))
        moment = OPERATIONS[seq % 4] + (" after landing" if after > (versions[-1] if versions else version) else "")
        report["killed_in"][moment] = report["killed_in"].get(moment, 0) + 1
        report["commits_landed"] += after - version
        version = after
    proc = start(uri, options, trials + 1, 4)  # a normal run carries on: one full cycle
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert landed(out)[0] == version + 1
    check(uri, options)
    snapshot = Snapshot.load(uri)
    live = {a.path for a in snapshot.add_files()}
    live |= {p for p in map(dv_file_path, snapshot.files.column("deletion_vector").to_pylist()) if p}
    vacuum(uri, retain_hours=0, force=True)
    left = {i.path for i in filesystem.list_files(uri) if not i.path.startswith("_delta_log")}
    assert left == live, f"vacuum left {left - live}, removed {live - left}"
    check(uri, options)
    return report


def test_random_kills_on_local_disk(tmp_path):
    report = run_trials(str(tmp_path / "t"), None, LOCAL_TRIALS, seed=7)
    print(f"local: {report}")


def test_random_kills_on_s3(s3):
    report = run_trials(s3.uri("kills", "mixed"), s3.storage_options(), S3_TRIALS, seed=8)
    print(f"s3: {report}")
