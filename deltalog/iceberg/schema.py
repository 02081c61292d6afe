"""A Delta table's schema as Iceberg sees it: the same field ids (column mapping's), Iceberg types, the
identity partition spec of its partition columns, and the name mapping that ties the names in the data
files (physical names under column mapping) to those ids.

Ids: a column's is `delta.columnMapping.id`; an array's element and a map's key and value take theirs from
`delta.columnMapping.nested.ids` on the nearest field above them, keyed `<physical path>.element` /
`.key` / `.value` (Delta's IcebergCompat rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltalog.lazy_imports import load

load("pyiceberg")  # whole, before any import from it (lazy_imports.py says why)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import MappedField, NameMapping
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IcebergType,
                             IntegerType, ListType, LongType, MapType, NestedField, StringType, StructType,
                             TimestampType, TimestamptzType)

from ..column_mapping import ID, NESTED_IDS, physical_name
from ..errors import UnsupportedFeatureError
from ..row_tracking import ROW_COMMIT_VERSION_COLUMN_KEY, ROW_ID_COLUMN_KEY

PARTITION_FIELD_START = 1000  # Iceberg's first partition field id

_PRIMITIVES = {"string": StringType(), "long": LongType(), "integer": IntegerType(), "short": IntegerType(),
               "byte": IntegerType(), "float": FloatType(), "double": DoubleType(), "boolean": BooleanType(),
               "binary": BinaryType(), "date": DateType(), "timestamp": TimestamptzType(),
               "timestamp_ntz": TimestampType()}


@dataclass(frozen=True)
class Leaf:
    """A primitive column at any depth: where Delta's stats keep it (physical names) and its Iceberg field."""
    stats_path: tuple[str, ...]
    field_id: int
    iceberg_type: IcebergType
    delta_type: str


def iceberg_schema(schema_json: dict[str, Any], schema_id: int = 0) -> Schema:
    """The Iceberg schema of a column-mapped Delta schema, with its ids."""
    return Schema(*[_field(f) for f in schema_json["fields"]], schema_id=schema_id)


def _field(f: dict[str, Any]) -> NestedField:
    metadata = f.get("metadata") or {}
    if ID not in metadata:
        raise UnsupportedFeatureError(
            f"column {f['name']!r} has no column mapping id: Iceberg metadata needs column mapping "
            f"(delta.columnMapping.mode = name), which table_format: iceberg turns on")
    nested_ids = metadata.get(NESTED_IDS) or {}
    kind = _type(f["type"], nested_ids, physical_name(f), f["name"])
    return NestedField(int(metadata[ID]), f["name"], kind, required=not f.get("nullable", True))


def _type(t: Any, nested_ids: dict[str, int], path: str, column: str) -> IcebergType:
    if isinstance(t, str):
        if t.startswith("decimal"):
            precision, scale = t[len("decimal("):-1].split(",")
            return DecimalType(int(precision), int(scale))
        if t not in _PRIMITIVES:
            raise UnsupportedFeatureError(f"column {column!r} is of type {t}, which Iceberg (v2) has no type for")
        return _PRIMITIVES[t]
    if t["type"] == "struct":
        return StructType(*[_field(f) for f in t["fields"]])
    if t["type"] == "array":
        element = f"{path}.element"
        return ListType(_nested_id(nested_ids, element, column), _type(t["elementType"], nested_ids, element, column),
                        element_required=not t.get("containsNull", True))
    if t["type"] == "map":
        key, value = f"{path}.key", f"{path}.value"
        return MapType(_nested_id(nested_ids, key, column), _type(t["keyType"], nested_ids, key, column),
                       _nested_id(nested_ids, value, column), _type(t["valueType"], nested_ids, value, column),
                       value_required=not t.get("valueContainsNull", True))
    raise UnsupportedFeatureError(f"column {column!r}: type {t!r} has no Iceberg type")


def _nested_id(nested_ids: dict[str, int], key: str, column: str) -> int:
    if key not in nested_ids:
        raise UnsupportedFeatureError(
            f"column {column!r}: its {key.rsplit('.', 1)[1]} has no id in {NESTED_IDS} (IcebergCompat "
            f"assigns them when the column is added)")
    return int(nested_ids[key])


