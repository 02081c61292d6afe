"""A developer's afternoon on the Spark server: `dbt build` of the README's project (integration_tests/)
again and again on the default profile, one server throughout, each build's wall time and the server
JVM's heap after a full collection (`jcmd <pid> GC.run`, then `GC.heap_info`), against the build number.

    python bench/server_soak.py --builds 500 --json soak.json --plot soak.svg
    python bench/server_soak.py --builds 40 --before /path/to/older/checkout   # the same, older code too

Reported: build 10's and the last build's wall time and heap, and their ratios (targets: last / 10th
≤ 1.1× in time, ≤ 1.2× in heap). Every build must pass; the project's tables are checked by its own tests.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "integration_tests"


def jvm_pid(server_pid: int) -> int:
    """The Spark JVM the server process started (its child running java)."""
    for _ in range(100):
        done = subprocess.run(["ps", "--ppid", str(server_pid), "-o", "pid=,comm="], capture_output=True, text=True)
        for line in done.stdout.splitlines():
            pid, comm = line.split(None, 1)
            if "java" in comm:
                return int(pid)
        time.sleep(0.1)
    raise RuntimeError(f"no JVM under the server process {server_pid}")


def heap_after_full_gc(pid: int) -> int:
    """Bytes of heap in use after a full collection."""
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, check=True)
    out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, check=True).stdout
    # one line per generation (Parallel: PSYoungGen, ParOldGen; G1: one line for the whole heap)
    used = [int(m) for m in re.findall(r"^ \S.*?total \d+K, used (\d+)K", out, flags=re.M)]
    if not used:
        raise RuntimeError(f"jcmd GC.heap_info said: {out}")
    return sum(used) * 1024


def settled(state_dir: Path, since: float, timeout: float = 10) -> None:
    """Wait for the server to have done what it does once no command is attached (its report after the
    build); a server that makes none (older code) is given 3 s."""
    deadline = time.monotonic() + timeout
    wall_since = time.time() - (time.monotonic() - since)
    while time.monotonic() < deadline:
        states = [json.loads(p.read_text()) for p in state_dir.glob("*.json") if not p.name.endswith(".conf.json")]
        if states and "checked" not in states[0] and time.monotonic() > deadline - timeout + 3:
            return
        if states and states[0].get("checked", 0) > wall_since:
            return
        time.sleep(0.2)


def server_pid(state_dir: Path) -> int:
    states = [json.loads(p.read_text()) for p in state_dir.glob("*.json") if not p.name.endswith(".conf.json")]
    if len(states) != 1:
        raise RuntimeError(f"{len(states)} servers in {state_dir}")
    return int(states[0]["pid"])


def soak(label: str, builds: int, work: Path, pythonpath: str | None) -> list[dict]:
    project = work / f"project-{label}"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("target", "logs", "warehouse", "dbt_packages"))
    state_dir = work / f"servers-{label}"
    state_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CI"}  # the default profile: the Spark server
    env["DBT_DELTALOG_SERVER_DIR"] = str(state_dir)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    dbt = str(Path(sys.executable).with_name("dbt"))
    rows = []
    try:
        for n in range(1, builds + 1):
            started = time.monotonic()
            done = subprocess.run([dbt, "build", "--profiles-dir", "."], cwd=project, env=env,
                                  capture_output=True, text=True, timeout=1800)
            seconds = time.monotonic() - started
            if done.returncode != 0:
                raise RuntimeError(f"{label}: build {n} failed:\n{done.stdout[-4000:]}")
            settled(state_dir, time.monotonic())  # the report after this build ended
            pid = jvm_pid(server_pid(state_dir))
            used = heap_after_full_gc(pid)
            rows.append({"way": label, "build": n, "seconds": round(seconds, 2), "heap_after_gc_mb": used >> 20,
                         "jvm": pid})
            print(f"{label} build {n}: {seconds:.1f} s, heap after a full collection {used >> 20} MB (JVM {pid})",
                  flush=True)
    finally:
        subprocess.run([sys.executable, "-m", "dbt.adapters.deltalog.runtime.spark_server", "stop"], env=env,
                       capture_output=True)
    return rows


def summary(rows: list[dict]) -> str:
    tenth = next((r for r in rows if r["build"] == 10), rows[0])
    last = rows[-1]
    return (f"build {tenth['build']}: {tenth['seconds']} s, {tenth['heap_after_gc_mb']} MB; build {last['build']}: "
            f"{last['seconds']} s, {last['heap_after_gc_mb']} MB: time {last['seconds'] / tenth['seconds']:.2f}×, "
            f"heap {last['heap_after_gc_mb'] / max(1, tenth['heap_after_gc_mb']):.2f}×; "
            f"restarts: {len({r['jvm'] for r in rows}) - 1}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--builds", type=int, default=500)
    parser.add_argument("--before", type=Path, help="a checkout of older code, soaked after this one")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="server-soak-") as tmp:
        work = Path(tmp)
        results = {"now": soak("now", args.builds, work, None)}
        if args.before:
            results["before"] = soak("before", args.builds, work, str(args.before))
    for label, rows in results.items():
        print(f"{label}: {summary(rows)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot:
        from plots import server_soak

        server_soak(results, args.plot)

if __name__ == "__main__":
    main()
