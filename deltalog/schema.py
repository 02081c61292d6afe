"""The table schema: Delta's `schemaString` (Spark StructType JSON) and its Arrow equivalent.

A Delta schema is a dict `{"type": "struct", "fields": [{name, type, nullable, metadata}, ...]}` where a
type is a primitive name (`"long"`, `"decimal(10,2)"`, ...) or a nested dict (struct, array, map).
Field metadata (comments, constraints, ...) is kept on the Arrow field under `delta.metadata` as JSON so
that a round trip loses nothing.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator

import pyarrow as pa

from . import log_json
from .errors import InvalidTableError, SchemaMismatchError, UnsupportedFeatureError
from .sql_text import quote_identifier  # noqa: F401  (re-exported: one quoting for every module)

# The Arrow field-metadata key under which a Delta field's metadata dict travels.
FIELD_METADATA_KEY = b"delta.metadata"

_PRIMITIVE_TO_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
# Spark's older aliases that may appear in schemas written by other tools.
_ALIASES = {"int": "integer", "bigint": "long", "smallint": "short", "tinyint": "byte", "bool": "boolean",
            "real": "float"}
_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
NUMERIC_TYPES = frozenset({"long", "integer", "short", "byte", "float", "double"})
PRIMITIVE_TYPES = frozenset(_PRIMITIVE_TO_ARROW)
# A variant (features `variantType`, `variantType-preview`) is stored as a group of two binaries: the
# metadata (its dictionary of field names) and the encoded value. Readers give it as that struct, as
# delta-rs does; Spark 4 reads it as its own VARIANT type.
VARIANT_ARROW_TYPE = pa.struct([pa.field("metadata", pa.binary(), nullable=False),
                                pa.field("value", pa.binary(), nullable=False)])


def struct(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "struct", "fields": fields}


def field(name: str, type_: Any, nullable: bool = True, metadata: dict | None = None) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": nullable, "metadata": metadata or {}}


def nullable_type(t: Any) -> Any:
    """A Delta type with every nested field nullable (as Delta creates tables from data, and as Spark
    must cast to: it casts a nullable field to no non-nullable one)."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return {**t, "fields": [{**f, "nullable": True, "type": nullable_type(f["type"])} for f in t["fields"]]}
        if kind == "array":
            return {**t, "elementType": nullable_type(t["elementType"]), "containsNull": True}
        if kind == "map":
            return {**t, "valueType": nullable_type(t["valueType"]), "valueContainsNull": True}
    return t


def uses_type(schema: Any, type_name: str) -> bool:
    """Whether a Spark StructType JSON uses a primitive type anywhere (nested types included)."""
    if isinstance(schema, str):
        return schema == type_name
    if isinstance(schema, dict):
        return any(uses_type(v, type_name) for k, v in schema.items() if k != "metadata")
    if isinstance(schema, list):
        return any(uses_type(v, type_name) for v in schema)
    return False


def is_decimal(delta_type: Any) -> bool:
    return isinstance(delta_type, str) and delta_type.startswith("decimal")


def decimal_precision_scale(delta_type: str) -> tuple[int, int]:
    if delta_type == "decimal":
        return 10, 0  # Spark's default
    m = _DECIMAL_RE.match(delta_type)
    if not m:
        raise InvalidTableError(f"'{delta_type}' is not a valid decimal type; expected decimal(p,s).")
    precision, scale = int(m.group(1)), int(m.group(2))
    if not 1 <= precision <= 38 or scale > precision:
        raise InvalidTableError(
            f"'{delta_type}': decimal precision must be 1..38 and scale at most the precision.")
    return precision, scale


def normalize_type_name(delta_type: str) -> str:
    t = delta_type.strip().lower()
    t = _ALIASES.get(t, t)
    if t.startswith("decimal"):
        p, s = decimal_precision_scale(t.replace(" ", ""))
        return f"decimal({p},{s})"
    return t


# ---------------------------------------------------------------------------------------------------
# Delta -> Arrow


