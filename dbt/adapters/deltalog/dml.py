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
    r"^\s*delete\s+from\s+" + _NAME + r"(?:\s+(?:as\s+)?(?P<alias>\w+))?(?:\s+where\s+(?P<where>.*))?$",
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


def _inserted_rows(df, cols_text: Optional[str], columns: List[str], types: Dict[str, str], view: str):
    """An INSERT's rows in the table's columns and types (columns it does not name are NULL)."""
    cols = [_unquote(c) for c in split_top_level(cols_text)] if cols_text else columns[: len(df.columns)]
    if len(cols) != len(df.columns):
        raise ValueError(f"INSERT into {view}: {len(df.columns)} values for {len(cols)} columns {cols}")
    df = df.toDF(*cols)
    exprs = []
    for name in columns:
        match = [c for c in cols if c.lower() == name.lower()]
        src = f"`{match[0]}`" if match else "null"
        exprs.append(f"cast({src} as {types[name.lower()]}) as `{name}`")
    return df.selectExpr(*exprs)


def _updated_columns(sets_text: str, where: str, columns: List[str], types: Dict[str, str], view: str) -> List[str]:
    """An UPDATE's select list: each assigned column takes its new value where `where` holds."""
    assignments = {}
    for item in split_top_level(sets_text):
        col, _, expr = item.partition("=")
        assignments[_unquote(col).lower()] = expr.strip()
    unknown = set(assignments) - set(types)
    if unknown:
        raise ValueError(f"UPDATE {view}: no column(s) {sorted(unknown)}; columns are {columns}")
    return [f"`{n}`" if n.lower() not in assignments else
            f"cast(case when ({where}) then ({assignments[n.lower()]}) else `{n}` end as {types[n.lower()]}) as `{n}`"
            for n in columns]


def match_dml(sql: str):
    """(pattern, match) when `sql` is INSERT / DELETE / UPDATE on a `schema.table`, else None."""
    head = sql.lstrip()[:7].lower()
    if not head.startswith(("insert", "update", "delete")):
        return None
    for pattern in (_INSERT, _DELETE, _UPDATE):
        m = pattern.match(sql)
        if m:
            return pattern, m
    return None


def try_execute_dml(spark, warehouse: Warehouse, sql: str, commit_info: Optional[Dict] = None):
    """Run `sql` as a Delta commit when it is DML on a warehouse table; returns the new version
    (or None when nothing changed), or the string "not-dml" when the statement is something else."""
    from deltalog.spark import operations

    found = match_dml(sql)
    if found is None or not warehouse.is_table(found[1].group("schema"), found[1].group("name")):
        return "not-dml"
    pattern, m = found
    uri = warehouse.table_path(m.group("schema"), m.group("name"))
    view = f"`{m.group('schema')}.{m.group('name')}`"
    target = spark.table(view)
    types = {f.name.lower(): f.dataType.simpleString() for f in target.schema.fields}

    if pattern is _DELETE:
        where = m.group("where") or "true"
        return operations.delete(spark, uri, where, extra_commit_info=commit_info)

    if pattern is _INSERT:
        df = _inserted_rows(spark.sql(m.group("query")), m.group("cols"), target.columns, types, view)
        mode = "overwrite" if m.group("mode").lower() == "overwrite" else "append"
        return operations.write_dataframe(
            df, uri, mode=mode, operation="WRITE", extra_commit_info=commit_info
        )

    # UPDATE: rewrite the table with the assignments applied where the predicate holds
    where = m.group("where") or "true"
    exprs = _updated_columns(m.group("sets"), where, target.columns, types, view)
    df = spark.sql(f"select {', '.join(exprs)} from {view}")
    return operations.write_dataframe(
        df, uri, mode="overwrite", operation="UPDATE",
        operation_parameters={"predicate": where}, extra_commit_info=commit_info,
    )


def statements(sql: str) -> List[str]:
    """The statements of a script, split on `;` outside quotes and parentheses."""
    return [s for s in split_top_level(sql, ";") if strip_comments(s)]


def strip_comments(sql: str) -> str:
    return re.sub(r"^(\s*(--[^\n]*\n?|/\*.*?\*/))*", "", sql, flags=re.DOTALL).strip()


class TargetRows:
    """What a script of INSERT / DELETE / UPDATE statements on one table makes of its rows, as one lazy
    DataFrame: `rows` (the table's current rows, changed statement by statement) and whether any
    statement did more than insert (`rewrites`). The caller commits the outcome at once: every
    statement lands in one commit, or none does."""

    def __init__(self, spark, table_view: str, target_df):
        self.spark = spark
        self.view = table_view
        self.columns = list(target_df.columns)
        self.types = {f.name.lower(): f.dataType.simpleString() for f in target_df.schema.fields}
        self.rows = target_df
        self.inserted = None  # rows of INSERT INTO statements before any other statement
        self.rewrites = False
        self._step = 0
        self._views: List[str] = []

    def _as_view(self, df) -> str:
        self._step += 1
        name = f"__deltalog_script_{id(self)}_{self._step}"
        df.createOrReplaceTempView(name)
        self._views.append(name)
        return f"`{name}`"

    def close(self) -> None:
        for name in self._views:
            self.spark.catalog.dropTempView(name)
        self._views.clear()

    def apply(self, pattern, m) -> None:
        # each statement sees the table as the statements before it left it, as SQL would
        current = self._as_view(self.rows)

        def text(group: str) -> Optional[str]:
            value = m.group(group)
            return value.replace(self.view, current) if value is not None else None

        if pattern is _INSERT:
            df = _inserted_rows(self.spark.sql(text("query")), m.group("cols"), self.columns, self.types, self.view)
            if m.group("mode").lower() == "overwrite":
                self.rows, self.rewrites = df, True
                return
            self.rows = self.rows.unionByName(df)
            if not self.rewrites:
                self.inserted = df if self.inserted is None else self.inserted.unionByName(df)
            return
        self.rewrites = True
        where = text("where") or "true"
        if pattern is _DELETE:
            alias = m.group("alias") or ""
            self.rows = self.spark.sql(f"select * from {current} {alias} where not coalesce(({where}), false)")
            return
        exprs = _updated_columns(text("sets"), where, self.columns, self.types, self.view)
        self.rows = self.spark.sql(f"select {', '.join(exprs)} from {current}")
