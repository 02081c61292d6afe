"""Generated columns (Delta's writer feature `generatedColumns`, legacy writer version 4).

A top-level field whose metadata holds `delta.generationExpression` (Spark SQL over the table's other
columns) is a generated column: a write that leaves it out computes it, a write that gives it must give,
on every row, the expression's value (NULL-safe equality, as Delta checks it). The Spark writer does
both (`spark/writer.py` `with_generated_columns`); this module reads and validates the declaration, and
derives partition filters: when a partition column is generated from another column by an expression
that keeps order (`cast(ts as date)`, `year(ts)`, `date_trunc('MONTH', ts)`, ...), a filter on the source
column narrows the partitions too (delta-spark's OptimizablePartitionExpression does the same).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .errors import InvalidTableError
from .lazy_imports import load

GENERATION_EXPRESSION_KEY = "delta.generationExpression"
FEATURE = "generatedColumns"


@dataclass(frozen=True)
class GeneratedColumn:
    name: str
    expression: str  # Spark SQL over the table's other columns
    type: Any        # the column's Delta type (JSON)

    def describe(self) -> str:
        return f"generated column {self.name} = {self.expression}"


def generated_columns(schema_json: dict[str, Any] | None) -> list[GeneratedColumn]:
    """The table's generated columns, in schema order (Delta allows them at the top level only)."""
    out = []
    for f in (schema_json or {}).get("fields") or []:
        expression = (f.get("metadata") or {}).get(GENERATION_EXPRESSION_KEY)
        if expression is not None:
            out.append(GeneratedColumn(f["name"], str(expression), f["type"]))
    return out


def has_generated_columns(schema_json: dict[str, Any] | None) -> bool:
    return bool(generated_columns(schema_json))


# Functions whose value is not a function of the row: Delta refuses them in a generation expression.
NONDETERMINISTIC_FUNCTIONS = frozenset({
    "rand", "random", "randn", "uuid", "shuffle", "monotonically_increasing_id", "spark_partition_id",
    "input_file_name", "input_file_block_start", "input_file_block_length", "current_timestamp", "now",
    "current_date", "curdate", "current_timezone", "localtimestamp", "current_user", "user", "session_user",
    "current_database", "current_schema", "current_catalog", "rand_str", "randstr", "uniform", "try_reflect",
    "reflect", "java_method",
})


def parse_expression(sql: str, what: str) -> Any:
    """The sqlglot tree of one Spark SQL expression; `what` names it in the error."""
    load("sqlglot")
    import sqlglot
    from sqlglot.errors import ParseError

    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except ParseError as e:
        raise InvalidTableError(f"{what}: {sql!r} is not a SQL expression: {str(e).splitlines()[0]}") from None
    if tree is None:
        raise InvalidTableError(f"{what}: the expression is empty.")
    return tree


def nondeterministic_parts(tree: Any) -> list[str]:
    """The parts of an expression whose value does not follow from the row: random or time functions,
    aggregates, window functions, subqueries (as SQL text, for the error)."""
    load("sqlglot")
    from sqlglot import exp

    kinds = (exp.Rand, exp.Randn, exp.Uuid, exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime,
             exp.CurrentUser, exp.AggFunc, exp.Window, exp.Subquery, exp.Select)
    found = []
    for node in tree.walk():
        if isinstance(node, kinds):
            found.append(node.sql(dialect="spark"))
        elif isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in NONDETERMINISTIC_FUNCTIONS:
                found.append(node.sql(dialect="spark"))
    return found


def referenced_columns(tree: Any) -> list[str]:
    """The top-level column names an expression reads (`a.b` reads column `a`), in order, once each."""
    load("sqlglot")
    from sqlglot import exp

    seen: dict[str, str] = {}
    for c in tree.find_all(exp.Column):
        parts = [p.name for p in c.parts]
        name = parts[0] if parts else c.name
        seen.setdefault(name.lower(), name)
    return list(seen.values())


