"""A dbt view's SQL is checked by Spark once per shape of what it reads.

`dbt run` checks that a view compiles before its SQL is saved, which needs the Spark session (on a cold
JVM, the session's start). A view built again with the same SQL, over tables and views of the same
schemas, compiles to the same columns: its check is kept next to its SQL (`<name>.view.check.json`),
with a fingerprint of everything the check depended on, and the next build of the view reuses it
without Spark. The fingerprint covers the SQL, the Spark settings and the versions of Spark and of this
adapter, and each relation the SQL reads, down to its tables: a table's id, schema and partition
columns and settings, a view's SQL. A view that reads anything else (a table outside the warehouse, a file path,
a table function, time travel) is checked every time."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional

from deltalog.errors import DeltaError
from deltalog.lazy_imports import load

_MAX_DEPTH = 50  # views over views, as the session views follow them


def fingerprint(warehouse: Any, sql: str, settings: Dict[str, Any]) -> Optional[str]:
    """What a check of `sql` (warehouse relations quoted as their session views) depends on, or None when
    it reads something this cannot follow."""
    inputs = _inputs(warehouse, sql, 0)
    if inputs is None:
        return None
    text = json.dumps({"sql": sql, "settings": settings, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def checked_columns(warehouse: Any, schema: str, name: str, sql: str, print_: Optional[str]) -> Optional[List[str]]:
    """The columns the last check of this view's `sql` found, when its SQL is saved unchanged and the
    check's fingerprint is `print_`; else None (Spark checks it)."""
    if print_ is None or warehouse.read_view_sql(schema, name) != sql:
        return None
    record = warehouse.read_view_check(schema, name)
    if record.get("fingerprint") != print_ or not isinstance(record.get("columns"), list):
        return None
    return [str(c) for c in record["columns"]]


def record(warehouse: Any, schema: str, name: str, print_: Optional[str], columns: List[str]) -> None:
    """Keep what Spark's check of the view's saved SQL found (None: forget any earlier check)."""
    warehouse.write_view_check(schema, name, None if print_ is None else
                               {"fingerprint": print_, "columns": list(columns)})


def columns_here(adapter: Any, sql: str) -> Optional[List[str]]:
    """The columns of a new or changed view, found without Spark when the model rules cover its SQL
    (`sql`, warehouse relations quoted): its names as Spark's analysis gives them, once DuckDB has bound
    it over its inputs' schemas (spark_analysis.py). None: Spark checks it."""
    from dbt.adapters.deltalog import driver_queries, spark_settings
    from dbt.adapters.deltalog.sql_gateway import read_statement, relations_of_sql

    creds = adapter.config.credentials
    if not creds.switched_on(spark_settings.ANALYSIS_HERE):
        return None
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    if spark_settings.settings_refusal(creds.spark_conf, RUNTIME.spark):
        return None
    statement = read_statement(None, adapter.warehouse, sql)
    try:
        return driver_queries.model_query(adapter.warehouse, statement.text, statement.relations,
                                          relations_of_sql).columns()
    except driver_queries.NotHere as why:
        from dbt.adapters.events.logging import AdapterLogger

        AdapterLogger("deltalog").debug(f"the view's SQL is checked by Spark: {why}")
        return None


def _inputs(warehouse: Any, sql: str, depth: int) -> Optional[List[Any]]:
    """What each relation `sql` reads looks like, or None when one is not a warehouse table or view."""
    names = _relations(sql)
    if names is None or depth > _MAX_DEPTH:
        return None
    found = []
    for schema, name in names:
        owner, schema, name = warehouse.resolve(schema, name)
        shape = _shape(owner, schema, name, depth)
        if shape is None:
            return None
        found.append([owner.root, schema, name, shape])
    return found


def _shape(warehouse: Any, schema: str, name: str, depth: int) -> Optional[List[Any]]:
    if warehouse.is_table(schema, name):
        from deltalog.snapshot_reuse import latest_snapshot

        try:
            metadata = latest_snapshot(warehouse.table(schema, name)).metadata
        except DeltaError:
            return None
        return ["table", metadata.id, metadata.schema_string, list(metadata.partition_columns),
                dict(metadata.configuration)]
    sql = warehouse.read_view_sql(schema, name)
    if sql is None:
        return None
    inputs = _inputs(warehouse, sql, depth + 1)
    return None if inputs is None else ["view", sql, inputs]


def _relations(sql: str) -> Optional[List[tuple]]:
    """The `schema.name` session views `sql` reads, or None when it reads anything else: a name that is
    not one (a catalog table, a path), a table function, time travel; or when it does not parse."""
    load("sqlglot")
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        trees = sqlglot.parse(sql, read="spark")
    except SqlglotError:
        return None
    if len(trees) != 1 or trees[0] is None:
        return None
    tree = trees[0]
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    found: List[tuple] = []
    for table in tree.find_all(exp.Table):
        ident = table.this
        if not isinstance(ident, exp.Identifier) or table.args.get("db") or table.args.get("catalog"):
            return None
        if table.args.get("version") or table.args.get("when"):
            return None  # time travel: the table's state now says nothing about that version
        if not ident.quoted:
            if ident.name.lower() in ctes:
                continue
            return None  # a relation of Spark's own catalog
        if "." not in ident.name:
            return None
        pair = tuple(ident.name.split(".", 1))
        if pair not in found:
            found.append(pair)
    return found