def type_to_arrow(delta_type: Any, where: str = "column") -> pa.DataType:
    """The Arrow type of one Delta type (primitive name or nested dict)."""
    if isinstance(delta_type, str):
        name = normalize_type_name(delta_type)
        if name in _PRIMITIVE_TO_ARROW:
            return _PRIMITIVE_TO_ARROW[name]
        if name == "void":
            return pa.null()  # Spark's type of a column only ever NULL; files do not store it
        if name == "variant":
            return VARIANT_ARROW_TYPE
        if name.startswith("decimal"):
            return pa.decimal128(*decimal_precision_scale(name))
        raise UnsupportedFeatureError(
            f"{where}: type '{delta_type}' is not supported. Supported: string, long, integer, short, "
            f"byte, float, double, decimal(p,s), boolean, binary, date, timestamp, timestamp_ntz, "
            f"variant, struct, array, map.")
    if not isinstance(delta_type, dict) or "type" not in delta_type:
        raise InvalidTableError(f"{where}: malformed type {delta_type!r} in the schema.")
    kind = delta_type["type"]
    if kind == "struct":
        return pa.struct([field_to_arrow(f, where) for f in delta_type.get("fields", [])])
    if kind == "array":
        element = type_to_arrow(delta_type["elementType"], f"{where}.element")
        return pa.list_(pa.field("element", element, nullable=bool(delta_type.get("containsNull", True))))
    if kind == "map":
        key = type_to_arrow(delta_type["keyType"], f"{where}.key")
        value = type_to_arrow(delta_type["valueType"], f"{where}.value")
        return pa.map_(pa.field("key", key, nullable=False),
                       pa.field("value", value, nullable=bool(delta_type.get("valueContainsNull", True))))
    raise UnsupportedFeatureError(f"{where}: nested type '{kind}' is not supported (struct, array, map are).")


def field_to_arrow(f: dict[str, Any], parent: str | None = None) -> pa.Field:
    name = f["name"]
    where = f"{parent}.{name}" if parent else name
    metadata = f.get("metadata") or {}
    arrow_meta = {FIELD_METADATA_KEY: json.dumps(metadata, separators=(",", ":")).encode()} if metadata else None
    return pa.field(name, type_to_arrow(f["type"], where), nullable=bool(f.get("nullable", True)),
                    metadata=arrow_meta)


def to_arrow_schema(schema_json: dict[str, Any] | str) -> pa.Schema:
    """The Arrow schema of a Delta schema (dict, or the schemaString itself)."""
    if isinstance(schema_json, str):
        schema_json = parse_schema_string(schema_json)
    return pa.schema([field_to_arrow(f) for f in schema_json.get("fields", [])])


# ---------------------------------------------------------------------------------------------------
# Arrow -> Delta


