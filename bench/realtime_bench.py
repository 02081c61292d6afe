"""Benchmark: a real-time pipeline run continuously, bounded in time. Events land as JSON files in a folder
at `--rate` rows a second (one file a second) for `--minutes`; the stream command
(`python -m dbt.adapters.deltalog.stream`) runs bronze (a file stream) and silver (a stream of bronze) with
`trigger={'processing_time': '2 seconds'}`. The pipeline runs twice in one invocation: with
`auto_compact: true` and without.

Reported for each run:
- end-to-end latency from a file landing to its rows committed in silver (p50, p99; from each silver
  commit's timestamp and the `landed_ms` its rows carry), target p99 <= 10 s;
- the live file count of bronze and silver over time (sampled every `--sample-seconds`), which should
  stay bounded with auto-compaction;
- at the end, silver's snapshot load here against delta-rs (median of 5), target <= 1.0x;
- that silver holds every event exactly once.

    python bench/realtime_bench.py [--minutes 10] [--rate 1000] [--only auto|plain] [--sample-seconds 15]
                                   [--json PATH] [--plot-latency PATH.svg] [--plot-files PATH.svg]

`--json` writes each run's results with the per-commit latencies and the file samples over time; the
plots (bench/plots.py, matplotlib) draw latency over time and live files over time, both runs in each.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.dbt_process import write_project  # noqa: E402

BRONZE = """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '2 seconds'},
          auto_compact=var('auto_compact')) }}
select event_id, landed_ms, user_id, amount
from {{ stream_files(var('landing'), format='json', schema='event_id bigint, landed_ms bigint, user_id bigint, amount double') }}
"""
SILVER = """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '2 seconds'},
          auto_compact=var('auto_compact')) }}