def validate(schema_json: dict[str, Any], table: str, partition_columns: Sequence[str] = ()) -> None:
    """Refuse a generation expression that is not SQL, reads a column the table does not have, reads
    itself or another generated column, or is not deterministic; each error names the table, the column
    and the expression. (Its type is checked by Spark when a write evaluates it.)"""
    declared = generated_columns(schema_json)
    if not declared:
        return
    fields = {f["name"].lower(): f["name"] for f in schema_json.get("fields") or []}
    generated = {g.name.lower() for g in declared}
    nested = _nested_generation_expressions(schema_json)
    if nested:
        raise InvalidTableError(f"{table}: {GENERATION_EXPRESSION_KEY} on nested field(s) {', '.join(nested)}: "
                                f"Delta allows generated columns at the top level only.")
    for g in declared:
        what = f"{table}: {g.describe()}"
        if not g.expression.strip():
            raise InvalidTableError(f"{what}: the expression is empty.")
        tree = parse_expression(g.expression, what)
        for name in referenced_columns(tree):
            if name.lower() == g.name.lower():
                raise InvalidTableError(f"{what}: the expression reads the column itself. A generation "
                                        f"expression reads the table's other, not generated, columns.")
            if name.lower() in generated:
                raise InvalidTableError(f"{what}: the expression reads generated column {fields[name.lower()]}; "
                                        f"a generation expression reads only columns that are not generated.")
            if name.lower() not in fields:
                raise InvalidTableError(f"{what}: the expression reads column {name!r}, which the table does not "
                                        f"have. Columns: {', '.join(fields.values())}.")
        bad = nondeterministic_parts(tree)
        if bad:
            raise InvalidTableError(f"{what}: the expression is not deterministic ({', '.join(bad)}); a generated "
                                    f"column's value must follow from the row alone (no random, time, aggregate "
                                    f"or window functions, no subqueries).")


