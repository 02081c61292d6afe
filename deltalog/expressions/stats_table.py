"""The statistics of many files (the `stats` JSON of their add actions) parsed once, for the columns
a predicate mentions: per column, typed min and max bounds, null counts and record counts."""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from .. import log_json
from ..storage.log_store import arrow_owned_buffer
from .literals import parse_time_strings, stats_json_type


@dataclass
class ColumnStats:
    base: str
    min: pa.Array | None       # typed, null = unknown
    max: pa.Array | None       # typed upper bound, null = unknown
    max_truncated: pa.Array | None  # strings: max only bounds the prefix of its length
    null_count: pa.Array       # int64, null = unknown
    num_records: pa.Array      # int64, null = unknown


class StatsTable:
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
            pa.field("minValues", nest(stats_json_type)),
            pa.field("maxValues", nest(stats_json_type)),
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

    def column(self, name: str) -> ColumnStats:
        path, base = self.paths[name]
        unknown_i = pa.nulls(self.n, pa.int64())
        num_records = self.parsed.column("numRecords").combine_chunks() if self.n else unknown_i
        null_count = self._leaf("nullCount", path)
        if null_count is None or not pa.types.is_integer(null_count.type):
            null_count = unknown_i
        mn = self._leaf("minValues", path) if stats_json_type(base) is not None else None
        mx = self._leaf("maxValues", path) if stats_json_type(base) is not None else None
        truncated = None
        if mn is not None and mx is not None:
            if base in ("date", "timestamp", "timestamp_ntz"):
                mn, mx = parse_time_strings(mn, base), parse_time_strings(mx, base)
                if base != "date":
                    # Stats keep milliseconds: the true max may be up to 999 microseconds above.
                    mx = pc.add(mx, pa.scalar(dt.timedelta(milliseconds=1)))
            elif base in ("float", "double", "decimal"):
                mn = pc.if_else(pc.is_nan(mn), None, mn)
                mx = pc.if_else(pc.is_nan(mx), None, mx)
            elif base == "string":
                truncated = pc.greater_equal(pc.utf8_length(mx), self.prefix_length)
        return ColumnStats(base, mn, mx, truncated, null_count, num_records)
