"""Column mapping (`delta.columnMapping.mode` = `name` or `id`): each column's logical name (what users
see) is separate from its physical name (what data files, stats and partition values use) and its id.

With it, renaming or dropping a column is a metadata change that is correct by construction: a column
added again gets a new physical name, so old files read it as NULL. In `id` mode data files are
matched by Parquet field ids, in `name` mode by physical names. Partition values and stats are keyed by
physical names; `partitionColumns` lists logical names.
"""
from __future__ import annotations

import copy
import uuid
from typing import Any, Iterator

import pyarrow as pa

MODE = "delta.columnMapping.mode"
MAX_ID = "delta.columnMapping.maxColumnId"
ID = "delta.columnMapping.id"
PHYSICAL_NAME = "delta.columnMapping.physicalName"
NESTED_IDS = "delta.columnMapping.nested.ids"
ICEBERG_COMPAT_KEYS = ("delta.enableIcebergCompatV1", "delta.enableIcebergCompatV2", "delta.enableIcebergCompatV3")
MODES = ("none", "name", "id")
# Where Spark's Parquet reader/writer and pyarrow keep a field's id.
SPARK_FIELD_ID = "parquet.field.id"
ARROW_FIELD_ID = b"PARQUET:field_id"


# Characters delta-spark and delta-kernel-rs refuse in a column name when column mapping is off (Parquet
# writers once could not store them); with column mapping the name is only metadata.
NAME_CHARACTERS_NEEDING_MAPPING = " ,;{}()\n\t="


def names_needing_mapping(schema_json: dict[str, Any]) -> list[str]:
    """Dotted paths of the columns (nested ones too) whose names other engines refuse without column
    mapping."""
    out: list[str] = []

    def visit(t: Any, prefix: str) -> None:
        if isinstance(t, dict) and t.get("type") == "struct":
            for f in t["fields"]:
                if any(c in f["name"] for c in NAME_CHARACTERS_NEEDING_MAPPING):
                    out.append(prefix + f["name"])
                visit(f["type"], f"{prefix}{f['name']}.")
        for _, inner in _struct_children(t):
            visit(inner, prefix)
    visit(schema_json, "")
    return out


def mode_of(configuration: dict[str, str] | None) -> str:
    return ((configuration or {}).get(MODE) or "none").lower()


def is_mapped(configuration: dict[str, str] | None) -> bool:
    return mode_of(configuration) in ("name", "id")


def physical_name(field: dict[str, Any]) -> str:
    return (field.get("metadata") or {}).get(PHYSICAL_NAME) or field["name"]


def field_id(field: dict[str, Any]) -> int | None:
    value = (field.get("metadata") or {}).get(ID)
    return int(value) if value is not None else None


def _struct_children(t: Any) -> Iterator[tuple[str, Any]]:
    """(slot, type) of the types directly inside a type: struct fields are handled by the callers."""
    if isinstance(t, dict):
        if t.get("type") == "array":
            yield "elementType", t["elementType"]
        elif t.get("type") == "map":
            yield "keyType", t["keyType"]
            yield "valueType", t["valueType"]


def _map_type(t: Any, on_field) -> Any:
    if not isinstance(t, dict):
        return t
    if t.get("type") == "struct":
        return {**t, "fields": [on_field(f) for f in t["fields"]]}
    out = dict(t)
    for slot, inner in _struct_children(t):
        out[slot] = _map_type(inner, on_field)
    return out


def physical_schema(schema_json: dict[str, Any], mode: str) -> dict[str, Any]:
    """The schema data files are written and read with: physical names at every depth; in `id` mode
    each field also carries its id where Spark's Parquet writer and reader look for it."""
    if mode not in ("name", "id"):
        return schema_json

    def on_field(f: dict[str, Any]) -> dict[str, Any]:
        metadata = {k: v for k, v in (f.get("metadata") or {}).items() if not k.startswith("delta.")}
        if mode == "id" and field_id(f) is not None:
            metadata[SPARK_FIELD_ID] = field_id(f)
        return {**f, "name": physical_name(f), "type": _map_type(f["type"], on_field), "metadata": metadata}

    return _map_type(schema_json, on_field)