def leaves(schema_json: dict[str, Any], schema: Schema) -> list[Leaf]:
    """Every primitive column reachable through structs only (Delta keeps no stats inside arrays or maps)."""
    out: list[Leaf] = []

    def visit(fields: list[dict[str, Any]], prefix: tuple[str, ...]) -> None:
        for f in fields:
            path = prefix + (physical_name(f),)
            t = f["type"]
            if isinstance(t, dict) and t.get("type") == "struct":
                visit(t["fields"], path)
            elif isinstance(t, str):
                field_id = int(f["metadata"][ID])
                out.append(Leaf(path, field_id, schema.find_field(field_id).field_type, t))

    visit(schema_json["fields"], ())
    return out


def partition_spec(schema: Schema, partition_columns: list[str], spec_id: int = 0) -> PartitionSpec:
    """Identity partitioning on the Delta partition columns, in their order."""
    return PartitionSpec(*[
        PartitionField(source_id=schema.find_field(name).field_id, field_id=PARTITION_FIELD_START + i,
                       transform=IdentityTransform(), name=name)
        for i, name in enumerate(partition_columns)], spec_id=spec_id)


# Iceberg v3's reserved ids of the row lineage columns, which IcebergCompatV3 gives Delta's materialized
# row ID and row commit version columns (files that OPTIMIZE or MERGE rewrote keep their rows' IDs there)
ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID = 2147483539


def row_tracking_columns(configuration: dict[str, str]) -> list[MappedField]:
    names = ((ROW_ID_COLUMN_KEY, ROW_ID_FIELD_ID),
             (ROW_COMMIT_VERSION_COLUMN_KEY, LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID))
    return [MappedField(field_id=field_id, names=[configuration[key]]) for key, field_id in names
            if configuration.get(key)]


def name_mapping(schema_json: dict[str, Any], schema: Schema, previous: str | None = None,
                 hidden: list[MappedField] = ()) -> str:
    """The name mapping (`schema.name-mapping.default`): a reader of a file with no field ids finds each
    column by the physical name the file uses, or by its logical name. Columns of earlier schemas (that
    older snapshots' files still hold: a table built again gets new ids and physical names) stay in it
    under their physical names, which never repeat. `hidden`: columns files hold that the table's schema
    does not show (row tracking's), which a reader must still be able to place."""

    def mapped(fields: list[dict[str, Any]], struct: StructType) -> list[MappedField]:
        out = []
        for f, ice in zip(fields, struct.fields):
            names = list(dict.fromkeys([physical_name(f), f["name"]]))
            out.append(MappedField(field_id=ice.field_id, names=names, fields=_nested(f["type"], ice.field_type)))
        return out

    def _nested(t: Any, ice: IcebergType) -> list[MappedField]:
        if isinstance(ice, StructType):
            return mapped(t["fields"], ice)
        if isinstance(ice, ListType):
            return [MappedField(field_id=ice.element_id, names=["element"],
                                fields=_nested(t["elementType"], ice.element_type))]
        if isinstance(ice, MapType):
            return [MappedField(field_id=ice.key_id, names=["key"], fields=_nested(t["keyType"], ice.key_type)),
                    MappedField(field_id=ice.value_id, names=["value"],
                                fields=_nested(t["valueType"], ice.value_type))]
        return []

    current = mapped(schema_json["fields"], schema.as_struct()) + list(hidden)
    if previous:
        current = _merged(current, list(NameMapping.model_validate_json(previous)))
    return NameMapping(current).model_dump_json()


def _merged(current: list[MappedField], earlier: list[MappedField]) -> list[MappedField]:
    by_id = {f.field_id: f for f in current}
    out = list(current)
    for old in earlier:
        now = by_id.get(old.field_id)
        if now is None:  # a column of an earlier schema: its physical name only (its logical one may be reused)
            out.append(MappedField(field_id=old.field_id, names=[n for n in old.names if n.startswith("col-")]
                                   or old.names[:1], fields=list(old.fields)))
        elif old.fields:
            out[out.index(now)] = MappedField(field_id=now.field_id, names=now.names,
                                              fields=_merged(list(now.fields), list(old.fields)))
    return out


def last_column_id(schema: Schema) -> int:
    return schema.highest_field_id
