"""The local Spark driver's class-data-sharing archive, recorded by a JVM of its own in the background.

A dbt command whose local JVM started without an archive (deltalog/spark/class_archive.py) starts this
module as a detached process when it ends (`jvm.record_archive_later`). The recorder:
- holds `recording.lock` in the archives' folder (`class_archive.recording_lock`): one recorder at a
  time (for any archive: two would take both cores from the user's commands), and none once the archive
  is there; removes what killed recorders left;
- waits until the machine is idle (a command that follows at once, as in a CI job, is not slowed), then
  runs at the lowest CPU priority, so that a command started meanwhile keeps the cores;
- starts Spark as the command did (the same defaults, class path and JVM options; none of the
  profile's catalogs or stores), recording with `-XX:ArchiveClassesAtExit`; runs a small workload
  through the engine (a Delta table written, appended to and read back with SQL: joins, aggregates, a
  window), so the archive holds the classes a build loads; lets the JVM exit and keeps its archive
  once written whole (`adopt_when_written`).
A recorder that fails leaves no archive; the next command's JVM starts without one and starts another.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Dict, Optional

# "0": the recorder neither waits for an idle machine nor lowers its priority (tests wait on it in a busy suite)
YIELDS = os.environ.get("DELTALOG_ARCHIVE_RECORDER_YIELDS", "1") != "0"
IDLE_SHARE = 0.6      # of the machine's CPU time idle ...
IDLE_SECONDS = 3      # ... each second for this many in a row, before recording starts
MAX_WAIT_S = 1800     # then it records anyway, at the lowest priority


def record(master: str, spark_conf: Dict[str, Any]) -> bool:
    """Record the archive the JVM for `master` and `spark_conf` would map, unless it is there or
    another recorder is at it. True when this recorder kept one."""
    from deltalog.spark import class_archive

    lock = class_archive.recording_lock()
    if lock is None:
        return False
    with lock:
        class_archive.remove_parts()
        if YIELDS:
            _yield_the_cores()
        return _record(master, spark_conf)


def _record(master: str, spark_conf: Dict[str, Any]) -> bool:
    from deltalog.spark import class_archive
    from dbt.adapters.deltalog.runtime.jvm import session_conf, start_spark

    conf = session_conf(master, spark_conf)
    _, missing = class_archive.driver_options(conf, conf.get("spark.driver.extraClassPath", ""))
    if missing is None:
        return False
    part = class_archive.new_part(missing)
    with tempfile.TemporaryDirectory(prefix="deltalog-archive-") as scratch:
        spark = start_spark(master, spark_conf, os.path.join(scratch, "spark.log"), recording=part)
        jvm = spark.sparkContext._gateway.proc
        try:
            _exercise(spark, scratch)
            spark.stop()
        finally:  # the JVM writes the archive as it exits, of the classes loaded until then
            jvm.stdin.close()  # pyspark's gateway exits when its input closes
            jvm.wait(timeout=600)
    return class_archive.adopt_when_written(jvm.pid, part, timeout_s=1)  # (a part not written whole: removed)


def _exercise(spark, scratch: str) -> None:
    """What a build does, small: Delta writes through the engine, SQL over the table read back."""
    from deltalog import DeltaTable
    from deltalog.spark.operations import write_dataframe
    from deltalog.spark.reader import snapshot_dataframe

    table = os.path.join(scratch, "table")
    rows = spark.sql("select id, cast(id % 7 as string) as kind, cast(id / 4 as decimal(12, 2)) as amount, "
                     "date_add(date'2024-01-01', cast(id % 30 as int)) as day, id % 5 = 0 as flag "
                     "from range(2000)")
    write_dataframe(rows, table, mode="overwrite")
    write_dataframe(rows.limit(20), table, mode="append")
    snapshot_dataframe(spark, DeltaTable(table).snapshot()).createOrReplaceTempView("recorded")
    spark.sql("""with totals as (select kind, sum(amount) as amount, count(*) as n, max(day) as last_day
                                 from recorded where not flag group by kind)
                 select t.*, row_number() over (order by amount desc) as rank,
                        case when n > 100 then 'many' else 'few' end as size
                 from totals t join (select distinct kind from recorded) k on t.kind = k.kind
                 order by rank""").collect()
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string").toPandas()


def _yield_the_cores() -> None:
    """Wait for an idle machine, then take the lowest priority, inherited by the JVM and its threads:
    niceness 19 and Linux's idle class (run only when nothing else would). Linux shares the cores
    between sessions (autogroups) before it looks at the priorities within one: this session's share
    goes down too, or it would take half the machine from a build (measured: 10-12 s builds against 6)."""
    _wait_until_idle()
    for lower in (lambda: os.nice(19), lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)),
                  _lower_this_sessions_share):
        try:
            lower()
        except (AttributeError, OSError):
            pass


def _lower_this_sessions_share() -> None:
    with open("/proc/self/autogroup", "w") as f:  # this session's alone: the recorder leads it
        f.write("19")


def _wait_until_idle() -> None:
    import time

    deadline = time.monotonic() + MAX_WAIT_S
    before, quiet = _cpu_times(), 0
    while before is not None and quiet < IDLE_SECONDS and time.monotonic() < deadline:
        time.sleep(1)
        now = _cpu_times()
        if now is None:
            return
        busy, idle = now[0] - before[0], now[1] - before[1]
        quiet = quiet + 1 if busy + idle > 0 and idle / (busy + idle) >= IDLE_SHARE else 0
        before = now


def _cpu_times() -> Optional[tuple]:
    """The machine's (busy, idle) CPU time so far, from Linux's /proc/stat (None elsewhere: no wait)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle, waiting for I/O
    return sum(fields) - idle, idle


if __name__ == "__main__":
    given = json.loads(sys.stdin.read())
    record(given["master"], given["spark_conf"])
