"""Benchmark: load the latest snapshot of a table with 10,000 commits and 100,000 live files, here and
with delta-rs (`deltalake`), in the same run. Target: <= 1.5x delta-rs.

The JSON-only case (issue 12: no checkpoint at all, 300,000 files in 3,000 commits; target <= 1.0x):

    python bench/snapshot_load.py --commits 3000 --files-per-commit 100 --checkpoint-interval 0 --repeat 3

The log is written directly (commit files from `actions.commit_to_bytes`, a checkpoint every 10
commits from `checkpoint_write.write_checkpoint`); loading a snapshot never opens data files, and delta-rs
does not stat them either, so none are created.

The table users have (issue 33): delta-rs's `300k-add-files-100-col-partitioned` (5 commits, 300,000 adds
of a 100-column partitioned table) from `../shared/conformance/wild`; target <= 1.0x:

    python bench/snapshot_load.py --wild --repeat 5

    python bench/snapshot_load.py [--commits 10000] [--files-per-commit 10] [--checkpoint-interval 10]
                                  [--repeat 5] [--dir PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from deltalog.actions import AddFile, CommitInfo, Metadata, Protocol, commit_to_bytes  # noqa: E402
from deltalog.checkpoint_write import should_checkpoint, write_checkpoint  # noqa: E402
from deltalog.snapshot import Snapshot  # noqa: E402
from deltalog.storage import log_store_for  # noqa: E402

WILD = "300k-add-files-100-col-partitioned"
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
]}


def build(path: str, commits: int, files_per_commit: int, checkpoint_interval: int = 10) -> None:
    """The log of `commits` blind appends; a checkpoint every `checkpoint_interval` commits (0: none)."""
    store = log_store_for(path)
    interval = checkpoint_interval if checkpoint_interval > 0 else commits + 1
    meta = Metadata(schema_string=json.dumps(SCHEMA), configuration={"delta.checkpointInterval": str(interval)})
    now = int(time.time() * 1000)
    snap = None
    t0 = time.time()
    for v in range(commits):
        adds = []
        for i in range(files_per_commit):
            n = v * files_per_commit + i
            stats = json.dumps({"numRecords": 100, "minValues": {"id": n * 100, "name": f"a{n}"},
                                "maxValues": {"id": n * 100 + 99, "name": f"z{n}"},
                                "nullCount": {"id": 0, "name": 0}}, separators=(",", ":"))
            adds.append(AddFile(f"part-{n:08d}-bench.c000.snappy.parquet", {}, 1024 + n % 997, now,
                                True, stats))
        head = [CommitInfo(timestamp=now, operation="WRITE", read_version=v - 1, is_blind_append=True)]
        if v == 0:
            head += [Protocol(1, 2), meta]
        actions = head + adds
        store.write_if_absent("%020d.json" % v, commit_to_bytes(actions))
        if checkpoint_interval > 0:  # the snapshot is only needed to write checkpoints
            snap = Snapshot.load(path) if snap is None else snap.apply(v, actions, now)
            if should_checkpoint(v, snap.table_configuration.checkpoint_interval):
                write_checkpoint(store, snap)
        if v % 1000 == 0:
            print(f"  built {v} commits ({time.time() - t0:.0f} s)", flush=True)


def time_it(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--files-per-commit", type=int, default=10)
    ap.add_argument("--checkpoint-interval", type=int, default=10, help="0: a JSON-only log")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", help="reuse or create the table here (kept afterwards)")
    ap.add_argument("--wild", action="store_true", help="load ../shared/conformance/wild/" + WILD)
    args = ap.parse_args()

    import deltalake

    tmp = None
    path = args.dir
    if args.wild:
        import tarfile

        archive = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared",
                               "conformance", "wild", WILD + ".tar.gz")
        tmp = tempfile.mkdtemp(prefix="deltalog-bench-")
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        path = os.path.join(tmp, WILD)
        args.checkpoint_interval = 0  # its log is JSON only
    elif path is None:
        tmp = tempfile.mkdtemp(prefix="deltalog-bench-")
        path = os.path.join(tmp, "table")
    try:
        if not os.path.isdir(os.path.join(path, "_delta_log")):
            print(f"building {args.commits} commits x {args.files_per_commit} files in {path}")
            build(path, args.commits, args.files_per_commit, args.checkpoint_interval)

        def ours():
            s = Snapshot.load(path)
            assert s.num_files > 0
            return s

        def delta_rs():
            dt = deltalake.DeltaTable(path)
            uris = dt.file_uris()  # forces the full file state
            assert uris
            return dt

        s, dt = ours(), delta_rs()  # warm the OS cache for both
        assert s.version == dt.version(), (s.version, dt.version())
        assert sorted(s.file_uris()) == sorted(u.removeprefix("file://") for u in dt.file_uris())
        ours_t, rs_t = [], []
        for _ in range(args.repeat):  # interleaved, so both see the same machine load
            ours_t += time_it(ours, 1)
            rs_t += time_it(delta_rs, 1)
        m_ours, m_rs = statistics.median(ours_t), statistics.median(rs_t)
        print(f"version {s.version}, {s.num_files} live files, {args.repeat} repetitions")
        print(f"deltalog Snapshot.load : median {m_ours * 1000:8.1f} ms  (min {min(ours_t) * 1000:.1f})")
        print(f"delta-rs DeltaTable    : median {m_rs * 1000:8.1f} ms  (min {min(rs_t) * 1000:.1f})")
        target = "1.0x (JSON only)" if args.checkpoint_interval <= 0 else "1.5x"
        print(f"ratio deltalog / delta-rs: {m_ours / m_rs:.2f}x (target <= {target})")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
