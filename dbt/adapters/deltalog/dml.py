"""INSERT / UPDATE / DELETE statements on warehouse tables, for hooks, `dbt run-operation` and tests.

Spark cannot run DML on a temporary view, so these statements are recognised here and turned
into one Delta commit each through the engine's Spark operations."""

from __future__ import annotations

import re
from typing import Dict, List, Optional

from dbt.adapters.deltalog.catalog import Warehouse

_NAME = r"`(?P<schema>[^`.\s]+)\.(?P<name>[^`\s]+)`"
_INSERT = re.compile(
    r"^\s*insert\s+(?P<mode>into|overwrite)\s+(?:table\s+)?" + _NAME
    + r"\s*(?:\((?P<cols>[^()]*)\)\s*)?(?P<query>(?:select|values|with|\().*)$",
    re.IGNORECASE | re.DOTALL,
)
_DELETE = re.compile(
    r"^\s*delete\s+from\s+" + _NAME + r"(?:\s+(?:as\s+)?\w+)?(?:\s+where\s+(?P<where>.*))?$",
    re.IGNORECASE | re.DOTALL,
)
_UPDATE = re.compile(
    r"^\s*update\s+" + _NAME + r"\s+set\s+(?P<sets>.*?)(?:\s+where\s+(?P<where>.*))?$",
    re.IGNORECASE | re.DOTALL,
)


def split_top_level(text: str, sep: str = ",") -> List[str]:
    """Split on `sep` outside parentheses and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _unquote(col: str) -> str:
    col = col.strip()
    return col[1:-1] if col.startswith("`") and col.endswith("`") else col


def try_execute_dml(spark, warehouse: Warehouse, sql: str, commit_info: Optional[Dict] = None):
    """Run `sql` as a Delta commit when it is DML on a warehouse table; returns the new version
    (or None when nothing changed), or the string "not-dml" when the statement is something else."""
    head = sql.lstrip()[:7].lower()
    if not head.startswith(("insert", "update", "delete")):
        return "not-dml"
    from deltalog.spark import operations

    for pattern in (_INSERT, _DELETE, _UPDATE):
        m = pattern.match(sql)
        if m and warehouse.is_table(m.group("schema"), m.group("name")):
            break
    else:
        return "not-dml"
    uri = warehouse.table_path(m.group("schema"), m.group("name"))
    view = f"`{m.group('schema')}.{m.group('name')}`"
    target = spark.table(view)
    types = {f.name.lower(): f.dataType.simpleString() for f in target.schema.fields}

    if pattern is _DELETE:
        where = m.group("where") or "true"
        return operations.delete(spark, uri, where, extra_commit_info=commit_info)

    if pattern is _INSERT:
        df = spark.sql(m.group("query"))
        cols = [_unquote(c) for c in split_top_level(m.group("cols"))] if m.group("cols") else None
        cols = cols or target.columns[: len(df.columns)]
        if len(cols) != len(df.columns):
            raise ValueError(
                f"INSERT into {view}: {len(df.columns)} values for {len(cols)} columns {cols}"
            )
        df = df.toDF(*cols)
        exprs = []
        for name in target.columns:
            match = [c for c in cols if c.lower() == name.lower()]
            src = f"`{match[0]}`" if match else "null"
            exprs.append(f"cast({src} as {types[name.lower()]}) as `{name}`")
        df = df.selectExpr(*exprs)
        mode = "overwrite" if m.group("mode").lower() == "overwrite" else "append"
        return operations.write_dataframe(
            df, uri, mode=mode, operation="WRITE", extra_commit_info=commit_info
        )

    # UPDATE: rewrite the table with the assignments applied where the predicate holds
    assignments = {}
    for item in split_top_level(m.group("sets")):
        col, _, expr = item.partition("=")
        assignments[_unquote(col).lower()] = expr.strip()
    unknown = set(assignments) - set(types)
    if unknown:
        raise ValueError(f"UPDATE {view}: no column(s) {sorted(unknown)}; columns are {target.columns}")
    where = m.group("where") or "true"
    exprs = []
    for name in target.columns:
        expr = assignments.get(name.lower())
        if expr is None:
            exprs.append(f"`{name}`")
        else:
            exprs.append(
                f"cast(case when ({where}) then ({expr}) else `{name}` end as {types[name.lower()]}) as `{name}`"
            )
    df = spark.sql(f"select {', '.join(exprs)} from {view}")
    return operations.write_dataframe(
        df, uri, mode="overwrite", operation="UPDATE",
        operation_parameters={"predicate": where}, extra_commit_info=commit_info,
    )
