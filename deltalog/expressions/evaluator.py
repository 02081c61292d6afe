"""Which files may hold rows matching a predicate, from their partition values and statistics:
one evaluator over `Snapshot.files` (columnar, one JSON parse of the stats column for all files) gives
a keep mask; `prune`, `files_matching` and the partition predicates the writers bind are built on it.
Every answer errs on the side of keeping a file: a form not understood, a literal that cannot be
coerced, or a file without stats means "may match", never "skip"."""
from __future__ import annotations

import decimal
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..column_mapping import is_mapped, physical_names, physical_path
from ..generated_columns import derived_partition_filter, has_generated_columns
from ..sql_text import sql_literal
from .literals import arrow_value_type, base_type, coerce_literal, parse_time_strings
from .model import ALWAYS, Always, And, Compare, Expr, In, IsNull, Never, Or
from .parser import as_expr
from .stats_table import ColumnStats, StatsTable

DEFAULT_STRING_PREFIX_LENGTH = 32


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
            base = base_type(delta_type)
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
            self.stats = StatsTable(files.column("stats").combine_chunks(), data_paths, self.prefix_length)
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
            typed = parse_time_strings(raw, base)
        elif base == "string":
            typed = raw
        elif base == "boolean":
            typed = pc.equal(pc.utf8_lower(raw), "true")
        else:
            try:
                typed = raw.cast(arrow_value_type(base))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                typed = None
        self._partition_cache[name] = typed
        return typed

    def eval(self, e: Expr) -> pa.Array:
        if e is ALWAYS or isinstance(e, Always):
            return self.keep
        if isinstance(e, Never):
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
            lit = _scalar(coerce_literal(e.value, base), vt)
            fn = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
                  ">": pc.greater, ">=": pc.greater_equal}[e.op]
            # null partition values (or unparsable ones) compare to nothing
            return pc.fill_null(fn(values, lit), False) if not self._has_unparsed(values, name) \
                else pc.fill_null(fn(values, lit), True)
        if isinstance(e, In):
            lits = [v for v in e.values if v is not None]
            if e.negated and len(lits) != len(e.values):
                return pa.array([False] * self.n, pa.bool_())
            value_set = pa.array([coerce_literal(v, base) for v in lits], vt)
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
        vt = arrow_value_type(base)
        # a file whose column is entirely null matches no comparison
        not_all_null = pc.fill_null(pc.invert(all_null), True)
        if isinstance(e, Compare):
            lit = coerce_literal(e.value, base)
            may = self._compare(s, e.op, lit, vt, base)
        elif isinstance(e, In):
            lits = sorted({coerce_literal(v, base) for v in e.values if v is not None})
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

    def _upper_ge(self, s: ColumnStats, lit: Any, strict: bool) -> pa.Array:
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

    def _compare(self, s: ColumnStats, op: str, lit: Any, vt: pa.DataType, base: str) -> pa.Array:
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
    if partition_columns and has_generated_columns(schema_json):
        # a filter on the source of a generated partition column narrows its partitions too
        derived = derived_partition_filter(e, schema_json, partition_columns)
        if derived is not ALWAYS:
            e = And(e, derived)
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
        base = base_type(resolved[1])
        values = [e.value] if isinstance(e, Compare) else [v for v in e.values if v is not None] \
            if isinstance(e, In) else []
        for value in values:
            try:
                coerce_literal(value, base)
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
