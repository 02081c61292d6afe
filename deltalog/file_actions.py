"""File actions (add, remove, cdc) as the snapshot's Arrow columns (`FILES_SCHEMA`, `TOMBSTONES_SCHEMA`).

Two ways in, one result: `files_table` converts action dicts (what orjson parsed, or what a writer
made), and `adds_from_json` parses many add lines at once with Arrow's JSON reader, which is what makes
loading a log of hundreds of thousands of adds fast. The JSON reader checks every field's type as it
parses; what it cannot decide the same way as `files_table` (a partition value or tag that is not a
string, a null tag, an absent partitionValues) makes it return None, and the caller reads those lines
as dicts, so that one rule set decides and the bad line is named.
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

STRING_MAP = pa.map_(pa.string(), pa.string())
DELETION_VECTOR = pa.struct([
    ("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
    ("sizeInBytes", pa.int32()), ("cardinality", pa.int64()),
])

# The snapshot's columnar state: live files and unexpired tombstones.
FILES_SCHEMA = pa.schema([
    ("path", pa.string()), ("partition_values", STRING_MAP), ("size", pa.int64()),
    ("modification_time", pa.int64()), ("data_change", pa.bool_()), ("stats", pa.string()),
    ("tags", STRING_MAP), ("deletion_vector", DELETION_VECTOR),
    # row tracking (see row_tracking)
    ("base_row_id", pa.int64()), ("default_row_commit_version", pa.int64()),
])
TOMBSTONES_SCHEMA = pa.schema([
    ("path", pa.string()), ("deletion_timestamp", pa.int64()), ("size", pa.int64()),
    ("data_change", pa.bool_()), ("partition_values", STRING_MAP),
    # a tombstone is (path, DV): the DV file stays needed while the tombstone is retained
    ("deletion_vector", DELETION_VECTOR),
    ("base_row_id", pa.int64()), ("default_row_commit_version", pa.int64()),
])

# File actions as the log spells them. Converting the action dicts to this type in one call checks every
# field's JSON type on the way (a string where a number belongs, an array for a map: ArrowException).
_FILE_ACTION = pa.struct([
    ("path", pa.string()), ("partitionValues", STRING_MAP), ("size", pa.int64()),
    ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("stats", pa.string()),
    ("tags", STRING_MAP), ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()), ("defaultRowCommitVersion", pa.int64()),
])

# The same for the JSON reader, which cannot parse an object into a map: the two maps are read as
# structs whose fields it infers (one per key seen) and turned into maps afterwards.
_ADD_LINES = pa.schema([("add", pa.struct([
    pa.field("partitionValues", pa.struct([])) if f.name == "partitionValues" else
    pa.field("tags", pa.struct([])) if f.name == "tags" else f for f in _FILE_ACTION]))])

_DV_REQUIRED = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")

# A line the JSON reader reads: one add action, written the way every writer writes it.
ADD_LINE_PREFIX = b'{"add":'


class FileActionTypeError(ValueError):
    """A file action whose fields do not have the protocol's types (`files_table` says no more)."""


def files_table(actions: list[dict]) -> pa.Table:
    """File actions (add, remove or cdc dicts as the log spells them) in the snapshot's FILES_SCHEMA;
    FileActionTypeError when one is not an object, lacks its path or has a field of another type."""
    if not actions:
        return FILES_SCHEMA.empty_table()
    try:
        parsed = pa.array(actions, _FILE_ACTION)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as e:
        raise FileActionTypeError(str(e)) from None
    path, tags = parsed.field("path"), parsed.field("tags")
    if parsed.null_count or path.null_count or tags.items.null_count:
        raise FileActionTypeError("a file action that is not an object, has no path, or a null tag")
    return _table(parsed, _empty_where_null(parsed.field("partitionValues")), tags,
                  parsed.field("deletionVector"))


def adds_from_json(lines: bytes) -> pa.Table | None:
    """The add actions of `lines` (JSON, one add per line, each starting with ADD_LINE_PREFIX) in
    FILES_SCHEMA, or None where `files_table` must decide (see the module's docstring)."""
    try:
        read = pj.read_json(io.BytesIO(lines), parse_options=pj.ParseOptions(
            explicit_schema=_ADD_LINES, unexpected_field_behavior="infer"))
    except pa.ArrowException:  # a field of another type, a line too long for a block, not JSON: as dicts
        return None
    adds = read.column("add").combine_chunks() if read.num_rows else None
    if adds is None or adds.null_count or adds.field("path").null_count:
        return None
    values, tags = adds.field("partitionValues"), adds.field("tags")
    if values.null_count:  # absent: files_table reads it as no values, here it would be all-null values
        return None
    partition_values = _struct_to_map(values, nulls_allowed=True)
    tags = _struct_to_map(tags, nulls_allowed=False)
    if partition_values is None or tags is None:
        return None
    dv = adds.field("deletionVector")
    if dv.type != DELETION_VECTOR:  # fields beyond the protocol's, inferred: dropped, as files_table does
        dv = pa.StructArray.from_arrays([dv.field(f.name) for f in DELETION_VECTOR],
                                        fields=list(DELETION_VECTOR), mask=dv.is_null())
    try:
        return _table(adds, partition_values, tags, dv)
    except FileActionTypeError:
        return None


