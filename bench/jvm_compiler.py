"""What the local driver's late optimizing compiler (`spark.deltalog.lateOptimizingCompiler`, on by default)
costs a long job: each way starts a fresh local JVM as a dbt command does (`get_spark`), then runs a
CPU-bound job several times (a sum over 400M generated rows, then a 20M-row aggregation by 100k keys).
What it buys a dbt build is measured by `bench/dev_loop.py --ways duckdb deltalog-ci
deltalog-ci-eagercompiler` (and deltalog-server against deltalog-server-eagercompiler).

    python bench/jvm_compiler.py [--runs 3] [--master local[2]]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

JOB = """
import json, sys, time
t0 = time.time()
from dbt.adapters.deltalog.runtime.session import get_spark
spark = get_spark(sys.argv[1], json.loads(sys.argv[2]))
started = time.time() - t0
runs = []
for _ in range(int(sys.argv[3])):
    t = time.time()
    spark.range(0, 400_000_000).selectExpr("sum(id % 7 * id)", "max(hash(id))").collect()
    (spark.range(0, 20_000_000).selectExpr("id % 100000 as k", "id as v").groupBy("k").sum("v")
     .selectExpr("sum(`sum(v)`)").collect())
    runs.append(time.time() - t)
print(json.dumps({"start": started, "runs": runs}))
"""

WAYS = {"late (default)": {}, "eager (JVM defaults)": {"spark.deltalog.lateOptimizingCompiler": "false"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="deltalog-jvm-compiler-") as cwd:
        for name, conf in WAYS.items():
            done = subprocess.run([sys.executable, "-c", JOB, args.master, json.dumps(conf), str(args.runs)],
                                  cwd=cwd, env={**os.environ, "CI": "true"}, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{name}: {done.stderr[-2000:]}")
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    late, eager = results["late (default)"], results["eager (JVM defaults)"]
    print("| compiler | session start | " + " | ".join(f"run {i + 1}" for i in range(args.runs)) + " |")
    print("|---|---|" + "---|" * args.runs)
    for name, r in results.items():
        print(f"| {name} | {r['start']:.1f} s | " + " | ".join(f"{t:.2f} s" for t in r["runs"]) + " |")
    print(f"| late / eager | {late['start'] / eager['start']:.2f}x | "
          + " | ".join(f"{a / b:.2f}x" for a, b in zip(late["runs"], eager["runs"])) + " |")


if __name__ == "__main__":
    main()
