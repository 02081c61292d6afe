"""Per-file statistics: the `add.stats` JSON (numRecords, minValues, maxValues, nullCount).

Which columns: the first `delta.dataSkippingNumIndexedCols` (default 32, -1 = all) leaf columns of the
data schema (partition columns excluded, struct fields counted as their leaves, arrays and maps as one
leaf), or exactly the columns listed in `delta.dataSkippingStatsColumns`.

min/max are kept for numbers, decimals, dates, timestamps and strings; every indexed leaf gets a nullCount.
Bounds are always safe for data skipping: timestamps are cut to milliseconds with the max rounded up,
strings keep a prefix (max plus a tie-breaking character), and a float column holding NaN or an
infinity gets no min/max at all (JSON cannot hold them, and Spark orders NaN above every number).

`StatsCollector` accumulates batch by batch, so a writer can compute stats while it streams.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import log_json
from .errors import InvalidTableError
from .schema import is_decimal, leaf_columns, normalize_type_name, without_columns

DEFAULT_NUM_INDEXED_COLS = 32
DEFAULT_STRING_PREFIX_LENGTH = 32
STATS_COLUMNS_KEY = "delta.dataSkippingStatsColumns"
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)

_INT_TYPES = frozenset({"long", "integer", "short", "byte"})
_FLOAT_TYPES = frozenset({"float", "double"})
_UNIT_TO_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


def parse_stats_columns(text: str) -> list[tuple[str, ...]]:
    """"a, b.c, `x.y`.z" -> [('a',), ('b','c'), ('x.y','z')]."""
    out: list[tuple[str, ...]] = []
    for item in _split_outside_backquotes(text, ","):
        item = item.strip()
        if item:
            out.append(tuple(p.strip().strip("`").replace("``", "`") for p in _split_outside_backquotes(item, ".")))
    return out


def _split_outside_backquotes(text: str, sep: str) -> list[str]:
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == "`":
            quoted = not quoted
        if ch == sep and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def indexed_columns(schema_json: dict[str, Any], partition_columns: Sequence[str] = (),
                    configuration: dict[str, str] | None = None) -> list[tuple[tuple[str, ...], Any]]:
    """The (path, delta type) of the leaf columns that get statistics, in schema order."""
    configuration = configuration or {}
    leaves = list(leaf_columns(without_columns(schema_json, list(partition_columns))))
    listed = configuration.get(STATS_COLUMNS_KEY)
    if listed:
        wanted = [tuple(p.lower() for p in path) for path in parse_stats_columns(listed)]

        def selected(path: tuple[str, ...]) -> bool:
            low = tuple(p.lower() for p in path)
            return any(low[:len(w)] == w for w in wanted)
        leaves = [(p, t) for p, t in leaves if selected(p)]
        n = -1
    else:
        raw = configuration.get("delta.dataSkippingNumIndexedCols", str(DEFAULT_NUM_INDEXED_COLS))
        try:
            n = int(raw)
        except ValueError:
            raise InvalidTableError(
                f"delta.dataSkippingNumIndexedCols is '{raw}'; it must be an integer (-1 for all columns).") from None
        if n < -1:
            raise InvalidTableError(
                f"delta.dataSkippingNumIndexedCols is {n}; it must be -1 (all columns) or at least 0.")
    leaves = leaves if n == -1 else leaves[:n]
    # A variant is two binaries whose nulls do not tell whether the variant is null: no stats at all.
    return [(p, t) for p, t in leaves if t != "variant"]


def _string_prefix_length(configuration: dict[str, str] | None) -> int:
    raw = (configuration or {}).get("delta.dataSkippingStringPrefixLength", str(DEFAULT_STRING_PREFIX_LENGTH))
    try:
        return max(int(raw), 0)
    except ValueError:
        raise InvalidTableError(
            f"delta.dataSkippingStringPrefixLength is '{raw}'; it must be a non-negative integer.") from None


class _Leaf:
    __slots__ = ("path", "kind", "nested", "min", "max", "null_count", "bounds_ok", "null_count_ok")

    def __init__(self, path: tuple[str, ...], delta_type: Any):
        self.path = path
        if isinstance(delta_type, str):
            t = normalize_type_name(delta_type)
            if t in _INT_TYPES:
                self.kind = "int"
            elif t in _FLOAT_TYPES:
                self.kind = "float"
            elif is_decimal(t):
                self.kind = "decimal"
            elif t in ("date", "timestamp", "timestamp_ntz", "string"):
                self.kind = t
            else:
                self.kind = None  # boolean, binary: nullCount only
        else:
            self.kind = None  # array, map: nullCount only
        self.min: Any = None
        self.max: Any = None
        self.nested = not isinstance(delta_type, str)
        self.null_count = 0
        self.bounds_ok = self.kind is not None
        self.null_count_ok = True


class StatsCollector:
    """Accumulates the statistics of one data file over the record batches written to it."""

    def __init__(self, schema_json: dict[str, Any], partition_columns: Sequence[str] = (),
                 configuration: dict[str, str] | None = None):
        self.prefix_length = _string_prefix_length(configuration)
        self.leaves = [_Leaf(p, t) for p, t in indexed_columns(schema_json, partition_columns, configuration)]
        self.num_records = 0

    # -- accumulation -------------------------------------------------------------------------------

    def update(self, data: pa.RecordBatch | pa.Table) -> None:
        if isinstance(data, pa.Table):
            for batch in data.to_batches():
                self.update(batch)
            return
        n = data.num_rows
        if n == 0:
            return
        self.num_records += n
        for leaf in self.leaves:
            arr = _leaf_array(data, leaf.path)
            if arr is None:  # column absent from the data: all null
                leaf.null_count += n
                continue
            leaf.null_count += arr.null_count
            if leaf.bounds_ok and arr.null_count < n:
                self._update_bounds(leaf, arr)

    def _update_bounds(self, leaf: _Leaf, arr: pa.Array) -> None:
        kind = leaf.kind
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if kind == "float":
            if pc.any(pc.or_(pc.is_nan(arr), pc.is_inf(arr))).as_py():
                leaf.bounds_ok = False
                return
        elif kind in ("timestamp", "timestamp_ntz"):
            if not pa.types.is_timestamp(arr.type):
                leaf.bounds_ok = False
                return
            unit = arr.type.unit
            mm = pc.min_max(arr.cast(pa.int64()))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if unit == "ns":  # to micros: min rounded down, max up
                lo, hi = lo // 1000, -((-hi) // 1000)
            else:
                lo, hi = lo * _UNIT_TO_MICROS[unit], hi * _UNIT_TO_MICROS[unit]
            self._merge(leaf, lo, hi)
            return
        elif kind == "date":
            if pa.types.is_date64(arr.type):
                arr = arr.cast(pa.date32())
            arr = arr.cast(pa.int32())
        mm = pc.min_max(arr)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None:
            return
        if kind == "string":
            if isinstance(lo, bytes):
                lo, hi = lo.decode("utf-8", "replace"), hi.decode("utf-8", "replace")
            # Prefixes keep the order (a <= b => prefix(a) <= prefix(b)); the max keeps what picks its tie-breaker.
            lo = lo[:self.prefix_length]
            hi = max_prefix(hi, self.prefix_length)
        self._merge(leaf, lo, hi)

    @staticmethod
    def _merge(leaf: _Leaf, lo: Any, hi: Any) -> None:
        if leaf.min is None or lo < leaf.min:
            leaf.min = lo
        if leaf.max is None or hi > leaf.max:
            leaf.max = hi

    def update_from_parquet_metadata(self, metadata: "pq.FileMetaData") -> None:
        """Accumulate from a Parquet footer's row-group statistics instead of the data itself.

        Columns whose statistics are missing (e.g. parquet-mr drops them for values over 4 KiB) get no
        bounds and no nullCount; arrays and maps get no nullCount (Parquet counts their elements).
        """
        n = metadata.num_rows
        self.num_records += n
        # parquet-mr (Spark) orders NaN above all numbers in its statistics; other writers (Arrow) skip
        # NaN, so their float bounds could exclude a NaN row that Spark's comparisons would match.
        trust_float_bounds = "parquet-mr" in (metadata.created_by or "")
        by_path: dict[str, int] = {}
        for i in range(metadata.num_columns):
            by_path[metadata.schema.column(i).path.lower()] = i
        for leaf in self.leaves:
            if leaf.nested:
                leaf.null_count_ok = False
                leaf.bounds_ok = False
                continue
            col = by_path.get(".".join(leaf.path).lower())
            if col is None:  # column absent from the file: all null
                leaf.null_count += n
                continue
            for g in range(metadata.num_row_groups):
                chunk = metadata.row_group(g).column(col)
                rows = metadata.row_group(g).num_rows
                st = chunk.statistics
                if st is None or not st.has_null_count:
                    leaf.null_count_ok = False
                    leaf.bounds_ok = False
                    continue
                leaf.null_count += st.null_count
                if not leaf.bounds_ok or st.null_count >= rows:
                    continue
                if not st.has_min_max or (leaf.kind == "float" and not trust_float_bounds):
                    leaf.bounds_ok = False
                    continue
                self._merge_footer_bounds(leaf, st.min, st.max)

    def _merge_footer_bounds(self, leaf: _Leaf, lo: Any, hi: Any) -> None:
        kind = leaf.kind
        if kind == "float":
            if not (math.isfinite(lo) and math.isfinite(hi)):
                leaf.bounds_ok = False  # parquet-mr orders NaN last, so a NaN shows up as the max
                return
        elif kind in ("timestamp", "timestamp_ntz"):
            if not isinstance(lo, dt.datetime):
                leaf.bounds_ok = False  # INT96 or raw ints: no trustworthy bounds
                return
            lo, hi = _datetime_micros(lo), _datetime_micros(hi)
        elif kind == "date":
            if not isinstance(lo, dt.date):
                leaf.bounds_ok = False
                return
            lo, hi = (lo - _EPOCH_DATE).days, (hi - _EPOCH_DATE).days
        elif kind == "string":
            if isinstance(lo, bytes):
                lo, hi = lo.decode("utf-8", "replace"), hi.decode("utf-8", "replace")
            lo, hi = lo[:self.prefix_length], max_prefix(hi, self.prefix_length)
        elif kind == "decimal" and not isinstance(lo, Decimal):
            leaf.bounds_ok = False
            return
        self._merge(leaf, lo, hi)

    # -- result ---------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The stats as Python values (decimals as Decimal); `to_json` gives the log's JSON text."""
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for leaf in self.leaves:
            if leaf.null_count_ok:
                _nest(nulls, leaf.path, leaf.null_count)
            if not leaf.bounds_ok or leaf.min is None:
                continue
            lo, hi = self._bounds(leaf)
            if lo is not None:
                _nest(mins, leaf.path, lo)
                _nest(maxs, leaf.path, hi)
        return {"numRecords": self.num_records, "minValues": mins, "maxValues": maxs, "nullCount": nulls}

    def _bounds(self, leaf: _Leaf) -> tuple[Any, Any]:
        kind, lo, hi = leaf.kind, leaf.min, leaf.max
        if kind == "date":
            return (_EPOCH_DATE + dt.timedelta(days=lo)).isoformat(), (_EPOCH_DATE + dt.timedelta(days=hi)).isoformat()
        if kind in ("timestamp", "timestamp_ntz"):
            lo_ms = lo // 1000
            hi_ms = -((-hi) // 1000)  # ceiling: the max must stay an upper bound
            suffix = "Z" if kind == "timestamp" else ""
            try:
                return _format_millis(lo_ms) + suffix, _format_millis(hi_ms) + suffix
            except (OverflowError, ValueError):
                return None, None  # outside years 1..9999: no bounds rather than wrong ones
        if kind == "string":
            return lo, truncated_max(hi, self.prefix_length)
        if kind == "float":
            return float(lo), float(hi)
        return lo, hi

    def to_json(self) -> str:
        return _dumps(self.to_dict())


def _tie_break_position(value: str, prefix_length: int) -> int:
    """The first position at or after the prefix that does not hold U+10FFFF (len(value) if none)."""
    cut = prefix_length
    while cut < len(value) and value[cut] == "\U0010ffff":
        cut += 1
    return cut


def max_prefix(value: str, prefix_length: int) -> str:
    """The part of a running max that decides its truncated bound: the prefix, any U+10FFFF run after
    it and one character more. Keeps the order of values, so maxima of these are maxima of values."""
    return value[:_tie_break_position(value, prefix_length) + 1]


def truncated_max(value: str, prefix_length: int) -> str:
    """An upper bound of `value` at most a few characters longer than `prefix_length`: the prefix plus
    a tie-breaker above the first dropped character (U+007F, or U+10FFFF, the largest code point).
    A dropped U+10FFFF has nothing above it, so the prefix grows over such characters; a value that is
    all U+10FFFF from there on is kept whole."""
    if len(value) <= prefix_length:
        return value
    cut = _tie_break_position(value, prefix_length)
    if cut == len(value):
        return value
    return value[:cut] + ("\u007f" if value[cut] < "\u007f" else "\U0010ffff")


def _datetime_micros(value: dt.datetime) -> int:
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _format_millis(ms: int) -> str:
    value = _EPOCH + dt.timedelta(milliseconds=ms)
    return value.strftime("%Y-%m-%dT%H:%M:%S") + f".{value.microsecond // 1000:03d}"


def _nest(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        target = target.setdefault(name, {})
    target[path[-1]] = value


def _leaf_array(batch: pa.RecordBatch, path: tuple[str, ...]) -> pa.Array | None:
    arr: pa.Array | None = None
    names = batch.schema.names
    idx = _index_of(names, path[0])
    if idx is None:
        return None
    arr = batch.column(idx)
    for name in path[1:]:
        if not pa.types.is_struct(arr.type):
            return None
        child_names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        i = _index_of(child_names, name)
        if i is None:
            return None
        arr = arr.flatten()[i]  # flatten() merges the parent's nulls into the child
    return arr


def _index_of(names: list[str], name: str) -> int | None:
    try:
        return names.index(name)
    except ValueError:
        low = name.lower()
        for i, n in enumerate(names):
            if n.lower() == low:
                return i
    return None


def _dumps(value: Any) -> str:
    """Compact JSON where Decimals stay exact JSON numbers."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite float in stats")
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def stats_json_from_parsed(parsed: dict[str, Any], schema_json: dict[str, Any]) -> str:
    """The `add.stats` JSON of a checkpoint's `stats_parsed` struct (as a Python dict), so that stats
    other writers kept only as structs survive our replay and our checkpoints. Timestamps become
    milliseconds (the min rounded down, the max up), dates ISO dates; binary bounds are dropped."""
    out: dict[str, Any] = {}
    for key, value in parsed.items():
        if value is None:
            continue
        if key in ("minValues", "maxValues"):
            value = _bounds_json(value, schema_json, round_up=key == "maxValues")
        elif isinstance(value, dict):
            value = _without_nulls(value)
        out[key] = value
    return _dumps(out)


def _without_nulls(value: dict[str, Any]) -> dict[str, Any]:
    return {k: _without_nulls(v) if isinstance(v, dict) else v for k, v in value.items() if v is not None}


def _bounds_json(values: dict[str, Any], struct_type: dict[str, Any], round_up: bool) -> dict[str, Any]:
    types = {f["name"]: f["type"] for f in struct_type.get("fields", [])}
    out: dict[str, Any] = {}
    for name, value in values.items():
        delta_type = types.get(name)
        if value is None or delta_type is None:
            continue
        if isinstance(value, dict):
            if isinstance(delta_type, dict) and delta_type.get("type") == "struct":
                nested = _bounds_json(value, delta_type, round_up)
                if nested:
                    out[name] = nested
            continue
        if isinstance(value, dt.datetime):
            micros = _datetime_micros(value)
            ms = -((-micros) // 1000) if round_up else micros // 1000
            try:
                text = _format_millis(ms)
            except (OverflowError, ValueError):
                continue
            out[name] = text + ("" if normalize_type_name(str(delta_type)) == "timestamp_ntz" else "Z")
        elif isinstance(value, dt.date):
            out[name] = value.isoformat()
        elif isinstance(value, (bytes, bytearray)) or (isinstance(value, float) and not math.isfinite(value)):
            continue
        else:
            out[name] = value
    return out


def parquet_file_stats(metadata: "pq.FileMetaData", schema_json: dict[str, Any],
                       partition_columns: Sequence[str] = (), configuration: dict[str, str] | None = None) -> str:
    """The `add.stats` JSON of a data file, from its Parquet footer (no data read)."""
    collector = StatsCollector(schema_json, partition_columns, configuration)
    collector.update_from_parquet_metadata(metadata)
    return collector.to_json()


def file_stats(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], schema_json: dict[str, Any],
               partition_columns: Sequence[str] = (), configuration: dict[str, str] | None = None) -> str:
    """The `add.stats` JSON of one data file holding `data` (a table, a batch, or batches)."""
    collector = StatsCollector(schema_json, partition_columns, configuration)
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        collector.update(data)
    else:
        for batch in data:
            collector.update(batch)
    return collector.to_json()


# --------------------------------------------------------------------------- stats as checkpoint structs

_BOUNDED_KINDS = _INT_TYPES | _FLOAT_TYPES | {"date", "timestamp", "timestamp_ntz", "string"}


def parsed_stats_type(schema_json: dict[str, Any], partition_columns: Sequence[str] = ()) -> pa.StructType:
    """The type of a checkpoint's `add.stats_parsed` for a (physical) table schema: bounds in each
    column's own type for the leaves that have them, a long null count for every leaf."""
    from .schema import type_to_arrow

    def bounds(struct_type: dict[str, Any]) -> pa.StructType:
        fields = []
        for f in struct_type.get("fields", []):
            t = f["type"]
            if isinstance(t, dict) and t.get("type") == "struct":
                nested = bounds(t)
                if nested.num_fields:
                    fields.append(pa.field(f["name"], nested))
            elif isinstance(t, str) and (normalize_type_name(t) in _BOUNDED_KINDS or is_decimal(t)):
                fields.append(pa.field(f["name"], type_to_arrow(t)))
        return pa.struct(fields)

    def null_counts(struct_type: dict[str, Any]) -> pa.StructType:
        return pa.struct([
            pa.field(f["name"], null_counts(f["type"]) if isinstance(f["type"], dict)
                     and f["type"].get("type") == "struct" else pa.int64())
            for f in struct_type.get("fields", [])])

    data = without_columns(schema_json, list(partition_columns))
    return pa.struct([
        pa.field("numRecords", pa.int64()), pa.field("minValues", bounds(data)),
        pa.field("maxValues", bounds(data)), pa.field("nullCount", null_counts(data)),
        pa.field("tightBounds", pa.bool_()),
    ])


def parsed_stats(texts: Iterable[str | None], struct_type: pa.StructType) -> pa.StructArray:
    """`add.stats` JSON texts as `stats_parsed` structs (null where a file has no stats). Values that do
    not fit the column's type are left out: a missing bound only costs skipping."""
    rows = []
    for text in texts:
        try:
            obj = log_json.loads(text) if text else None
        except ValueError:
            obj = None
        rows.append(_conform(obj, struct_type) if isinstance(obj, dict) else None)
    return pa.array(rows, type=struct_type)


def _conform(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            return None
        return {f.name: _conform(value.get(f.name), f.type) for f in t}
    try:
        if pa.types.is_boolean(t):
            return value if isinstance(value, bool) else None
        if isinstance(value, bool):
            return None
        if pa.types.is_integer(t):
            return int(value) if isinstance(value, int) else None
        if pa.types.is_floating(t):
            return float(value) if isinstance(value, (int, float)) else None
        if pa.types.is_decimal(t):
            return Decimal(str(value)).quantize(Decimal(1).scaleb(-t.scale)) if isinstance(value, (int, float)) \
                else None
        if pa.types.is_string(t):
            return value if isinstance(value, str) else None
        if pa.types.is_date(t):
            return dt.date.fromisoformat(value[:10])
        if pa.types.is_timestamp(t):
            v = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            if t.tz is not None:
                return v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v.astimezone(dt.timezone.utc)
            return v if v.tzinfo is None else v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    except (TypeError, ValueError, ArithmeticError):
        return None
    return None
