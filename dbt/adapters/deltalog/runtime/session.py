"""The process's `Runtime`: the one SparkSession that every dbt connection of this process shares (a
JVM of this process, jvm.py, or a session on the long-lived local Spark server, spark_server.py),
the temporary views of the warehouse registered in that session, the tables dbt's sources place
outside the warehouse, and the project folder.

One object per process, on purpose: dbt reaches it from classmethods that get no adapter (opening a
connection, resolving `source()` with a bare quoting object: dbt.context.providers.RuntimeSourceResolver),
and Spark is started once per process. Everything the adapter keeps between statements lives here
and nowhere else."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Dict, Optional

from dbt.adapters.deltalog.session_views import SessionViews
from dbt.adapters.deltalog.runtime.jvm import Command, ensure_java, start_spark


class Runtime:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        # held while a session starts (seconds): apart from _lock, so that work needing no Spark (a seed
        # written without it, marking a view changed) never waits for a JVM starting in the background
        self._start_lock = threading.RLock()
        self.spark = None
        self._views: Optional[SessionViews] = None
        self._checked: set = set()  # (session, warehouse) checked as shared with the executors
        self._described: set = set()  # warehouses whose data path was said in the log
        # (schema, name) -> location of the Delta tables of dbt sources that live elsewhere (a declared
        # location, or the metastore's), (catalog, schema, name) for an attached catalog's; filled as dbt
        # resolves source() (DeltalogRelation.create_from), read wherever a relation is located
        self.external_tables: Dict[tuple, str] = {}
        # the dbt project's folder: relative source locations and location_root are resolved against it
        self.project_root: Optional[str] = None
        # the Hive Metastore of each catalog that has one (None: the profile's own warehouse), where a
        # source with no location is looked up by name
        self.metastores: Dict[Optional[str], Any] = {}
        # the catalogs the profile attaches (`catalogs:`): the names a relation's `database` may take
        self.catalog_names: frozenset = frozenset()
        self.command = Command()  # this dbt command's Spark jobs (their tag, Ctrl-C)
        # set by `python -m dbt.adapters.deltalog.stream` (streaming.Continuous): streams that run until stopped
        self.continuous = None
        self._early: Optional[threading.Thread] = None  # start_early's thread
        self._interrupts_unhandled = False  # a server session attached outside the main thread

    def start_early(self, **arguments: Any) -> None:
        """Start the session (`get_spark`'s arguments) in a background thread, so the JVM starts while
        dbt parses the project; the first `get_spark` waits for it. A start that fails here is tried
        again there, where its error reaches the user. A local Spark server already up is not attached
        to here."""
        if arguments.get("server") and not arguments.get("remote"):
            from dbt.adapters.deltalog.runtime import spark_server

            if spark_server.is_up(arguments.get("master", "local[*]"), arguments.get("spark_conf")):
                # Attaching takes a few hundredths of a second on its own, but a second or more of
                # round trips beside dbt's parse (both want the GIL); a build that needs no Spark
                # never attaches. So it attaches when a statement first needs it.
                from dbt.adapters.events.logging import AdapterLogger

                AdapterLogger("Deltalog").debug("the Spark server is up: attaching when a statement needs it")
                return
        with self._lock:
            if self._early is not None or (self.spark is not None and _is_alive(self.spark)):
                return
            self._early = threading.Thread(target=self._start_quietly, kwargs=arguments,
                                           name="deltalog-spark-start", daemon=True)
            self._early.start()

    def _start_quietly(self, **arguments: Any) -> None:
        from dbt.adapters.events.logging import AdapterLogger

        began = time.monotonic()
        try:
            self.get_spark(**arguments)
        except Exception as exc:  # noqa: BLE001 - started again by the connection, which reports it
            AdapterLogger("Deltalog").debug(f"Spark did not start early: {exc}")
        else:
            AdapterLogger("Deltalog").debug(
                f"Spark started early, while dbt parsed the project, in {time.monotonic() - began:.1f} s")

    def get_spark(self, master: str = "local[*]", spark_conf: Optional[Dict[str, str]] = None, *,
                  server: bool = False, idle_timeout: Optional[float] = None, remote: Optional[str] = None):
        """The process-wide SparkSession: dbt opens many connections, Spark is reached once. With
        `remote` (an sc:// connection string), a session on that Spark Connect server; with `server`, a
        session on the long-lived local Spark server for these settings (spark_server.py); else a JVM of
        this process. The first session of a process serves all its connections."""
        early = self._early
        if early is not None and early is not threading.current_thread():
            early.join()
        with self._start_lock:
            if self.spark is not None and _is_alive(self.spark):
                if self._interrupts_unhandled and threading.current_thread() is threading.main_thread():
                    from dbt.adapters.deltalog.runtime import spark_server

                    spark_server.handle_interrupts(self.spark, self.command.cancel_jobs)
                    self._interrupts_unhandled = False
                return self.spark
            if remote:
                from dbt.adapters.deltalog.runtime.connect import connect_session

                spark = connect_session(remote, spark_conf)
                with self._lock:
                    self.spark, self._views = spark, None
                return spark
            if server:
                from dbt.adapters.deltalog.runtime import spark_server

                ensure_java()
                spark = spark_server.attach(master, dict(spark_conf or {}),
                                            idle_timeout or spark_server.DEFAULT_IDLE_TIMEOUT,
                                            on_interrupt=self.command.cancel_jobs)
                self._interrupts_unhandled = threading.current_thread() is not threading.main_thread()
            else:
                spark = start_spark(master, spark_conf)
            _follow_cluster_cores(spark, master, spark_conf)
            # pyspark logs every failed statement's JVM trace; dbt reports the error itself
            logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
            with self._lock:
                self.spark, self._views = spark, None  # a new session has none of the old one's views
            return spark

    def views(self, spark) -> SessionViews:
        """The warehouse views registered in `spark` (the process's session)."""
        with self._lock:
            if self._views is None or self._views.spark is not spark:
                self._views = SessionViews(spark)
            return self._views

    def changed(self, view_name: str) -> None:
        """This process just wrote the relation: its session view, if it has one, is made again when a
        statement next names it (a table dropped and built again can be back at the version the view
        was made at, with other files)."""
        with self._lock:
            views = self._views
        if views is not None:
            views.changed(view_name)

    def first_description(self, warehouse: str) -> bool:
        """True the first time the warehouse's data path is to be said in the log."""
        with self._lock:
            if warehouse in self._described:
                return False
            self._described.add(warehouse)
            return True

    def check_warehouse_shared(self, spark, warehouse: str) -> None:
        """On a cluster, a local-path warehouse must be storage the executors share with the driver:
        checked once per session and warehouse, before any model writes (StorageNotSharedError). A
        Spark application that passed the check leaves a note in the warehouse, so later commands on
        the same long-running application (a Spark Connect server) do not pay for the check again."""
        from deltalog.storage.files import is_object_store_uri
        from deltalog.spark.cluster import PROBE_FOLDER, check_shared_folder, is_local_master
        from deltalog.spark.connect import is_connect

        if is_local_master(spark) or is_object_store_uri(warehouse):
            return  # an object store shows every executor the same objects
        with self._lock:
            key = (id(spark), warehouse)
            if key in self._checked:
                return
            # (a session this process drives is a new application each command: nothing to remember)
            app = _application_id(spark) if is_connect(spark) else None
            passed = os.path.join(warehouse, PROBE_FOLDER, f"passed-{app}") if app else None
            if passed is None or not os.path.exists(passed):
                os.makedirs(warehouse, exist_ok=True)
                check_shared_folder(spark, warehouse)
                if passed is not None:
                    os.makedirs(os.path.dirname(passed), exist_ok=True)
                    with open(passed, "w") as note:
                        note.write("this Spark application's executors share the warehouse folder\n")
            self._checked.add(key)


RUNTIME = Runtime()


def get_spark(master: str = "local[*]", spark_conf: Optional[Dict[str, str]] = None, *,
              server: bool = False, idle_timeout: Optional[float] = None, remote: Optional[str] = None):
    return RUNTIME.get_spark(master, spark_conf, server=server, idle_timeout=idle_timeout, remote=remote)


def _is_alive(spark) -> bool:
    from deltalog.spark.connect import is_connect

    if is_connect(spark):
        return not spark.is_stopped
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # the JVM went away (a server that was killed)
        return False


def _application_id(spark) -> Optional[str]:
    """The Spark application's id (e.g. app-20261127024500-0003), the same for every session on it."""
    try:
        app = spark.conf.get("spark.app.id", None)
    except Exception:
        return None
    return "".join(c for c in app if c.isalnum() or c in "-_.") if app else None


def _follow_cluster_cores(spark, master: str, spark_conf: Optional[Dict[str, str]]) -> None:
    if not master.startswith("local") and "spark.sql.shuffle.partitions" not in (spark_conf or {}):
        # Spark's default of 200 turns a small model into dozens of tiny files: follow the cluster
        from deltalog.spark.cluster import executor_cores

        spark.conf.set("spark.sql.shuffle.partitions", str(max(4, 2 * executor_cores(spark))))
