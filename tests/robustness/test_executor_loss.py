"""A worker lost while dbt writes on a Spark standalone cluster (a master and two one-core workers on
127.0.0.1, sharing the warehouse's disk).

Worker 0 and its executor are killed with SIGKILL (its whole process group, as when a machine goes
away) a second after its executor started a task of a `table` model, and again, after a new worker has
joined, of an incremental `merge`. Every row of those models takes ~40 ms to compute on an executor, so
the kill falls while tasks run. Spark reruns the lost tasks on the worker left; the model succeeds;
delta-rs reads each row exactly once (no file a failed task attempt wrote is named by the log); VACUUM
then deletes every file no version names, and nothing else.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import deltalake
import pytest

from deltalog import Snapshot

from deltalog.storage import files as filesystem
from deltalog.deletion_vectors import dv_file_path
from deltalog.operations.vacuum import vacuum
from tests.support.standalone import standalone_cluster

pytestmark = [pytest.mark.dbt, pytest.mark.cluster]
LOST = re.compile(r"ERROR TaskSchedulerImpl: Lost (an )?executor")  # the driver saw it go
HERE = os.path.dirname(os.path.abspath(__file__))
SLOW = "coalesce(reflect('java.lang.Thread', 'sleep', cast(40 as bigint)), 'slept')"  # ~40 ms a row
MODELS = {
    "slow_table.sql": "{{ config(materialized='table') }} "
                      f"select id, {SLOW} as note from range(0, 400, 1, 8)",
    "slow_merge.sql": "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }} "
                      "select id, {{ var('run', 0) }} as run, " + SLOW + " as note "
                      "from range({{ 100 * var('run', 0) }}, {{ 100 * var('run', 0) + 200 }}, 1, 8)",
}


def _project(root: str, master: str) -> str:
    project = os.path.join(root, "project")
    os.makedirs(os.path.join(project, "models"))
    with open(os.path.join(project, "dbt_project.yml"), "w") as f:
        f.write("name: lossy\nversion: '1.0'\nprofile: lossy\nconfig-version: 2\n")
    with open(os.path.join(project, "profiles.yml"), "w") as f:
        f.write(textwrap.dedent(f"""\
            lossy:
              target: dev
              outputs:
                dev:
                  type: deltalog
                  schema: analytics
                  threads: 1
                  master: {master}
                  spark_server: false
                  warehouse: {os.path.join(root, "warehouse")}
                  spark_conf:
                    spark.driver.host: 127.0.0.1
                    spark.driver.bindAddress: 127.0.0.1
                    spark.executor.memory: 1g
                    spark.cores.max: "2"
            """))
    for name, sql in MODELS.items():
        with open(os.path.join(project, "models", name), "w") as f:
            f.write(sql)
    return project


def _tasks_started(cluster) -> int:
    """How many tasks worker 0's executors have started (from their logs in its work folder)."""
    folder = os.path.join(cluster.work_dir, "worker-0")
    n = 0
    for app in (a for a in os.listdir(folder) if a.startswith("app-")):
        for executor in os.listdir(os.path.join(folder, app)):
            with contextlib.suppress(OSError), open(os.path.join(folder, app, executor, "stderr"),
                                                    errors="replace") as f:
                n += f.read().count("Executor: Running task")
    return n


def run_and_lose_a_worker(cluster, project: str, model: str, args: list[str], after: float) -> dict:
    """dbt run in a child process (its driver); SIGKILL worker 0 `after` seconds after its executor
    started a task of `model`."""
    spark_log = os.path.join(project, "logs", "spark.log")  # the driver's Spark log, in dbt's log folder
    start = os.path.getsize(spark_log) if os.path.exists(spark_log) else 0
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "cluster_child.py"), cluster.master_url, project,
                             "run", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    out, killed_at = [], None
    for line in proc.stdout:
        out.append(line)
        if killed_at is None and "START" in line and f".{model}`" in line:
            before, deadline = _tasks_started(cluster), time.time() + 120
            while _tasks_started(cluster) == before and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(after)
            cluster.kill_worker(0)
            killed_at = time.time()
    proc.wait(timeout=600)
    reader.join(10)
    text = "".join(out)
    report = next((json.loads(line[len("CLUSTER-CHILD "):]) for line in out if line.startswith("CLUSTER-CHILD ")),
                  None)
    assert report is not None, f"no report (exit {proc.returncode}):\n{text[-3000:]}\n{''.join(err)[-3000:]}"
    assert killed_at is not None, f"{model} never started:\n{text[-3000:]}"
    with open(spark_log, errors="replace") as f:
        f.seek(start)
        report["spark_log"] = f.read() + "".join(err)
    report["output"] = text
    return report


def ids(table: str) -> list[tuple]:
    rows = deltalake.DeltaTable(table).to_pyarrow_table().to_pylist()
    return sorted((r["id"], r.get("run")) for r in rows)


def vacuum_leaves_only_live_files(table: str) -> int:
    """VACUUM (retention 0) deletes what no version names; returns how many files it deleted."""
    snapshot = Snapshot.load(table)
    live = {a.path for a in snapshot.add_files()}
    live |= {p for p in map(dv_file_path, snapshot.files.column("deletion_vector").to_pylist()) if p}
    deleted = vacuum(table, retain_hours=0, force=True)
    left = {i.path for i in filesystem.list_files(table) if i.type == filesystem.pafs.FileType.File
            and not i.path.startswith("_delta_log")}
    assert left == live, f"left {left - live}, removed {live - left}"
    return len(deleted)


def test_a_worker_lost_during_a_table_model_and_a_merge(tmp_path):
    with standalone_cluster(workers=2, cores=1, memory="1536m") as cluster:
        project = _project(str(tmp_path), cluster.master_url)
        warehouse = os.path.join(str(tmp_path), "warehouse", "analytics")

        first = run_and_lose_a_worker(cluster, project, "slow_table", [], after=1)
        assert first["success"], first["output"][-4000:] + first["spark_log"][-4000:]
        assert LOST.search(first["spark_log"]), "the kill did not take an executor away mid-job"
        assert ids(os.path.join(warehouse, "slow_table")) == [(i, None) for i in range(400)]
        assert ids(os.path.join(warehouse, "slow_merge")) == [(i, 0) for i in range(200)]

        cluster.start_worker(0)
        cluster.wait_for_workers(2)
        second = run_and_lose_a_worker(cluster, project, "slow_merge", ["--select", "slow_merge",
                                                                        "--vars", "{run: 1}"], after=1)
        assert second["success"], second["output"][-4000:] + second["spark_log"][-4000:]
        assert LOST.search(second["spark_log"]), "the kill did not take an executor away mid-job"
        assert ids(os.path.join(warehouse, "slow_merge")) == [(i, 0) for i in range(100)] + \
            [(i, 1) for i in range(100, 300)]
        assert Snapshot.load(os.path.join(warehouse, "slow_merge")).version == 1

        for name in ("slow_table", "slow_merge"):
            deleted = vacuum_leaves_only_live_files(os.path.join(warehouse, name))
            print(f"{name}: VACUUM deleted {deleted} file(s) no version names")
        assert ids(os.path.join(warehouse, "slow_table")) == [(i, None) for i in range(400)]