def _table(actions: pa.StructArray, partition_values: pa.MapArray, tags: pa.MapArray,
           deletion_vector: pa.StructArray) -> pa.Table:
    # A deletion vector lacking a field the protocol requires (Arrow also reads a JSON array as a struct)
    fields = dict(zip((f.name for f in deletion_vector.type), deletion_vector.flatten()))  # null where it is
    if any(fields[name].null_count > deletion_vector.null_count for name in _DV_REQUIRED):
        raise FileActionTypeError("a deletionVector without storageType, pathOrInlineDv, sizeInBytes or "
                                  "cardinality")
    return pa.Table.from_arrays([
        actions.field("path"),
        partition_values,
        pc.fill_null(actions.field("size"), 0),
        pc.fill_null(actions.field("modificationTime"), 0),
        pc.fill_null(actions.field("dataChange"), True),
        actions.field("stats"),
        tags,
        deletion_vector,
        actions.field("baseRowId"),
        actions.field("defaultRowCommitVersion"),
    ], schema=FILES_SCHEMA)


def _struct_to_map(struct: pa.StructArray, nulls_allowed: bool) -> pa.MapArray | None:
    """The string map a JSON object was, from the struct the JSON reader inferred for it (one field per
    key seen in any row): a row's entries are its fields. Null where the object was absent. None where a
    value is not a string, or is null and `nulls_allowed` is off (absent from this row's object, or null
    in it: the struct cannot tell which, files_table can)."""
    names = [f.name for f in struct.type]
    if any(f.type not in (pa.string(), pa.null()) for f in struct.type):
        return None
    n, k = len(struct), len(names)
    valid = np.ones(n, bool) if not struct.null_count else struct.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(valid)
    children = [struct.field(i).cast(pa.string()) for i in range(k)]
    # field-major concatenation; the entries of row r are at r, n + r, 2n + r, ...
    take = (rows[:, None] + np.arange(k)[None, :] * n).ravel()
    items = pa.concat_arrays(children).take(pa.array(take)) if k else pa.array([], pa.string())
    if items.null_count and not nulls_allowed:
        return None
    keys = pa.array(names, pa.string()).take(pa.array(np.tile(np.arange(k), len(rows)))) if k else items
    ends = np.cumsum(np.where(valid, k, 0))
    offsets = pa.array(np.concatenate([[0], ends]).astype(np.int32),
                       mask=np.concatenate([~valid, [False]]) if struct.null_count else None)
    return pa.MapArray.from_arrays(offsets, keys, items, type=STRING_MAP)


def _empty_where_null(maps: pa.MapArray) -> pa.MapArray:
    """An absent partitionValues reads as no partition values (a null entry's offsets span nothing)."""
    return maps if not maps.null_count else pa.MapArray.from_arrays(maps.offsets, maps.keys, maps.items)

def _dv(d: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if d is None else {f.name: d.get(f.name) for f in DELETION_VECTOR}


def remove_deletion_vectors(removes: list[dict[str, Any]]) -> pa.Array | None:
    if not any(r.get("deletionVector") for r in removes):
        return None
    return pa.array([_dv(r.get("deletionVector")) for r in removes], DELETION_VECTOR)


def removes_table(removes: list[dict[str, Any]]) -> pa.Table:
    if not removes:
        return TOMBSTONES_SCHEMA.empty_table()
    return pa.Table.from_arrays([
        pa.array([r["path"] for r in removes], pa.string()),
        pa.array([r.get("deletionTimestamp") or 0 for r in removes], pa.int64()),
        pa.array([r.get("size") for r in removes], pa.int64()),
        pa.array([r.get("dataChange", True) for r in removes], pa.bool_()),
        pa.array([r.get("partitionValues") for r in removes], STRING_MAP),
        pa.array([_dv(r.get("deletionVector")) for r in removes], DELETION_VECTOR),
        pa.array([r.get("baseRowId") for r in removes], pa.int64()),
        pa.array([r.get("defaultRowCommitVersion") for r in removes], pa.int64()),
    ], schema=TOMBSTONES_SCHEMA)
