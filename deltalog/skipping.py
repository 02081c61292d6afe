"""Data skipping: which files may hold rows matching a predicate, from partition values and from the
per-file min/max/nullCount statistics of the log.

Predicates are built in Python (`col("x") == 1`, `col("d").isin([...])`, `&`, `|`) or parsed from simple
SQL (`parse_sql_predicate`). Every answer errs on the side of keeping a file: a form this module does not
understand, a literal it cannot coerce, or a file without stats means "may match", never "skip".

`prune(files, expr, schema_json, partition_columns)` evaluates over `Snapshot.files` columnar (one JSON
parse of the stats column for all files); `expr.matches_partition(values)` answers for one file's
partition values (conflict detection in the transaction).

Over 800 lines, on purpose: this is the one predicate model of the engine (the expression classes, the
SQL reader that builds them with sqlglot, and their evaluation over partition values and statistics
columns). Each expression class holds its own three answers side by side, so that a new comparison
is added in one place; split by answer, every change would touch three modules.
"""
from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from . import log_json
from .sql_text import quote_identifier, sql_literal
from .lazy_imports import load
from .storage import arrow_owned_buffer
from .column_mapping import is_mapped, physical_names, physical_path

DEFAULT_STRING_PREFIX_LENGTH = 32
_NUMERIC = {"byte", "short", "integer", "long", "float", "double"}
_INTEGRAL = {"byte", "short", "integer", "long"}


# --------------------------------------------------------------------------------------------------
# Expressions


