"""The one SparkSession that every dbt connection of this process shares: a JVM of this process (jvm.py)
or a session on the long-lived local Spark server (spark_server.py)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, Optional

from dbt.adapters.deltalog.jvm import ensure_java, start_spark

_lock = threading.Lock()
_spark = None


def get_spark(master: str = "local[*]", spark_conf: Optional[Dict[str, str]] = None, *,
              server: bool = False, idle_timeout: Optional[float] = None):
    """The process-wide SparkSession: dbt opens many connections, Spark is reached once. With
    `server`, a session on the long-lived local Spark server for these settings (spark_server.py),
    else a JVM of this process. The first session of a process serves all its connections."""
    global _spark
    with _lock:
        if _spark is not None and _is_alive(_spark):
            return _spark
        if server:
            from dbt.adapters.deltalog import spark_server

            ensure_java()
            _spark = spark_server.attach(master, dict(spark_conf or {}),
                                         idle_timeout or spark_server.DEFAULT_IDLE_TIMEOUT)
        else:
            _spark = start_spark(master, spark_conf)
        _follow_cluster_cores(_spark, master, spark_conf)
        # pyspark logs every failed statement's JVM trace; dbt reports the error itself
        logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
        return _spark


def _is_alive(spark) -> bool:
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # the JVM went away (a server that was killed)
        return False


def server_of(spark) -> Optional[dict]:
    """The Spark server `spark` is attached to (pid, key, ...), or None for a JVM of this process."""
    return getattr(spark, "_deltalog_server", None)


def _follow_cluster_cores(spark, master: str, spark_conf: Optional[Dict[str, str]]) -> None:
    if not master.startswith("local") and "spark.sql.shuffle.partitions" not in (spark_conf or {}):
        # Spark's default of 200 turns a small model into dozens of tiny files: follow the cluster
        from deltalog.spark.cluster import executor_cores

        spark.conf.set("spark.sql.shuffle.partitions", str(max(4, 2 * executor_cores(spark))))


_shared_checked: set = set()


def check_warehouse_shared(spark, warehouse: str) -> None:
    """On a cluster, a local-path warehouse must be storage the executors share with the driver:
    checked once per session and warehouse, before any model writes (StorageNotSharedError)."""
    from deltalog.filesystem import is_object_store_uri
    from deltalog.spark.cluster import check_shared_folder, is_local_master

    if is_local_master(spark) or is_object_store_uri(warehouse):
        return  # an object store shows every executor the same objects
    key = (id(spark.sparkContext), warehouse)
    with _lock:
        if key in _shared_checked:
            return
        os.makedirs(warehouse, exist_ok=True)
        check_shared_folder(spark, warehouse)
        _shared_checked.add(key)
