"""The temporary views of a Spark session, kept in step with the warehouses: Spark sees each table and
dbt view as a session view named `schema.name` (`warehouse.view_name`), re-registered when its table has
a newer version or its SQL changed."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Optional, Tuple

from dbt.adapters.deltalog.warehouse import Warehouse, latest_log_version, referenced_relations


class SessionViews:
    """Temporary views of one SparkSession, kept in step with one or more warehouses.

    A table's view is re-registered only when its log has a newer version than the one the view
    was built on, so each statement reads the latest committed snapshot of what it names."""

    def __init__(self, spark):
        self.spark = spark
        self._lock = threading.Lock()  # held only to read or change the two dicts
        # view name -> (kind, warehouse root, version or SQL text)
        self._registered: Dict[str, Tuple[str, str, object]] = {}
        # view name -> the lock its registration is made under: dbt's threads register different
        # tables side by side (the JVM's work of one overlaps another's), the same one once. dbt views
        # register under one more lock, taken first, as are the tables they read after it: views that
        # name each other cannot deadlock two threads.
        self._name_locks: Dict[str, threading.RLock] = {}
        self._views_lock = threading.RLock()

    def _lock_of(self, name: str) -> threading.RLock:
        with self._lock:
            return self._name_locks.setdefault(name, threading.RLock())

    def _either_lock(self, name: str) -> Any:
        """Both locks a change of `name` may race with: a table's and the views'."""
        stack = contextlib.ExitStack()
        stack.enter_context(self._views_lock)
        stack.enter_context(self._lock_of(name))
        return stack

    def _known(self, name: str) -> Optional[Tuple[str, str, object]]:
        with self._lock:
            return self._registered.get(name)

    def _set(self, name: str, state: Optional[Tuple[str, str, object]]) -> None:
        with self._lock:
            if state is None:
                self._registered.pop(name, None)
            else:
                self._registered[name] = state

    def changed(self, name: str) -> None:
        """`name` was written by this process: its view is made again when a statement next names it."""
        with self._either_lock(name):
            self._set(name, None)

    def forget(self, name: str) -> None:
        with self._either_lock(name):
            self._set(name, None)
            self.spark.catalog.dropTempView(name)

    def table_version(self, warehouse: Warehouse, schema: str, name: str) -> Optional[int]:
        """The version of the table `schema.name` of `warehouse` its view was last registered at."""
        known = self._known(warehouse.view_name(schema, name))
        if known is None or known[0] != "table" or known[1] != warehouse.root:
            return None
        return int(known[2])

    def refresh_for_sql(self, warehouse: Warehouse, sql: str) -> None:
        for schema, name in referenced_relations(sql):
            self.ensure(*warehouse.resolve(schema, name))

    def ensure(self, warehouse: Warehouse, schema: str, name: str, _depth: int = 0) -> bool:
        """Make `schema.name` current; returns whether the warehouse holds such a relation."""
        vname = warehouse.view_name(schema, name)
        if warehouse.is_table(schema, name):
            with self._lock_of(vname):
                table = warehouse.table(schema, name)
                version = latest_log_version(table)
                if self._known(vname) != ("table", warehouse.root, version):
                    from deltalog.spark import reader

                    reader.register_view(self.spark, vname, table, version=version)
                    self._set(vname, ("table", warehouse.root, version))
                return True
        with self._either_lock(vname):
            known = self._known(vname)
            sql = warehouse.read_view_sql(schema, name)
            if sql is not None:
                if _depth < 50:
                    # a dbt view is SQL over other relations: make those current first
                    for ref in referenced_relations(sql):
                        ref_warehouse, ref_schema, ref_name = warehouse.resolve(*ref)
                        if (ref_warehouse.name, ref_schema, ref_name) != (warehouse.name, schema, name):
                            self.ensure(ref_warehouse, ref_schema, ref_name, _depth + 1)
                docs = warehouse.read_view_docs(schema, name)
                state = ("view", warehouse.root, sql, repr(sorted(docs.items())))
                if known != state:
                    self.spark.sql(f"create or replace temporary view `{vname}`{_view_docs_clause(self.spark, sql, docs)} as\n{sql}")
                    self._set(vname, state)
                return True
            if known is not None and known[1] == warehouse.root:
                # gone from the folder (dropped elsewhere): do not serve stale data
                self._set(vname, None)
                self.spark.catalog.dropTempView(vname)
            return False


def _sql_string(text: str) -> str:
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _view_docs_clause(spark, sql: str, docs: dict) -> str:
    """` (col COMMENT '...', ...) COMMENT '...'` for a view's persisted docs, so that DESCRIBE TABLE
    EXTENDED shows them as it does for tables ("" without docs)."""
    if not docs:
        return ""
    clause = ""
    comments = {str(k).lower(): v for k, v in (docs.get("columns") or {}).items() if v}
    if comments:
        columns = spark.sql(sql).columns  # analysed only, nothing runs
        clause += " (" + ", ".join(
            f"`{c}`" + (f" COMMENT {_sql_string(comments[c.lower()])}" if c.lower() in comments else "")
            for c in columns) + ")"
    if docs.get("description"):
        clause += f" COMMENT {_sql_string(docs['description'])}"
    return clause

