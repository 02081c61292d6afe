"""A Delta `add` as an Iceberg data file: its path, size, record count, partition tuple (from
`partitionValues`) and per-column null counts and bounds (from Delta's stats).

Bounds are what Iceberg readers skip files by, so they must hold every value of the file. Delta's stats
here already do: timestamps are cut to milliseconds with the min rounded down and the max rounded up
(stats.py); a writer that only truncates the max (delta-spark does) would make a reader skip the rows
of the file's last millisecond, so a timestamp max read from another writer's stats is rounded up to
the next millisecond too. Floats keep no bounds (NaN sorts apart in the two formats)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from deltalog.lazy_imports import load

load("pyiceberg")  # whole, before any import from it (lazy_imports.py says why)
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IcebergType,
                             TimestampType, TimestamptzType)

from ..actions import AddFile
from ..column_mapping import physical_name
from ..errors import UnsupportedFeatureError
from ..paths import datetime_to_micros, parse_partition_value
from .schema import Leaf

_EPOCH_DATE = dt.date(1970, 1, 1)
_V3_POSITIONS = {f.name: i for i, f in enumerate(DATA_FILE_TYPE[3].fields)}


def v3_field(data: DataFile, name: str) -> Any:
    """A v3 field of a data file (first_row_id, referenced_data_file, ...), which pyiceberg 0.12 binds
    but gives no attribute; None for a record in the v2 layout."""
    position = _V3_POSITIONS[name]
    return data[position] if position < len(data) else None


def data_file(add: AddFile, location: str, schema: Schema, schema_json: dict[str, Any], leaves: list[Leaf],
              spec: PartitionSpec) -> DataFile:
    """The data file (in pyiceberg's v3 layout, which a v2 manifest writes without the v3 fields); its
    first row ID is the add's `baseRowId` (row tracking), so Iceberg v3's row lineage is Delta's."""
    stats = json.loads(add.stats, parse_float=Decimal) if add.stats else {}
    if "numRecords" not in stats:
        raise UnsupportedFeatureError(f"{add.path}: its stats have no numRecords, which Iceberg needs")
    lower, upper, nulls = {}, {}, {}
    mins, maxs, null_counts = stats.get("minValues") or {}, stats.get("maxValues") or {}, stats.get("nullCount") or {}
    for leaf in leaves:
        count = _at(null_counts, leaf.stats_path)
        if isinstance(count, int):
            nulls[leaf.field_id] = count
        if isinstance(leaf.iceberg_type, (FloatType, DoubleType, BinaryType)):
            continue
        low, high = _at(mins, leaf.stats_path), _at(maxs, leaf.stats_path)
        if low is not None and high is not None:
            lower[leaf.field_id] = to_bytes(leaf.iceberg_type, _value(leaf.iceberg_type, low, upper=False))
            upper[leaf.field_id] = to_bytes(leaf.iceberg_type, _value(leaf.iceberg_type, high, upper=True))
    by_name = {f["name"]: f for f in schema_json["fields"]}
    partition = Record(*[
        _partition_value(schema.find_field(pf.source_id).field_type,
                         add.partition_values.get(physical_name(by_name[pf.name])), by_name[pf.name]["type"])
        for pf in spec.fields])
    out = DataFile.from_args(
        _table_format_version=3, first_row_id=add.base_row_id, content=DataFileContent.DATA, file_path=location,
        file_format=FileFormat.PARQUET, partition=partition,
        record_count=int(stats["numRecords"]), file_size_in_bytes=add.size, null_value_counts=nulls,
        lower_bounds=lower, upper_bounds=upper)
    out.spec_id = spec.spec_id
    return out


def _at(tree: dict[str, Any], path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(name)
    return tree


def _value(kind: IcebergType, text: Any, upper: bool) -> Any:
    """A Delta stats value as the Python value pyiceberg serializes for `kind`."""
    if isinstance(kind, DecimalType):
        return Decimal(str(text)).quantize(Decimal(1).scaleb(-kind.scale))
    if isinstance(kind, DateType):
        return (dt.date.fromisoformat(str(text)[:10]) - _EPOCH_DATE).days
    if isinstance(kind, (TimestampType, TimestamptzType)):
        micros = datetime_to_micros(dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")))
        if upper and micros % 1000 == 0:
            micros += 999  # a max cut to the millisecond: every value up to the next one may be in the file
        return micros
    if isinstance(kind, BooleanType):
        return text in (True, "true")
    if isinstance(text, Decimal):
        return int(text)
    return text


def _partition_value(kind: IcebergType, text: str | None, delta_type: str) -> Any:
    value = parse_partition_value(text, delta_type)
    if value is None:
        return None
    if isinstance(kind, DateType):
        return (value - _EPOCH_DATE).days
    if isinstance(kind, (TimestampType, TimestamptzType)):
        return datetime_to_micros(value)
    if isinstance(kind, DecimalType):
        return Decimal(value).quantize(Decimal(1).scaleb(-kind.scale))
    return value