class Expr:
    """A predicate over one row. Subclasses say which files may hold a matching row."""

    def __and__(self, other: "Expr") -> "Expr":
        return And(self, other)

    def __or__(self, other: "Expr") -> "Expr":
        return Or(self, other)

    def columns(self) -> set[str]:
        return set()

    def matches_partition(self, partition_values: dict[str, str | None]) -> bool:
        """Whether a file with these partition values may hold matching rows. Leaves on columns not in
        `partition_values` are unknown (True). Partition value strings are read in the literal's type."""
        return True

    def to_sql(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class _Always(Expr):
    """Cannot prune: every file may match."""

    def to_sql(self) -> str:
        return "true"

    def __repr__(self) -> str:
        return "ALWAYS"


ALWAYS = _Always()


@dataclass(frozen=True)
class _Never(Expr):
    def matches_partition(self, partition_values):
        return False

    def to_sql(self) -> str:
        return "false"


NEVER = _Never()


@dataclass(frozen=True, eq=False)
class Column:
    name: str

    def _cmp(self, op: str, value: Any) -> "Compare":
        if isinstance(value, Column):
            raise TypeError("comparing two columns cannot prune files; compare a column with a literal")
        return Compare(self.name, op, value)

    def __eq__(self, value):  # type: ignore[override]
        return self._cmp("=", value)

    def __ne__(self, value):  # type: ignore[override]
        return self._cmp("!=", value)

    def __lt__(self, value):
        return self._cmp("<", value)

    def __le__(self, value):
        return self._cmp("<=", value)

    def __gt__(self, value):
        return self._cmp(">", value)

    def __ge__(self, value):
        return self._cmp(">=", value)

    def __hash__(self) -> int:
        return hash(self.name)

    def isin(self, values: Iterable[Any]) -> "In":
        return In(self.name, tuple(values))

    def is_null(self) -> "IsNull":
        return IsNull(self.name, False)

    def is_not_null(self) -> "IsNull":
        return IsNull(self.name, True)


def col(name: str) -> Column:
    return Column(name)




def _coerce_python(text: str, like: Any) -> Any:
    """A partition value string read in the type of the literal it is compared with."""
    if isinstance(like, bool):
        return text.lower() == "true"
    if isinstance(like, int):
        return int(text)
    if isinstance(like, float):
        return float(text)
    if isinstance(like, decimal.Decimal):
        return decimal.Decimal(text)
    if isinstance(like, dt.datetime):
        v = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if (v.tzinfo is None) != (like.tzinfo is None):
            v = v.replace(tzinfo=None) if like.tzinfo is None else v.replace(tzinfo=dt.timezone.utc)
        return v
    if isinstance(like, dt.date):
        return dt.date.fromisoformat(text[:10])
    return text


_PY_OPS = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _lookup(partition_values: dict[str, str | None], name: str) -> tuple[bool, str | None]:
    if name in partition_values:
        return True, partition_values[name]
    lower = name.lower()
    for k, v in partition_values.items():
        if k.lower() == lower:
            return True, v
    return False, None


@dataclass(frozen=True)
class Compare(Expr):
    column: str
    op: str  # = != < <= > >=
    value: Any

    def columns(self):
        return {self.column}

    def matches_partition(self, partition_values):
        found, text = _lookup(partition_values, self.column)
        if not found:
            return True
        if text is None or self.value is None:
            return False  # comparisons with NULL are never true
        try:
            return bool(_PY_OPS[self.op](_coerce_python(text, self.value), self.value))
        except (ValueError, TypeError, decimal.InvalidOperation):
            return True

    def to_sql(self):
        return f"{quote_identifier(self.column)} {self.op} {sql_literal(self.value)}"


@dataclass(frozen=True)
class In(Expr):
    column: str
    values: tuple
    negated: bool = False

    def columns(self):
        return {self.column}

    def matches_partition(self, partition_values):
        found, text = _lookup(partition_values, self.column)
        if not found:
            return True
        if text is None:
            return False
        values = [v for v in self.values if v is not None]
        if self.negated and len(values) != len(self.values):
            return False  # x NOT IN (..., NULL) is never true
        try:
            hit = any(_coerce_python(text, v) == v for v in values)
        except (ValueError, TypeError, decimal.InvalidOperation):
            return True
        return not hit if self.negated else hit

    def to_sql(self):
        inner = ", ".join(sql_literal(v) for v in self.values)
        return f"{quote_identifier(self.column)} {'NOT IN' if self.negated else 'IN'} ({inner})"


@dataclass(frozen=True)
class IsNull(Expr):
    column: str
    negated: bool = False  # IS NOT NULL

    def columns(self):
        return {self.column}

    def matches_partition(self, partition_values):
        found, text = _lookup(partition_values, self.column)
        if not found:
            return True
        return (text is not None) if self.negated else (text is None)

    def to_sql(self):
        return f"{quote_identifier(self.column)} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class And(Expr):
    left: Expr
    right: Expr

    def columns(self):
        return self.left.columns() | self.right.columns()

    def matches_partition(self, partition_values):
        return self.left.matches_partition(partition_values) and self.right.matches_partition(partition_values)

    def to_sql(self):
        return f"({self.left.to_sql()}) AND ({self.right.to_sql()})"


@dataclass(frozen=True)
class Or(Expr):
    left: Expr
    right: Expr

    def columns(self):
        return self.left.columns() | self.right.columns()

    def matches_partition(self, partition_values):
        return self.left.matches_partition(partition_values) or self.right.matches_partition(partition_values)

    def to_sql(self):
        return f"({self.left.to_sql()}) OR ({self.right.to_sql()})"


def conjunction(exprs: Sequence[Expr]) -> Expr:
    out: Expr = ALWAYS
    for e in exprs:
        out = e if out is ALWAYS else And(out, e)
    return out


# --------------------------------------------------------------------------------------------------
# SQL parsing: sqlglot's Spark dialect parses; the forms skipping can use become expressions, and
# anything else becomes ALWAYS in a place where that is safe (it keeps every file).


class _Unknown(Exception):
    """A SQL form that skipping cannot use."""


def parse_sql_predicate(text: str | None, strict: bool = False) -> Expr:
    """The simple SQL forms as an expression: comparisons of a column with a literal (=, ==, !=, <>,
    <, <=, >, >=), IN / NOT IN lists, BETWEEN, IS [NOT] NULL, AND, OR and parentheses, with string,
    number, boolean and DATE/TIMESTAMP literals. Anything else becomes ALWAYS (keep all files); with
    `strict` it is a ValueError naming the part (where the predicate must be exact: a replace-where)."""
    if text is None or not str(text).strip():
        return ALWAYS
    from . import sql

    try:
        tree = sql.parse(str(text))
    except ValueError:
        if strict:
            raise
        return ALWAYS
    return _simplify(_predicate(tree, strict))


_COMPARISONS = {"EQ": "=", "NEQ": "!=", "LT": "<", "LTE": "<=", "GT": ">", "GTE": ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _predicate(node: Any, strict: bool = False) -> Expr:
    """An expression for a boolean node; a part skipping cannot use is ALWAYS (strict: a ValueError).
    Only AND and OR combine parts, so an ALWAYS in place of a part never drops a file (NOT is taken
    only over known forms)."""
    load("sqlglot")
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _predicate(node.this, strict)
    if isinstance(node, exp.And):
        return And(_predicate(node.left, strict), _predicate(node.right, strict))
    if isinstance(node, exp.Or):
        return Or(_predicate(node.left, strict), _predicate(node.right, strict))
    try:
        return _atom(node)
    except _Unknown as unknown:
        if strict:
            raise ValueError(f"cannot read {node.sql(dialect='spark')!r} ({unknown})") from None
        return ALWAYS


def _atom(node: Any) -> Expr:
    load("sqlglot")
    from sqlglot import exp

    if isinstance(node, exp.Boolean):
        return ALWAYS if node.this else NEVER
    negated = isinstance(node, exp.Not)
    inner = node.this if negated else node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
        return IsNull(_column(inner.this), negated)
    if isinstance(inner, exp.In):
        if inner.args.get("query") is not None or inner.args.get("unnest") is not None:
            raise _Unknown("IN (subquery)")
        values = tuple(_literal(v) for v in inner.expressions)
        if not negated and all(v is None for v in values):
            return NEVER
        return In(_column(inner.this), values, negated)
    if negated:
        raise _Unknown("NOT of another form")  # its negation could be wrong: keep all files
    if isinstance(node, exp.Between):
        name, lo, hi = _column(node.this), _literal(node.args["low"]), _literal(node.args["high"])
        if lo is None or hi is None:
            return NEVER
        return And(Compare(name, ">=", lo), Compare(name, "<=", hi))
    op = _COMPARISONS.get(type(node).__name__)
    if op is None:
        raise _Unknown(type(node).__name__)
    left, right = node.this, node.expression
    if isinstance(left, exp.Column) and not isinstance(right, exp.Column):
        name, value = _column(left), _literal(right)
    elif isinstance(right, exp.Column) and not isinstance(left, exp.Column):
        name, value, op = _column(right), _literal(left), _FLIP[op]
    else:
        raise _Unknown("not a column compared with a literal")
    if value is None:
        return NEVER  # x = NULL is never true
    return Compare(name, op, value)


def _column(node: Any) -> str:
    """A column reference's name; dotted parts name a nested field (`a.b`)."""
    load("sqlglot")
    from sqlglot import exp

    if not isinstance(node, exp.Column):
        raise _Unknown("not a column")
    return ".".join(part.name for part in node.parts)


def _literal(node: Any) -> Any:
    """The Python value of a literal: string, number, boolean, NULL, DATE / TIMESTAMP '...', a typed
    number (10L)."""
    load("sqlglot")
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
            return -value
        raise _Unknown("negated non-number")
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        if re.fullmatch(r"\d+", text):
            return int(text)
        if "e" in text.lower():
            return float(text)
        return decimal.Decimal(text)
    if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.this, (exp.Literal, exp.Neg)):
        kind = node.to.this.name if node.to is not None else ""
        value = _literal(node.this)
        try:
            if kind == "DATE" and isinstance(value, str):
                return dt.date.fromisoformat(value.strip())
            if kind.startswith("TIMESTAMP") and isinstance(value, str):
                return dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            if kind in ("TINYINT", "SMALLINT", "INT", "BIGINT") and isinstance(value, int):
                return value
            if kind in ("DOUBLE", "FLOAT") and isinstance(value, (int, float, decimal.Decimal)):
                return float(value)
            if kind == "DECIMAL" and isinstance(value, (int, decimal.Decimal)):
                return decimal.Decimal(value)
        except ValueError:
            raise _Unknown("bad typed literal") from None
    raise _Unknown(type(node).__name__)


def _simplify(e: Expr) -> Expr:
    if isinstance(e, And):
        left, right = _simplify(e.left), _simplify(e.right)
        if left is NEVER or right is NEVER:
            return NEVER
        if left is ALWAYS:
            return right
        if right is ALWAYS:
            return left
        return And(left, right)
    if isinstance(e, Or):
        left, right = _simplify(e.left), _simplify(e.right)
        if left is ALWAYS or right is ALWAYS:
            return ALWAYS
        if left is NEVER:
            return right
        if right is NEVER:
            return left
        return Or(left, right)
    return e


def as_expr(predicate: "Expr | str | None") -> Expr:
    """An expression from an expression, a SQL string or None (no predicate: everything matches)."""
    if predicate is None:
        return ALWAYS
    if isinstance(predicate, Expr):
        return predicate
    return parse_sql_predicate(predicate)


# --------------------------------------------------------------------------------------------------
# Pruning over Snapshot.files


def _fields(schema_json: dict) -> list[dict]:
    return list((schema_json or {}).get("fields") or [])


def resolve_column(schema_json: dict, name: str) -> tuple[tuple[str, ...], Any] | None:
    """(path of field names as in the schema, Delta type) for a column name: exact or case-insensitive,
    top level first, then a dotted path into structs. None when the schema has no such column."""
    def find(fields, part):
        for f in fields:
            if f["name"] == part:
                return f
        low = part.lower()
        hits = [f for f in fields if f["name"].lower() == low]
        return hits[0] if len(hits) == 1 else None

    fields = _fields(schema_json)
    f = find(fields, name)
    if f is not None:
        return (f["name"],), f["type"]
    path: list[str] = []
    t: Any = {"type": "struct", "fields": fields}
    for part in name.split("."):
        if not isinstance(t, dict) or t.get("type") != "struct":
            return None
        f = find(t["fields"], part)
        if f is None:
            return None
        path.append(f["name"])
        t = f["type"]
    return tuple(path), t


def _base_type(delta_type: Any) -> str | None:
    if not isinstance(delta_type, str):
        return None
    if delta_type.startswith("decimal"):
        return "decimal"
    return delta_type


def _stats_json_type(base: str) -> pa.DataType | None:
    if base in _INTEGRAL:
        return pa.int64()
    if base in ("float", "double", "decimal"):
        return pa.float64()
    if base in ("string", "date", "timestamp", "timestamp_ntz"):
        return pa.string()
    return None  # boolean, binary, nested: no min/max in Delta stats


def _value_type(base: str) -> pa.DataType:
    return {
        "string": pa.string(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"), "boolean": pa.bool_(),
    }.get(base, pa.int64() if base in _INTEGRAL else pa.float64())


def _coerce_literal(value: Any, base: str) -> Any:
    """The literal in the column's comparison domain, or raise ValueError/TypeError (then: keep)."""
    if value is None:
        raise ValueError("null literal")
    if base in _INTEGRAL:
        if isinstance(value, bool):
            raise TypeError("boolean for an integer column")
        if isinstance(value, (float, decimal.Decimal)):
            raise TypeError("fractional literal for an integer column")  # Spark widens; keep all
        return int(value)
    if base in ("float", "double", "decimal"):
        if isinstance(value, bool):
            raise TypeError("boolean for a numeric column")
        f = float(value)
        if math.isnan(f):
            raise ValueError("NaN")
        return f
    if base == "string":
        if not isinstance(value, str):
            raise TypeError("non-string literal for a string column")
        return value
    if base == "date":
        if isinstance(value, dt.datetime):
            raise TypeError("timestamp literal for a date column")
        if isinstance(value, dt.date):
            return value
        return dt.date.fromisoformat(str(value).strip())
    if base in ("timestamp", "timestamp_ntz"):
        if isinstance(value, dt.datetime):
            v = value
        elif isinstance(value, dt.date):
            v = dt.datetime(value.year, value.month, value.day)
        else:
            v = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        if base == "timestamp":
            if v.tzinfo is None:
                v = v.replace(tzinfo=dt.timezone.utc)  # naive literals are read as UTC
            return v.astimezone(dt.timezone.utc)
        return v.replace(tzinfo=None) if v.tzinfo is None else v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if base == "boolean":
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise ValueError(value)
    raise TypeError(base)


def _parse_time_strings(arr: pa.Array, base: str) -> pa.Array:
    """Stats or partition value strings of date/timestamp columns to Arrow temporal values; unparsable
    entries become null (unknown)."""
    arr = arr.cast(pa.string())
    if base == "date":
        out = []
        for s in arr.to_pylist():
            try:
                out.append(None if s is None else dt.date.fromisoformat(s[:10]))
            except ValueError:
                out.append(None)
        return pa.array(out, pa.date32())
    tz = dt.timezone.utc if base == "timestamp" else None
    out = []
    for s in arr.to_pylist():
        if s is None:
            out.append(None)
            continue
        try:
            v = dt.datetime.fromisoformat(s.strip().replace("Z", "+00:00"))
        except ValueError:
            out.append(None)
            continue
        if base == "timestamp":
            v = v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v.astimezone(dt.timezone.utc)
        elif v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        out.append(v)
    return pa.array(out, pa.timestamp("us", tz="UTC" if tz else None))


@dataclass
class _ColumnStats:
    base: str
    min: pa.Array | None       # typed, null = unknown
    max: pa.Array | None       # typed upper bound, null = unknown
    max_truncated: pa.Array | None  # strings: max only bounds the prefix of its length
    null_count: pa.Array       # int64, null = unknown
    num_records: pa.Array      # int64, null = unknown


class _StatsTable:
    """The stats JSON column of all files, parsed once, for the columns a predicate mentions."""

    def __init__(self, stats: pa.Array, paths: dict[str, tuple[tuple[str, ...], str]],
                 prefix_length: int):
        self.n = len(stats)
        self.paths = paths
        self.prefix_length = prefix_length
        self.parsed = self._parse(stats)

    def _schema(self) -> pa.Schema:
        def nest(leaf_type_for) -> pa.DataType:
            tree: dict = {}
            for path, base in self.paths.values():
                t = leaf_type_for(base)
                if t is None:
                    continue
                node = tree
                for p in path[:-1]:
                    node = node.setdefault(p, {})
                    if not isinstance(node, dict):
                        break
                else:
                    node[path[-1]] = t

            def build(node: dict) -> pa.DataType:
                return pa.struct([pa.field(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])
            return build(tree)

        return pa.schema([
            pa.field("numRecords", pa.int64()),
            pa.field("minValues", nest(_stats_json_type)),
            pa.field("maxValues", nest(_stats_json_type)),
            pa.field("nullCount", nest(lambda b: pa.int64())),
        ])

    def _parse(self, stats: pa.Array) -> pa.Table:
        schema = self._schema()
        texts = ["{}" if s is None or not s.strip() else s for s in stats.to_pylist()]
        if not texts:
            return schema.empty_table()
        data = "\n".join(t.replace("\n", " ") for t in texts).encode("utf-8")
        try:
            table = pa_json.read_json(
                arrow_owned_buffer(data),
                read_options=pa_json.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
                parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
            if table.num_rows == self.n:
                return table.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        return self._parse_python(texts, schema)

    def _parse_python(self, texts: list[str], schema: pa.Schema) -> pa.Table:
        """Slow path for stats pyarrow cannot read with the expected types (e.g. "NaN" in a double
        column): anything not of the expected type becomes unknown."""
        def conform(v, t: pa.DataType):
            if v is None:
                return None
            if pa.types.is_struct(t):
                if not isinstance(v, dict):
                    return None
                return {f.name: conform(v.get(f.name), f.type) for f in t}
            if pa.types.is_integer(t):
                return v if isinstance(v, int) and not isinstance(v, bool) else None
            if pa.types.is_floating(t):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    return None
                return None if math.isnan(v) else float(v)
            if pa.types.is_string(t):
                return v if isinstance(v, str) else None
            return None

        rows = []
        for text in texts:
            try:
                obj = log_json.loads(text)
            except ValueError:
                obj = {}
            if not isinstance(obj, dict):
                obj = {}
            rows.append({f.name: conform(obj.get(f.name), f.type) for f in schema})
        return pa.Table.from_pylist(rows, schema=schema)

    def _leaf(self, top: str, path: tuple[str, ...]) -> pa.Array | None:
        arr = self.parsed.column(top).combine_chunks() if self.n else None
        if arr is None:
            return None
        for p in path:
            if not pa.types.is_struct(arr.type) or arr.type.get_field_index(p) < 0:
                return None
            arr = pc.struct_field(arr, p)
        return arr

    def column(self, name: str) -> _ColumnStats:
        path, base = self.paths[name]
        unknown_i = pa.nulls(self.n, pa.int64())
        num_records = self.parsed.column("numRecords").combine_chunks() if self.n else unknown_i
        null_count = self._leaf("nullCount", path)
        if null_count is None or not pa.types.is_integer(null_count.type):
            null_count = unknown_i
        mn = self._leaf("minValues", path) if _stats_json_type(base) is not None else None
        mx = self._leaf("maxValues", path) if _stats_json_type(base) is not None else None
        truncated = None
        if mn is not None and mx is not None:
            if base in ("date", "timestamp", "timestamp_ntz"):
                mn, mx = _parse_time_strings(mn, base), _parse_time_strings(mx, base)
                if base != "date":
                    # Stats keep milliseconds: the true max may be up to 999 microseconds above.
                    mx = pc.add(mx, pa.scalar(dt.timedelta(milliseconds=1)))
            elif base in ("float", "double", "decimal"):
                mn = pc.if_else(pc.is_nan(mn), None, mn)
                mx = pc.if_else(pc.is_nan(mx), None, mx)
            elif base == "string":
                truncated = pc.greater_equal(pc.utf8_length(mx), self.prefix_length)
        return _ColumnStats(base, mn, mx, truncated, null_count, num_records)


def _scalar(value: Any, t: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, type=t)


class _Evaluator:
    def __init__(self, files: pa.Table, schema_json: dict, partition_columns: Sequence[str],
                 configuration: dict[str, str] | None, expr: Expr):
        self.n = files.num_rows
        self.files = files
        self.schema_json = schema_json or {"fields": []}
        mapped = is_mapped(configuration)
        if mapped:
            names = physical_names(self.schema_json, configuration)
            partition_columns = [names.get(c, c) for c in partition_columns]
        self.partition_lower = {c.lower(): c for c in partition_columns}
        prefix = DEFAULT_STRING_PREFIX_LENGTH
        try:
            prefix = int((configuration or {}).get("delta.dataSkippingStringPrefixLength", prefix))
        except ValueError:
            pass
        # Be safe with writers that truncate at the default while the table says otherwise.
        self.prefix_length = max(1, min(prefix, DEFAULT_STRING_PREFIX_LENGTH))
        self.keep = pa.array([True] * self.n, pa.bool_())
        self.resolved: dict[str, tuple[str, tuple[str, ...], str] | None] = {}
        data_paths = {}
        for name in expr.columns():
            r = resolve_column(self.schema_json, name)
            if r is None:
                self.resolved[name] = None
                continue
            path, delta_type = r
            base = _base_type(delta_type)
            if base is None:
                self.resolved[name] = None
                continue
            if mapped:  # stats and partition values use physical names
                path = physical_path(self.schema_json, path)
            if len(path) == 1 and path[0].lower() in self.partition_lower:
                self.resolved[name] = ("partition", (self.partition_lower[path[0].lower()],), base)
            else:
                self.resolved[name] = ("data", path, base)
                data_paths[name] = (path, base)
        self.stats = None
        if data_paths and "stats" in files.column_names:
            self.stats = _StatsTable(files.column("stats").combine_chunks(), data_paths, self.prefix_length)
        self._partition_cache: dict[str, pa.Array] = {}

    # -- partition columns: exact
    def partition_values(self, name: str, base: str) -> pa.Array:
        if name in self._partition_cache:
            return self._partition_cache[name]
        if "partition_values" in self.files.column_names and self.n:
            pv = self.files.column("partition_values").combine_chunks()
            raw = pc.map_lookup(pv, name, "first")
        else:
            raw = pa.nulls(self.n, pa.string())
        raw = raw.cast(pa.string())
        if base in ("date", "timestamp", "timestamp_ntz"):
            typed = _parse_time_strings(raw, base)
        elif base == "string":
            typed = raw
        elif base == "boolean":
            typed = pc.equal(pc.utf8_lower(raw), "true")
        else:
            try:
                typed = raw.cast(_value_type(base))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                typed = None
        self._partition_cache[name] = typed
        return typed

    def eval(self, e: Expr) -> pa.Array:
        if e is ALWAYS or isinstance(e, _Always):
            return self.keep
        if isinstance(e, _Never):
            return pa.array([False] * self.n, pa.bool_())
        if isinstance(e, And):
            return pc.and_(self.eval(e.left), self.eval(e.right))
        if isinstance(e, Or):
            return pc.or_(self.eval(e.left), self.eval(e.right))
        if isinstance(e, (Compare, In, IsNull)):
            r = self.resolved.get(e.column)
            if r is None:
                return self.keep
            kind, path, base = r
            try:
                if kind == "partition":
                    mask = self.eval_partition(e, path[0], base)
                else:
                    mask = self.eval_stats(e, e.column, base)
            except (ValueError, TypeError, OverflowError, decimal.InvalidOperation,
                    pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return self.keep
            return pc.fill_null(mask, True) if mask is not None else self.keep
        return self.keep

    def eval_partition(self, e: Expr, name: str, base: str) -> pa.Array | None:
        values = self.partition_values(name, base)
        if values is None:
            return None
        if isinstance(e, IsNull):
            raw = pc.map_lookup(self.files.column("partition_values").combine_chunks(), name, "first") \
                if self.n else pa.nulls(0, pa.string())
            null = pc.is_null(raw)
            return pc.invert(null) if e.negated else null
        vt = values.type
        if isinstance(e, Compare):
            lit = _scalar(_coerce_literal(e.value, base), vt)
            fn = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
                  ">": pc.greater, ">=": pc.greater_equal}[e.op]
            # null partition values (or unparsable ones) compare to nothing
            return pc.fill_null(fn(values, lit), False) if not self._has_unparsed(values, name) \
                else pc.fill_null(fn(values, lit), True)
        if isinstance(e, In):
            lits = [v for v in e.values if v is not None]
            if e.negated and len(lits) != len(e.values):
                return pa.array([False] * self.n, pa.bool_())
            value_set = pa.array([_coerce_literal(v, base) for v in lits], vt)
            hit = pc.is_in(values, value_set=value_set)
            res = pc.invert(hit) if e.negated else hit
            return pc.if_else(pc.is_null(values), False, res)
        return None

    def _has_unparsed(self, typed: pa.Array, name: str) -> bool:
        raw = pc.map_lookup(self.files.column("partition_values").combine_chunks(), name, "first") \
            if self.n else pa.nulls(0, pa.string())
        return typed.null_count != raw.null_count

    def eval_stats(self, e: Expr, name: str, base: str) -> pa.Array | None:
        s = self.stats.column(name) if self.stats is not None else None
        if s is None:
            return None
        all_null = pc.equal(s.null_count, s.num_records)  # null when unknown
        if isinstance(e, IsNull):
            if e.negated:
                return pc.invert(all_null)
            return pc.greater(s.null_count, 0)
        if s.min is None or s.max is None:
            return None
        vt = _value_type(base)
        # a file whose column is entirely null matches no comparison
        not_all_null = pc.fill_null(pc.invert(all_null), True)
        if isinstance(e, Compare):
            lit = _coerce_literal(e.value, base)
            may = self._compare(s, e.op, lit, vt, base)
        elif isinstance(e, In):
            lits = sorted({_coerce_literal(v, base) for v in e.values if v is not None})
            if e.negated:
                if len(lits) != len(e.values):
                    return pa.array([False] * self.n, pa.bool_())
                # NOT IN prunes only a file holding one single value that is in the list
                may = self.keep
                for lit in lits[:100]:
                    may = pc.and_(may, self._compare(s, "!=", lit, vt, base))
            elif not lits:
                return pa.array([False] * self.n, pa.bool_())
            elif len(lits) <= 64:
                may = pa.array([False] * self.n, pa.bool_())
                for lit in lits:
                    may = pc.or_(may, pc.fill_null(self._compare(s, "=", lit, vt, base), True))
            else:  # a long list: the range it spans
                may = pc.and_(self._compare(s, ">=", lits[0], vt, base),
                              self._compare(s, "<=", lits[-1], vt, base))
        else:
            return None
        return pc.and_(pc.fill_null(may, True), not_all_null)

    def _upper_ge(self, s: _ColumnStats, lit: Any, strict: bool) -> pa.Array:
        """Whether the column's true max may be >= lit (> lit when strict)."""
        t = s.max.type
        fn = pc.greater if strict else pc.greater_equal
        plain = fn(s.max, _scalar(lit, t))
        if s.max_truncated is None:
            return plain
        # A truncated max m bounds only the values' first len(m) characters: true max may exceed
        # lit whenever lit's prefix of that length is <= m.
        lengths = pc.utf8_length(s.max)
        out = plain
        for length in set(x for x in pc.unique(pc.filter(lengths, s.max_truncated)).to_pylist() if x is not None):
            prefix_ok = pc.less_equal(_scalar(lit[:length], t), s.max)
            sel = pc.and_(s.max_truncated, pc.equal(lengths, length))
            out = pc.if_else(sel, prefix_ok, out)
        return out

    def _compare(self, s: _ColumnStats, op: str, lit: Any, vt: pa.DataType, base: str) -> pa.Array:
        lo = _scalar(lit, s.min.type) if s.min is not None else None
        # decimals compare as doubles: rounding is monotonic but may tie, so strict becomes non-strict
        loose = base == "decimal"
        if op == "=":
            return pc.and_(pc.less_equal(s.min, lo), self._upper_ge(s, lit, strict=False))
        if op == "<":
            return (pc.less_equal if loose else pc.less)(s.min, lo)
        if op == "<=":
            return pc.less_equal(s.min, lo)
        if op == ">":
            return self._upper_ge(s, lit, strict=not loose)
        if op == ">=":
            return self._upper_ge(s, lit, strict=False)
        if op == "!=":
            # no row differs from lit only when min == max == lit (and the max is exact)
            same = pc.and_(pc.equal(s.min, lo), pc.equal(s.max, _scalar(lit, s.max.type)))
            if s.max_truncated is not None:
                same = pc.and_(same, pc.invert(s.max_truncated))
            if base in ("timestamp", "timestamp_ntz", "decimal"):
                return self.keep  # ms-truncated / rounded bounds never prove equality
            return pc.invert(same)
        raise ValueError(op)


def prune(files: pa.Table, expr: "Expr | str | None", schema_json: dict,
          partition_columns: Sequence[str] = (), configuration: dict[str, str] | None = None) -> pa.BooleanArray:
    """One boolean per row of `files` (Snapshot.files): False only when the file surely holds no row
    matching `expr` (an expression or a SQL string)."""
    e = as_expr(expr)
    if e is ALWAYS or files.num_rows == 0:
        return pa.array([True] * files.num_rows, pa.bool_())
    ev = _Evaluator(files, schema_json, partition_columns, configuration, e)
    out = ev.eval(e)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    return pc.fill_null(out, True)


def prune_snapshot(snapshot: Any, expr: "Expr | str | None") -> pa.BooleanArray:
    """`prune` over a Snapshot's live files, with its schema, partition columns and properties."""
    return prune(snapshot.files, expr, snapshot.schema_json, snapshot.partition_columns,
                 snapshot.configuration)


def files_matching(snapshot: Any, expr: "Expr | str | None") -> pa.Table:
    """The live files that may hold rows matching `expr`."""
    return snapshot.files.filter(prune_snapshot(snapshot, expr))


def only_partition_columns(expr: "Expr | str | None", partition_columns: Sequence[str]) -> bool:
    """Whether every column the predicate mentions is a partition column (so whole files match or not)."""
    e = as_expr(expr)
    lower = {c.lower() for c in partition_columns}
    return all(c.lower() in lower for c in e.columns())


def inexact_on_partitions(expr: Expr, schema_json: dict, partition_columns: Sequence[str]) -> list[str]:
    """What keeps `expr` from deciding exactly which partitions match (empty when nothing does): a
    column that is not a partition column, or a literal that does not fit its column's type (pruning
    would keep such files, which a predicate that removes what it matches must not)."""
    lower = {c.lower() for c in partition_columns}
    problems: list[str] = []

    def walk(e: Expr) -> None:
        if isinstance(e, (And, Or)):
            walk(e.left)
            walk(e.right)
            return
        if not isinstance(e, (Compare, In, IsNull)):
            return
        resolved = resolve_column(schema_json, e.column)
        if e.column.lower() not in lower or resolved is None:
            problems.append(f"{e.column!r} is not a partition column")
            return
        base = _base_type(resolved[1])
        values = [e.value] if isinstance(e, Compare) else [v for v in e.values if v is not None] \
            if isinstance(e, In) else []
        for value in values:
            try:
                _coerce_literal(value, base)
            except (ValueError, TypeError, decimal.InvalidOperation, OverflowError):
                problems.append(f"{sql_literal(value)} does not fit {e.column!r} ({base})")

    walk(e=expr)
    return problems


@dataclass(frozen=True)
class PartitionPredicate:
    """A predicate bound to a table's partition column types, for the transaction's conflict checks:
    `matches_partition(values)` is exact on partition columns and True for anything else."""
    expr: Expr
    schema_json: dict
    partition_columns: tuple[str, ...]
    # The table's properties: with column mapping, partition values and stats use physical names.
    configuration: tuple[tuple[str, str], ...] = ()

    def matches_partition(self, partition_values: dict[str, str | None]) -> bool:
        return self.matches_file(partition_values, None)

    def matches_file(self, partition_values: dict[str, str | None], stats: str | None) -> bool:
        """Whether a file with these partition values and statistics (JSON; None: unknown) may hold
        a row matching the predicate: exact on partitions, by min/max/nullCount on the rest."""
        table = pa.table({
            "partition_values": pa.array([list(partition_values.items())], pa.map_(pa.string(), pa.string())),
            "stats": pa.array([stats], pa.string()),
        })
        return bool(prune(table, self.expr, self.schema_json, self.partition_columns,
                          dict(self.configuration))[0].as_py())

    def columns(self) -> set[str]:
        return self.expr.columns()

    def to_sql(self) -> str:
        return self.expr.to_sql()


def bind(expr: "Expr | str | None", schema_json: dict, partition_columns: Sequence[str],
         configuration: dict[str, str] | None = None) -> PartitionPredicate:
    return PartitionPredicate(as_expr(expr), schema_json, tuple(partition_columns),
                              tuple(sorted((configuration or {}).items())))


def bind_to(expr: "Expr | str | None", snapshot: Any) -> PartitionPredicate:
    """`expr` bound to a snapshot's schema, partition columns and properties."""
    return bind(expr, snapshot.schema_json, snapshot.partition_columns, snapshot.configuration)