select event_id, landed_ms, user_id % 100 as segment, amount * 2 as doubled from {{ stream(ref('bronze')) }}
"""


def _live_files(table: Path) -> int | None:
    from deltalog.snapshot import Snapshot

    try:
        return Snapshot.load(str(table)).files.num_rows
    except Exception:
        return None


def _latencies(silver: Path, started_ms: float) -> tuple[list[float], list[list[float]]]:
    """Seconds from landing to commit for every row silver's commits added; and per commit that added
    rows: [seconds from `started_ms` to the commit, rows, min, median, max latency] (for the plot)."""
    out: list[float] = []
    commits: list[list[float]] = []
    log = silver / "_delta_log"
    for name in sorted(os.listdir(log)):
        if not name.endswith(".json") or not name[:20].isdigit():
            continue
        actions = [json.loads(line) for line in (log / name).read_text().splitlines() if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        committed = info.get("inCommitTimestamp") or info.get("timestamp")
        these: list[float] = []
        for a in actions:
            add = a.get("add")
            if add and add.get("dataChange", True) and committed:
                landed = pq.read_table(silver / add["path"], columns=["landed_ms"]).column("landed_ms").to_pylist()
                these.extend((committed - ms) / 1000 for ms in landed)
        if these:
            out.extend(these)
            these.sort()
            commits.append([round((committed - started_ms) / 1000, 2), len(these), round(these[0], 2),
                            round(these[len(these) // 2], 2), round(these[-1], 2)])
    return out, commits


def run(minutes: float, rate: int, auto_compact: bool, sample_seconds: float = 15) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltalog-realtime-"))
    root = write_project(work / "project", "rtb", {"bronze.sql": BRONZE, "silver.sql": SILVER})
    landing = work / "landing"
    landing.mkdir()
    variables = json.dumps({"landing": str(landing), "auto_compact": auto_compact})
    env = dict(os.environ)
    runner = subprocess.Popen([sys.executable, "-m", "dbt.adapters.deltalog.stream", "--select", "tag:realtime",
                               "--project-dir", str(root), "--profiles-dir", str(root), "--vars", variables],
                              cwd=root, env=env, stdout=open(work / "runner.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    tables = root / "warehouse" / "analytics"
    deadline = time.monotonic() + 300
    while not (tables / "silver" / "_delta_log").exists():
        if runner.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the runner did not start: {(work / 'runner.log').read_text()[-3000:]}")
        time.sleep(1)
    samples: list[tuple[float, int | None, int | None]] = []
    stop = threading.Event()
    started = time.monotonic()
    started_ms = time.time() * 1000  # the first file lands now: the plots' time zero

    def sample():
        while not stop.wait(sample_seconds):
            samples.append((time.monotonic() - started, _live_files(tables / "bronze"), _live_files(tables / "silver")))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    event = 0
    seconds = int(minutes * 60)
    for second in range(seconds):
        tick = started + second
        time.sleep(max(0.0, tick - time.monotonic()))
        now_ms = int(time.time() * 1000)
        rows = [{"event_id": event + i, "landed_ms": now_ms, "user_id": (event + i) * 7919 % 100_000,
                 "amount": (event + i) % 1000 / 10} for i in range(rate)]
        event += rate
        tmp = landing / f".{second}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, landing / f"{second:06d}.json")
    # drain: until silver holds every event (or a minute passes)
    import deltalake

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if deltalake.DeltaTable(str(tables / "silver")).to_pyarrow_table(columns=["event_id"]).num_rows >= event:
            break
        time.sleep(2)
    stop.set()
    runner.send_signal(signal.SIGTERM)
    try:
        runner.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)
    ids = deltalake.DeltaTable(str(tables / "silver")).to_pyarrow_table(columns=["event_id"]).column("event_id")
    exactly_once = len(ids) == event and len(set(ids.to_pylist())) == event
    latencies, commits = _latencies(tables / "silver", started_ms)
    latencies.sort()

    from deltalog.snapshot import Snapshot

    def timed(fn) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    ours = timed(lambda: Snapshot.load(str(tables / "silver")).num_files)
    theirs = timed(lambda: deltalake.DeltaTable(str(tables / "silver")).file_uris())  # the full file state
    return {
        "auto_compact": auto_compact, "events": event, "exactly_once": exactly_once,
        "latency_p50_s": round(latencies[len(latencies) // 2], 2) if latencies else None,
        "latency_p99_s": round(latencies[int(len(latencies) * 0.99)], 2) if latencies else None,
        "silver_versions": Snapshot.load(str(tables / "silver")).version,
        "files_over_time": [(round(t, 1), b, s) for t, b, s in samples], "commits": commits,
        "snapshot_load_ms": round(ours * 1000, 1), "delta_rs_load_ms": round(theirs * 1000, 1),
        "load_ratio": round(ours / theirs, 2), "work": str(work),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--only", choices=["auto", "plain"])
    parser.add_argument("--sample-seconds", type=float, default=15, help="how often live files are counted")
    parser.add_argument("--json", help="write every run's results here, with what the plots need")
    parser.add_argument("--plot-latency", help="draw latency over time, both runs, into this SVG")
    parser.add_argument("--plot-files", help="draw live files of bronze and silver over time into this SVG")
    args = parser.parse_args()
    modes = {"auto": [True], "plain": [False]}.get(args.only, [True, False])
    results = [run(args.minutes, args.rate, mode, args.sample_seconds) for mode in modes]
    if args.json:
        Path(args.json).write_text(json.dumps(
            [dict(r, minutes=args.minutes, rate=args.rate, measured=time.strftime("%Y-%m-%d")) for r in results]))
    if args.plot_latency or args.plot_files:
        import plots  # matplotlib only when plotting

        if args.plot_latency:
            plots.realtime_latency(results, args.plot_latency)
        if args.plot_files:
            plots.realtime_files(results, args.plot_files)
    for r in results:
        files = r["files_over_time"]
        print(f"auto_compact={r['auto_compact']}: {r['events']} events, exactly once: {r['exactly_once']}; "
              f"latency p50 {r['latency_p50_s']} s, p99 {r['latency_p99_s']} s; silver at version "
              f"{r['silver_versions']}; live files (bronze, silver) at the last samples "
              f"{[(b, s) for _, b, s in files[-3:]]}, max {max((s or 0) for _, _, s in files) if files else None}; "
              f"snapshot load {r['snapshot_load_ms']} ms vs delta-rs {r['delta_rs_load_ms']} ms "
              f"({r['load_ratio']}x)")
        print("  files over time (s, bronze, silver):", files)
    print(json.dumps([{k: v for k, v in r.items() if k not in ("files_over_time", "commits")} for r in results]))


if __name__ == "__main__":
    main()