def physical_path(schema_json: dict[str, Any], path: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The physical names of a path of logical struct field names (as stats keys nest them); names
    match ignoring case, as Delta's column names do."""
    out, fields = [], schema_json.get("fields", [])
    for name in path:
        f = next((f for f in fields if f["name"] == name), None) \
            or next((f for f in fields if f["name"].lower() == name.lower()), None)
        if f is None:
            return tuple(out) + tuple(path[len(out):])
        out.append(physical_name(f))
        t = f["type"]
        fields = t.get("fields", []) if isinstance(t, dict) and t.get("type") == "struct" else []
    return tuple(out)


def physical_stats_configuration(schema_json: dict[str, Any], configuration: dict[str, str]) -> dict[str, str]:
    """The configuration to collect stats over the physical schema with: `delta.dataSkippingStatsColumns`
    names logical columns (matched ignoring case), the files and their stats physical ones."""
    from .stats import STATS_COLUMNS_KEY, parse_stats_columns

    listed = configuration.get(STATS_COLUMNS_KEY)
    if not listed or not is_mapped(configuration):
        return configuration
    physical = [".".join("`" + p.replace("`", "``") + "`" for p in physical_path(schema_json, path))
                for path in parse_stats_columns(listed)]
    return {**configuration, STATS_COLUMNS_KEY: ",".join(physical)}


def physical_names(schema_json: dict[str, Any], configuration: dict[str, str] | None) -> dict[str, str]:
    """Top-level logical name -> the name files, stats and partition values use for it."""
    mapped = is_mapped(configuration)
    return {f["name"]: physical_name(f) if mapped else f["name"] for f in schema_json.get("fields", [])}


def logical_partition_values(files: pa.Table, schema_json: dict[str, Any],
                             configuration: dict[str, str] | None) -> pa.Table:
    """`files` (rows of a snapshot's files) with partition values keyed by logical names."""
    if not is_mapped(configuration) or "partition_values" not in files.column_names:
        return files
    to_logical = {p: n for n, p in physical_names(schema_json, configuration).items()}
    column = files.column("partition_values")
    values = [None if pv is None else [(to_logical.get(k, k), v) for k, v in pv] for pv in column.to_pylist()]
    index = files.column_names.index("partition_values")
    return files.set_column(index, files.field(index), pa.array(values, column.type))


# ------------------------------------------------------------------------------------- writing

def new_physical_name() -> str:
    return f"col-{uuid.uuid4()}"


def max_column_id(schema_json: dict[str, Any]) -> int:
    best = 0

    def on_field(f: dict[str, Any]) -> dict[str, Any]:
        nonlocal best
        nested = (f.get("metadata") or {}).get(NESTED_IDS) or {}
        best = max(best, field_id(f) or 0, *[int(v) for v in nested.values()])
        _map_type(f["type"], on_field)
        return f

    _map_type(schema_json, on_field)
    return best


def assign(schema_json: dict[str, Any], configuration: dict[str, str], keep_names: bool = False
           ) -> tuple[dict[str, Any], dict[str, str]]:
    """(schema, configuration) with an id and a physical name on every field that lacks them, and the
    new `maxColumnId`. New fields get `col-<uuid>` names (never a name an old file could hold), or,
    with `keep_names` (turning mapping on for an existing table), their current names, so the files
    already written keep reading. Under IcebergCompat, array elements and map keys and values get ids
    too (`nested.ids` on the field above them), as Iceberg gives every nested type its own."""
    counter = max(int((configuration or {}).get(MAX_ID) or 0), max_column_id(schema_json))
    nested_ids = any(str((configuration or {}).get(key, "")).lower() == "true" for key in ICEBERG_COMPAT_KEYS)

    def on_field(f: dict[str, Any]) -> dict[str, Any]:
        nonlocal counter
        metadata = dict(f.get("metadata") or {})
        if metadata.get(ID) is None:
            counter += 1
            metadata[ID] = counter
        if not metadata.get(PHYSICAL_NAME):
            metadata[PHYSICAL_NAME] = f["name"] if keep_names else new_physical_name()
        if nested_ids:
            ids = dict(metadata.get(NESTED_IDS) or {})
            for path in _nested_paths(f["type"], metadata[PHYSICAL_NAME]):
                if path not in ids:
                    counter += 1
                    ids[path] = counter
            if ids:
                metadata[NESTED_IDS] = ids
        return {**f, "metadata": metadata, "type": _map_type(f["type"], on_field)}

    schema = _map_type(copy.deepcopy(schema_json), on_field)
    return schema, {**(configuration or {}), MAX_ID: str(counter)}


def _nested_paths(t: Any, path: str) -> list[str]:
    """`<path>.element`, `.key`, `.value` (and deeper) of the arrays and maps directly in `t`, down to
    the next struct (whose fields carry their own)."""
    if not isinstance(t, dict) or t.get("type") == "struct":
        return []
    if t.get("type") == "array":
        return [f"{path}.element", *_nested_paths(t["elementType"], f"{path}.element")]
    if t.get("type") == "map":
        return [f"{path}.key", *_nested_paths(t["keyType"], f"{path}.key"),
                f"{path}.value", *_nested_paths(t["valueType"], f"{path}.value")]
    return []


def carry_over(old_schema: dict[str, Any], new_schema: dict[str, Any]) -> dict[str, Any]:
    """`new_schema` with the id and physical name of every field that `old_schema` has at the same
    logical path (case-insensitive), so a write that restates the schema keeps the mapping."""
    def merge(old_t: Any, new_t: Any) -> Any:
        if not (isinstance(old_t, dict) and isinstance(new_t, dict) and old_t.get("type") == new_t.get("type")):
            return new_t
        if new_t.get("type") == "struct":
            old = {f["name"].lower(): f for f in old_t["fields"]}
            fields = []
            for f in new_t["fields"]:
                o = old.get(f["name"].lower())
                if o is None:
                    fields.append(f)
                    continue
                keep = {k: v for k, v in (o.get("metadata") or {}).items() if k in (ID, PHYSICAL_NAME, NESTED_IDS)}
                fields.append({**f, "metadata": {**(f.get("metadata") or {}), **keep}, "type": merge(o["type"], f["type"])})
            return {**new_t, "fields": fields}
        out = dict(new_t)
        for slot, inner in _struct_children(new_t):
            out[slot] = merge(old_t.get(slot), inner)
        return out

    return merge(old_schema, new_schema)


# ------------------------------------------------------------------------------- reading (Arrow)

def _file_child(parent: pa.DataType, field: dict[str, Any], mode: str) -> int:
    """Index of the child of a Parquet struct (or the file's schema) that holds `field`, or -1."""
    fields = list(parent)
    if mode == "id" and field_id(field) is not None:
        for i, f in enumerate(fields):
            if f.metadata and f.metadata.get(ARROW_FIELD_ID) is not None \
                    and int(f.metadata[ARROW_FIELD_ID]) == field_id(field):
                return i
    name = physical_name(field) if mode in ("name", "id") else field["name"]
    for i, f in enumerate(fields):
        if f.name == name:
            return i
    return -1


def logical_array(array: pa.Array, file_type: pa.DataType, delta_type: Any, mode: str) -> pa.Array:
    """One column of a data file (physical names or ids) as the table's logical type: nested fields
    found by id or physical name and renamed, fields the file lacks as nulls, leaves cast."""
    from .schema import type_to_arrow

    if isinstance(delta_type, dict) and delta_type.get("type") == "struct" and pa.types.is_struct(file_type):
        children, fields = [], []
        for f in delta_type["fields"]:
            i = _file_child(file_type, f, mode)
            t = type_to_arrow(f["type"])
            if i < 0:
                child = pa.nulls(len(array), t)
            else:
                child = logical_array(array.field(i), file_type.field(i).type, f["type"], mode)
            children.append(child)
            fields.append(pa.field(f["name"], child.type, True))
        return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
    if isinstance(delta_type, dict) and delta_type.get("type") == "array" and (
            pa.types.is_list(file_type) or pa.types.is_large_list(file_type)):
        values = logical_array(array.values, file_type.value_type, delta_type["elementType"], mode)
        return pa.ListArray.from_arrays(array.offsets, values, mask=array.is_null())
    if isinstance(delta_type, dict) and delta_type.get("type") == "map" and pa.types.is_map(file_type):
        keys = logical_array(array.keys, file_type.key_type, delta_type["keyType"], mode)
        items = logical_array(array.items, file_type.item_type, delta_type["valueType"], mode)
        return pa.MapArray.from_arrays(array.offsets, keys, items, mask=array.is_null())
    return array.cast(type_to_arrow(delta_type))


def logical_column(data: pa.Table, field: dict[str, Any], mode: str) -> pa.ChunkedArray | None:
    """The column of a data file's table that holds the table column `field`, in its logical type; None
    when the file lacks it."""
    i = _file_child(data.schema, field, mode)
    if i < 0:
        return None
    column = data.column(i)
    file_type = data.schema.field(i).type
    chunks = [logical_array(c, file_type, field["type"], mode) for c in column.chunks]
    from .schema import type_to_arrow
    return pa.chunked_array(chunks, type=chunks[0].type if chunks else type_to_arrow(field["type"]))


# ----------------------------------------------------------------------------- table metadata

class ColumnMappingError(ValueError):
    pass


def mapped_metadata(schema_json: dict[str, Any], configuration: dict[str, str],
                    current_schema: dict[str, Any] | None, current_configuration: dict[str, str] | None,
                    table: str, replacing: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """(schema, configuration) a commit writes under column mapping: the mapping of every column the
    table already has is kept (writers may restate the schema without it), new columns get a new id
    and a `col-<uuid>` physical name. Turning `name` mode on for an existing table keeps its columns'
    current names as physical names (no file is rewritten). Other mode changes are refused, unless the
    commit is `replacing` every file of the table (then the mapping starts afresh)."""
    mode = mode_of(configuration)
    if mode not in MODES:
        raise ColumnMappingError(f"{table}: {MODE}={configuration.get(MODE)!r} is not allowed. Allowed: "
                                 f"{', '.join(MODES)}.")
    old = mode_of(current_configuration) if current_schema is not None else None
    if replacing and old != mode:
        current_schema, old = None, None
    if old is not None and old != mode and not (old == "none" and mode == "name"):
        raise ColumnMappingError(
            f"{table}: {MODE} cannot change from {old!r} to {mode!r} on an existing table (only 'none' to "
            f"'name' is an upgrade). Rebuild the table (a full refresh) to change it.")
    if mode == "none":
        return schema_json, configuration
    if current_schema is not None:
        if old == "none":
            # the columns files already hold keep their names as physical names
            current_schema, _ = assign(current_schema, {}, keep_names=True)
        schema_json = carry_over(current_schema, schema_json)
        configuration = {**configuration, MAX_ID: str(max(int(configuration.get(MAX_ID) or 0),
                                                          max_column_id(current_schema)))}
    return assign(schema_json, configuration)


def with_arrow_field_ids(schema: pa.Schema, physical_json: dict[str, Any]) -> pa.Schema:
    """`schema` (a data file's, in the order of `physical_json`, the physical schema in `id` mode) with
    each field's Parquet field id where pyarrow's writer looks for it."""
    def with_ids(t: pa.DataType, d: Any) -> pa.DataType:
        if pa.types.is_struct(t) and isinstance(d, dict) and d.get("type") == "struct":
            by_name = {f["name"]: f for f in d["fields"]}
            return pa.struct([field(t.field(i), by_name.get(t.field(i).name)) for i in range(t.num_fields)])
        if pa.types.is_list(t) and isinstance(d, dict) and d.get("type") == "array":
            return pa.list_(t.value_field.with_type(with_ids(t.value_type, d["elementType"])))
        if pa.types.is_map(t) and isinstance(d, dict) and d.get("type") == "map":
            return pa.map_(t.key_field.with_type(with_ids(t.key_type, d["keyType"])),
                           t.item_field.with_type(with_ids(t.item_type, d["valueType"])))
        return t

    def field(f: pa.Field, d: dict[str, Any] | None) -> pa.Field:
        if d is None:
            return f
        f = f.with_type(with_ids(f.type, d["type"]))
        ident = (d.get("metadata") or {}).get(SPARK_FIELD_ID)
        if ident is None:
            return f
        return f.with_metadata({**(f.metadata or {}), ARROW_FIELD_ID: str(ident).encode()})

    by_name = {f["name"]: f for f in physical_json["fields"]}
    return pa.schema([field(f, by_name.get(f.name)) for f in schema], metadata=schema.metadata)
