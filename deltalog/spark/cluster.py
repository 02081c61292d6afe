"""What a Spark session whose tasks run in other processes (a cluster) must be checked for.

- `executor_cores`: the cores of the registered executors, waiting briefly for the first to register
  (a fresh session may start before any has), so shuffle partitions can follow the cluster's size.
- `check_shared_folder`: every executor writes a marker file under a local folder and the driver must
  see each one. Executors on other machines write to their own disks; data files they write there
  would be missing from the driver's view, so the run must stop before any write.
- `executors_load_jar`: whether the executors can load this package's jar classes (the fast
  clustering path), tried with one tiny job.
"""
from __future__ import annotations

import os
import shutil
import socket
import time
import uuid

from ..errors import DeltaError
from .connect import default_parallelism, is_connect

PROBE_FOLDER = ".deltalog-shared-check"  # hidden: never listed as a schema


class StorageNotSharedError(DeltaError):
    """A local warehouse folder that the cluster's executors do not share with the driver."""


def is_local_master(spark) -> bool:
    """Whether `spark` runs its tasks in the driver's JVM on this machine. A Spark Connect server with
    a local master is not: it may run on another machine, with folders of its own."""
    return not is_connect(spark) and spark.sparkContext.master.startswith("local")


def executor_count(spark) -> int:
    """Registered executors (the driver's own block manager excluded)."""
    sc = spark.sparkContext
    return max(0, sc._jsc.sc().getExecutorMemoryStatus().size() - 1)


def executor_cores(spark, wait_seconds: float = 30.0) -> int:
    """Total cores of the executors, after waiting up to `wait_seconds` for one to register and a
    moment for the others that start with it."""
    sc = spark.sparkContext
    deadline = time.time() + wait_seconds
    while executor_count(spark) == 0 and time.time() < deadline:
        time.sleep(0.2)
    settle = time.time() + 2.0
    seen = executor_count(spark)
    while time.time() < settle:  # executors started together register within a moment of each other
        time.sleep(0.25)
        now = executor_count(spark)
        if now != seen:
            seen, settle = now, time.time() + 2.0
    # a cluster's default parallelism is the registered executors' total cores
    return max(1, sc.defaultParallelism if seen else 1)


def _write_marker(folder: str):
    """A task (for mapInArrow) that writes one file under `folder` and says its name, host and error."""
    def task(batches):
        import pyarrow as pa

        for _ in batches:
            pass
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"
        error = ""
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, name), "w") as f:
                f.write("deltalog shared-storage check\n")
        except OSError as e:
            error = f"{type(e).__name__}: {e}"
        yield pa.RecordBatch.from_pydict({"name": [name], "host": [socket.gethostname()], "error": [error]})
    return task


def check_shared_folder(spark, folder: str) -> None:
    """Raise StorageNotSharedError unless every executor's writes under `folder` (a local path) are
    visible to this driver. Writes and removes `<folder>/.deltalog-shared-check/<uuid>/`."""
    probe = os.path.join(os.path.abspath(folder), PROBE_FOLDER, uuid.uuid4().hex)
    executors = 1 if is_connect(spark) else max(1, executor_count(spark))
    tasks = max(2 * default_parallelism(spark), 2 * executors)
    try:
        results = [tuple(row) for row in spark.range(0, tasks, 1, tasks)
                   .mapInArrow(_write_marker(probe), "name string, host string, error string").collect()]
        failed = [(host, err) for _, host, err in results if err]
        if failed:
            host, err = failed[0]
            raise StorageNotSharedError(
                f"{folder}: an executor on {host} cannot write into the warehouse ({err}). On a cluster the "
                f"warehouse must be storage that every executor and the driver share: a network file "
                f"system mounted at the same path on the driver and every executor.")
        seen = set(os.listdir(probe)) if os.path.isdir(probe) else set()
        missing = [(name, host) for name, host, _ in results if name not in seen]
        if missing:
            hosts = sorted({host for _, host in missing})
            # over Connect the log is written by this dbt process, not by the server's driver
            who, here = (("the Spark Connect server's executors", "this dbt process, which writes the log")
                         if is_connect(spark) else ("this cluster's executors", "the driver"))
            raise StorageNotSharedError(
                f"{folder}: the warehouse is a local folder that {who} do not share "
                f"with {here}: {len(missing)} of {len(results)} files written there by executors "
                f"(on {', '.join(hosts)}) are not visible here, so their data files would be lost. "
                f"Nothing was written. Use storage every executor and the driver share: a network file "
                f"system mounted at the same path on the driver and every executor.")
    finally:
        shutil.rmtree(probe, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(probe))
        except OSError:
            pass


def executors_load_jar(spark) -> bool:
    """Whether this session's executors can run the jar's `io.deltalog.cluster` classes: registers
    one of them as a function and runs it in a task on each executor slot. Cached per SparkContext."""
    sc = spark.sparkContext
    cached = getattr(sc, "_deltalog_executor_jar", None)
    if cached is not None:
        return cached
    ok = False
    try:
        jvm = sc._jvm
        udf = jvm.io.deltalog.cluster.Rank(bytearray(8))  # one cut point at 0.0
        name = f"__deltalog_jar_probe_{uuid.uuid4().hex[:8]}"
        spark._jsparkSession.udf().register(name, udf, jvm.org.apache.spark.sql.types.DataTypes.IntegerType)
        slots = max(1, sc.defaultParallelism)
        got = spark.range(0, slots, 1, slots).selectExpr(f"{name}(cast(id as double) - 0.5) as r").collect()
        ok = sorted(r["r"] for r in got) == [0] + [1] * (slots - 1)
    except Exception:
        ok = False
    sc._deltalog_executor_jar = ok
    return ok