def type_from_arrow(t: pa.DataType, where: str = "column") -> Any:
    """The Delta type of an Arrow type. Lossless where Delta has the type; widening where it does not."""
    if pa.types.is_dictionary(t):
        return type_from_arrow(t.value_type, where)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_boolean(t):
        return "boolean"
    simple = {pa.int8(): "byte", pa.int16(): "short", pa.int32(): "integer", pa.int64(): "long",
              pa.uint8(): "short", pa.uint16(): "integer", pa.uint32(): "long", pa.uint64(): "long",
              pa.float16(): "float", pa.float32(): "float", pa.float64(): "double",
              pa.date32(): "date", pa.date64(): "date"}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise UnsupportedFeatureError(
                f"{where}: {t} has precision {t.precision}; Delta decimals allow at most 38.")
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_struct(t):
        return struct([field_from_arrow(t.field(i), where) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return {"type": "map", "keyType": type_from_arrow(t.key_type, f"{where}.key"),
                "valueType": type_from_arrow(t.item_type, f"{where}.value"),
                "valueContainsNull": bool(t.item_field.nullable)}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) \
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return {"type": "array", "elementType": type_from_arrow(t.value_type, f"{where}.element"),
                "containsNull": bool(t.value_field.nullable)}
    if pa.types.is_null(t):
        raise SchemaMismatchError(
            f"{where}: has no type (Arrow null type, e.g. a column of only NULLs); cast it to a concrete "
            f"type before writing.")
    raise UnsupportedFeatureError(f"{where}: Arrow type {t} has no Delta equivalent.")


def field_from_arrow(f: pa.Field, parent: str | None = None) -> dict[str, Any]:
    where = f"{parent}.{f.name}" if parent else f.name
    metadata: dict[str, Any] = {}
    if f.metadata and FIELD_METADATA_KEY in f.metadata:
        metadata = json.loads(f.metadata[FIELD_METADATA_KEY])
    return field(f.name, type_from_arrow(f.type, where), bool(f.nullable), metadata)


def from_arrow_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Delta schema (dict) of an Arrow schema; column names are checked for case-insensitive clashes."""
    out = struct([field_from_arrow(schema.field(i)) for i in range(len(schema))])
    check_column_names(out)
    return out


# ---------------------------------------------------------------------------------------------------
# schemaString


def schema_string(schema_json: dict[str, Any]) -> str:
    """The compact JSON text stored as `metaData.schemaString`."""
    return json.dumps(schema_json, separators=(",", ":"), ensure_ascii=False)


def parse_schema_string(text: str, table: str | None = None) -> dict[str, Any]:
    try:
        out = log_json.loads(text)
    except ValueError as e:
        raise InvalidTableError(
            f"{table or 'table'}: schemaString is not valid JSON ({e}).") from None
    if not isinstance(out, dict) or out.get("type") != "struct":
        raise InvalidTableError(f"{table or 'table'}: schemaString is not a struct type: {text[:200]}")
    return out


def check_column_names(schema_json: dict[str, Any], table: str | None = None) -> None:
    """Column names must be unique ignoring case at every struct level (Delta's rule)."""
    def visit(t: Any, prefix: str) -> None:
        if isinstance(t, dict):
            if t.get("type") == "struct":
                seen: dict[str, str] = {}
                for f in t.get("fields", []):
                    name = f["name"]
                    key = name.lower()
                    if key in seen:
                        raise SchemaMismatchError(
                            f"{table or 'table'}: columns '{prefix}{seen[key]}' and '{prefix}{name}' differ "
                            f"only in case; Delta column names must be unique ignoring case. Rename one.")
                    seen[key] = name
                    visit(f["type"], f"{prefix}{name}.")
            elif t.get("type") == "array":
                visit(t["elementType"], f"{prefix}element.")
            elif t.get("type") == "map":
                visit(t["keyType"], f"{prefix}key.")
                visit(t["valueType"], f"{prefix}value.")
    visit(schema_json, "")


# ---------------------------------------------------------------------------------------------------
# Lookups


def field_names(schema_json: dict[str, Any]) -> list[str]:
    return [f["name"] for f in schema_json.get("fields", [])]


def find_field(schema_json: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The top-level field named `name` (exact match first, then ignoring case)."""
    fields = schema_json.get("fields", [])
    for f in fields:
        if f["name"] == name:
            return f
    lower = name.lower()
    for f in fields:
        if f["name"].lower() == lower:
            return f
    return None


def column_type(schema_json: dict[str, Any], name: str, table: str | None = None) -> Any:
    f = find_field(schema_json, name)
    if f is None:
        raise SchemaMismatchError(
            f"{table or 'table'}: no column '{name}'; columns are {', '.join(field_names(schema_json))}.")
    return f["type"]


def partition_column_types(schema_json: dict[str, Any], partition_columns: list[str],
                           table: str | None = None) -> dict[str, str]:
    """Partition column name -> Delta type; partition columns must be top-level primitive columns."""
    out: dict[str, str] = {}
    for c in partition_columns:
        t = column_type(schema_json, c, table)
        if not isinstance(t, str):
            raise InvalidTableError(
                f"{table or 'table'}: partition column '{c}' has nested type {t.get('type')}; partition "
                f"columns must be of a primitive type.")
        out[c] = normalize_type_name(t)
    return out


def leaf_columns(schema_json: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, type) of every leaf in schema order, descending into structs only (arrays and maps are
    leaves, as Delta's statistics treat them)."""
    for f in schema_json.get("fields", []):
        path = prefix + (f["name"],)
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "struct":
            yield from leaf_columns(t, path)
        else:
            yield path, t


def without_columns(schema_json: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The schema minus some top-level columns (e.g. the data schema without partition columns)."""
    drop = {n.lower() for n in names}
    return struct([f for f in schema_json.get("fields", []) if f["name"].lower() not in drop])