def _nested_generation_expressions(schema_json: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def walk(t: Any, path: str, top: bool) -> None:
        if not isinstance(t, dict):
            return
        if t.get("type") == "struct":
            for f in t.get("fields") or []:
                name = f"{path}.{f['name']}" if path else f["name"]
                if not top and GENERATION_EXPRESSION_KEY in (f.get("metadata") or {}):
                    out.append(name)
                walk(f["type"], name, False)
        elif t.get("type") == "array":
            walk(t.get("elementType"), path, False)
        elif t.get("type") == "map":
            walk(t.get("valueType"), path, False)

    walk(schema_json, "", True)
    return out


# ---------------------------------------------------------------------------------------------------
# partition filters from filters on a generated partition column's source column

@dataclass(frozen=True)
class PartitionExpression:
    """A partition column computed from one source column by `apply` (a Python value of the source's
    type -> the partition column's value). `monotonic`: the function keeps order, so ranges on the
    source become ranges on the partition column; otherwise only equality carries over."""
    partition_column: str
    source_column: str
    source_type: str
    apply: Callable[[Any], Any]
    monotonic: bool


# Spark's timestamps are cut into dates in the session time zone, which the log does not record: a
# bound on a (zoned) timestamp is widened by the largest UTC offset before it is cut, so no zone loses
# a partition it needs.
_ZONE_SLACK = dt.timedelta(hours=14)
_TRUNC_UNITS = {"year": "year", "yyyy": "year", "yy": "year", "quarter": "quarter", "month": "month",
                "mon": "month", "mm": "month", "week": "week", "day": "day", "dd": "day", "hour": "hour"}


def _as_date(v: Any) -> dt.date:
    return v.date() if isinstance(v, dt.datetime) else v


def _truncate(unit: str, v: Any) -> Any:
    """date_trunc / trunc on a Python date or datetime (naive or UTC), as Spark rounds down."""
    d = v if isinstance(v, dt.datetime) else dt.datetime(v.year, v.month, v.day)
    if unit == "year":
        d = d.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    elif unit == "quarter":
        d = d.replace(month=(d.month - 1) // 3 * 3 + 1, day=1, hour=0, minute=0, second=0, microsecond=0)
    elif unit == "month":
        d = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    elif unit == "week":
        d = (d - dt.timedelta(days=d.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
    elif unit == "day":
        d = d.replace(hour=0, minute=0, second=0, microsecond=0)
    elif unit == "hour":
        d = d.replace(minute=0, second=0, microsecond=0)
    return d


def partition_expressions(schema_json: dict[str, Any], partition_columns: Sequence[str]) -> list[PartitionExpression]:
    """The generated partition columns whose expression this engine can invert into partition filters:
    identity, `cast(x as date)` / `to_date(x)`, `year(x)`, `month(x)`, `day(x)`, `hour(x)`,
    `date_trunc(unit, x)`, `trunc(x, unit)`, `date_format(x, 'yyyy-MM[-dd]')` of a date or timestamp
    column (the forms delta-spark optimizes, but for substring)."""
    load("sqlglot")
    from sqlglot import exp

    types = {f["name"].lower(): f["type"] for f in schema_json.get("fields") or []}
    parts = {c.lower() for c in partition_columns}
    out = []
    for g in generated_columns(schema_json):
        if g.name.lower() not in parts:
            continue
        try:
            tree = parse_expression(g.expression, g.name)
        except InvalidTableError:
            continue
        found = _inverse(tree, exp)
        if found is None:
            continue
        source, apply, monotonic = found
        source_type = types.get(source.lower())
        if not isinstance(source_type, str):
            continue
        base = source_type.split("(")[0]
        if apply is not None and base not in ("date", "timestamp", "timestamp_ntz"):
            continue
        out.append(PartitionExpression(g.name, source, base, apply or (lambda v: v), monotonic))
    return out


def _inverse(tree: Any, exp: Any) -> tuple[str, Callable[[Any], Any] | None, bool] | None:
    """(source column, function on its value, keeps order) for the expression forms understood."""
    def column(node: Any) -> str | None:
        # sqlglot reads year(x), month(x), ... as year(to_date(x)): the same value for dates and timestamps
        if isinstance(node, (exp.TsOrDsToDate, exp.TimeStrToTime)) and not node.args.get("format"):
            node = node.this
        return node.name if isinstance(node, exp.Column) and len(node.parts) == 1 else None

    def unit_of(node: Any) -> str | None:
        text = node.name if isinstance(node, (exp.Literal, exp.Var)) else None
        return _TRUNC_UNITS.get((text or "").lower())

    if isinstance(tree, exp.Column) and column(tree):
        return column(tree), None, True
    if isinstance(tree, (exp.Cast, exp.TryCast)) and tree.to.is_type("date") and column(tree.this):
        return column(tree.this), _as_date, True
    if isinstance(tree, exp.TsOrDsToDate) and column(tree.this) and not tree.args.get("format"):
        return column(tree.this), _as_date, True
    if isinstance(tree, exp.Year) and column(tree.this):
        return column(tree.this), lambda v: v.year, True
    if isinstance(tree, exp.Month) and column(tree.this):
        return column(tree.this), lambda v: v.month, False
    if isinstance(tree, exp.Day) and column(tree.this):
        return column(tree.this), lambda v: v.day, False
    if isinstance(tree, exp.TimestampTrunc) and column(tree.this) and unit_of(tree.args.get("unit")):
        unit = unit_of(tree.args["unit"])
        return column(tree.this), lambda v, u=unit: _truncate(u, v), True
    if isinstance(tree, exp.DateTrunc) and column(tree.this) and unit_of(tree.args.get("unit")):
        unit = unit_of(tree.args["unit"])
        if unit in ("hour",):
            return None
        return column(tree.this), lambda v, u=unit: _truncate(u, v).date(), True
    if isinstance(tree, exp.TimeToStr) and column(tree.this):
        fmt = tree.args.get("format")
        # (sqlglot writes Spark's pattern in strftime's, with a marker of its own)
        text = fmt.name.removesuffix("strict") if isinstance(fmt, exp.Literal) else None
        python = {"%Y-%m": "%Y-%m", "yyyy-MM": "%Y-%m",
                  "%Y-%m-%d": "%Y-%m-%d", "yyyy-MM-dd": "%Y-%m-%d"}.get(text or "")
        if python:
            return column(tree.this), lambda v, f=python: v.strftime(f), True
    return None


def derived_partition_filter(expr: Any, schema_json: dict[str, Any], partition_columns: Sequence[str]) -> Any:
    """A predicate on generated partition columns implied by `expr` (an `expressions` predicate) through
    their source columns, or ALWAYS when none: `event_ts >= '2024-01-02 10:00'` with `event_date =
    cast(event_ts as date)` gives `event_date >= date'2024-01-02'` (one day earlier for a zoned
    timestamp, whose date depends on the writer's time zone). Only ever keeps more files, never fewer."""
    from .expressions.literals import coerce_literal
    from .expressions.model import ALWAYS, And, Compare, IsNull, Or, conjunction

    found = partition_expressions(schema_json, partition_columns)
    if not found:
        return ALWAYS
    by_source: dict[str, list[PartitionExpression]] = {}
    for p in found:
        by_source.setdefault(p.source_column.lower(), []).append(p)

    def bounds(p: PartitionExpression, value: Any) -> tuple[Any, Any]:
        if p.source_type == "timestamp" and isinstance(value, dt.datetime):
            low, high = p.apply(value - _ZONE_SLACK), p.apply(value + _ZONE_SLACK)
            if isinstance(low, dt.datetime):
                # an instant cut in the writer's zone (date_trunc('DAY', ts): its local midnight) lies
                # up to a zone's offset from the instant cut in UTC
                low, high = low - _ZONE_SLACK, high + _ZONE_SLACK
            return low, high
        v = p.apply(value)
        return v, v

    def leaf(e: Any) -> Any:
        if isinstance(e, IsNull) and not getattr(e, "negated", False):
            ps = by_source.get(e.column.lower(), [])
            return conjunction([IsNull(p.partition_column) for p in ps]) if ps else ALWAYS
        if not isinstance(e, Compare) or e.op not in ("=", "<", "<=", ">", ">="):
            return ALWAYS
        terms = []
        for p in by_source.get(e.column.lower(), []):
            try:
                value = coerce_literal(e.value, p.source_type)
                low, high = bounds(p, value)
            except (TypeError, ValueError, OverflowError):
                continue
            if value is None:
                continue
            if p.monotonic and e.op in ("<", "<="):
                terms.append(Compare(p.partition_column, "<=", high))
            elif p.monotonic and e.op in (">", ">="):
                terms.append(Compare(p.partition_column, ">=", low))
            elif e.op == "=":
                if low == high:
                    terms.append(Compare(p.partition_column, "=", low))
                elif p.monotonic:
                    terms.append(And(Compare(p.partition_column, ">=", low), Compare(p.partition_column, "<=", high)))
        return conjunction(terms) if terms else ALWAYS

    def walk(e: Any) -> Any:
        if isinstance(e, And):
            left, right = walk(e.left), walk(e.right)
            return right if left is ALWAYS else left if right is ALWAYS else And(left, right)
        if isinstance(e, Or):
            left, right = walk(e.left), walk(e.right)
            return ALWAYS if left is ALWAYS or right is ALWAYS else Or(left, right)
        return leaf(e)

    return walk(expr)


def substituted(expression: str, values: dict[str, str]) -> str:
    """The generation `expression` with each column it reads replaced by that column's value as SQL
    (`values`: lower-case column name -> SQL, e.g. a MERGE clause's assignments): the generated
    column's value for a row built from those values."""
    load("sqlglot")
    from sqlglot import exp

    tree = parse_expression(expression, "generation expression")

    def replace(node: Any) -> Any:
        if not isinstance(node, exp.Column):
            return node
        parts = [p.name for p in node.parts]
        value = values.get(parts[0].lower()) if parts else None
        if value is None:
            return node
        out: Any = exp.Paren(this=parse_expression(value, "value"))
        for field in parts[1:]:  # struct fields of the column
            out = exp.Dot(this=out, expression=exp.to_identifier(field))
        return out

    return tree.transform(replace).sql(dialect="spark")
