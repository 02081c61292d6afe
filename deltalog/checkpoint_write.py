"""Writing checkpoints: the table state of a snapshot as one Parquet file, one row per action, then
`_last_checkpoint` naming it; and when one is due.

The file follows the protocol's checkpoint schema (nullable struct columns `txn`, `add`, `remove`,
`metaData`, `protocol`, `domainMetadata`, and `checkpointMetadata` on a v2Checkpoint table), read back by
`checkpoint_read` and by every other Delta reader.
"""
from __future__ import annotations

import io
import json
import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from .checkpoint_read import ADD_COLUMNS, REMOVE_COLUMNS, read_last_checkpoint
from .file_actions import DELETION_VECTOR, STRING_MAP
from .storage.log_store import LAST_CHECKPOINT, LogStore

if TYPE_CHECKING:
    from .snapshot import Snapshot

log = logging.getLogger(__name__)

# The protocol's checkpoint schema, as written here.
CHECKPOINT_SCHEMA = pa.schema([
    ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
    ("add", pa.struct([
        ("path", pa.string()), ("partitionValues", STRING_MAP), ("size", pa.int64()),
        ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("tags", STRING_MAP),
        ("deletionVector", DELETION_VECTOR), ("stats", pa.string()),
        ("baseRowId", pa.int64()), ("defaultRowCommitVersion", pa.int64()),
    ])),
    ("remove", pa.struct([
        ("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()), ("partitionValues", STRING_MAP), ("size", pa.int64()),
        ("deletionVector", DELETION_VECTOR), ("baseRowId", pa.int64()), ("defaultRowCommitVersion", pa.int64()),
    ])),
    ("metaData", pa.struct([
        ("id", pa.string()), ("name", pa.string()), ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()), ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP), ("createdTime", pa.int64()),
    ])),
    ("protocol", pa.struct([
        ("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())), ("writerFeatures", pa.list_(pa.string())),
    ])),
    ("domainMetadata", pa.struct([("domain", pa.string()), ("configuration", pa.string()),
                                  ("removed", pa.bool_())])),
])

# A V2-spec checkpoint (the v2Checkpoint feature) also holds one `checkpointMetadata` row. Written here in
# the classic single-file name, which the protocol allows for either spec (never multi-part).
CHECKPOINT_METADATA = pa.field("checkpointMetadata", pa.struct([("version", pa.int64()), ("tags", STRING_MAP)]))


# Paths and stats are unique per row: dictionary-encoding them costs ~7x on write and ~10x on read
# (measured at 30,000 files), so only the repetitive partition values get dictionaries.
_PARQUET_OPTIONS = dict(
    compression="snappy",
    use_dictionary=["add.partitionValues.key_value.key", "add.partitionValues.key_value.value",
                    "remove.partitionValues.key_value.key", "remove.partitionValues.key_value.value"],
    write_statistics=False,
)


def checkpoint_name(version: int) -> str:
    return "%020d.checkpoint.parquet" % version


def should_checkpoint(version: int, interval: int) -> bool:
    """True when a checkpoint is due after committing `version`, every `interval` commits (the table's
    `TableConfiguration.checkpoint_interval`)."""
    return version > 0 and interval > 0 and version % interval == 0


def _file_actions_column(struct_type: pa.StructType, columns: dict[str, pa.Array], n: int) -> pa.Array:
    arrays = []
    for f in struct_type:
        arr = columns.get(f.name)
        if arr is None:
            arr = pa.nulls(n, f.type)
        elif arr.type != f.type:
            arr = arr.cast(f.type)
        arrays.append(arr)
    return pa.StructArray.from_arrays(arrays, fields=list(struct_type))


def _rows_table(column: str, struct_array: pa.Array, schema: pa.Schema = CHECKPOINT_SCHEMA) -> pa.Table:
    """A checkpoint table whose rows carry only `column`; every other action column is null."""
    n = len(struct_array)
    return pa.Table.from_arrays(
        [struct_array if f.name == column else pa.nulls(n, f.type) for f in schema], schema=schema)


def _add_columns_parsed(snapshot: "Snapshot", files: pa.Table) -> dict[str, pa.Array]:
    """`stats_parsed` and `partitionValues_parsed` of the live files, keyed by physical names as the
    JSON they come from is."""
    from .column_mapping import mode_of, physical_names, physical_schema
    from .paths import parse_partition_value
    from .schema import find_field, type_to_arrow
    from .stats import parsed_stats, parsed_stats_type

    schema = physical_schema(snapshot.schema_json, mode_of(snapshot.configuration))
    names = physical_names(snapshot.schema_json, snapshot.configuration)
    partitions = [names.get(c, c) for c in snapshot.partition_columns]
    out = {"stats_parsed": parsed_stats(files.column("stats").to_pylist(),
                                        parsed_stats_type(schema, partitions))}
    if partitions:
        types = {p: find_field(schema, p)["type"] for p in partitions}
        struct_type = pa.struct([pa.field(p, type_to_arrow(types[p])) for p in partitions])
        rows = [{p: parse_partition_value(dict(pv or []).get(p), types[p]) for p in partitions}
                for pv in files.column("partition_values").to_pylist()]
        out["partitionValues_parsed"] = pa.array(rows, type=struct_type)
    return out


def _single(column: str, value: dict[str, Any], schema: pa.Schema) -> pa.Table:
    return _rows_table(column, pa.array([value], type=schema.field(column).type), schema)


def checkpoint_table(snapshot: "Snapshot") -> pa.Table:
    """The checkpoint rows for a snapshot: protocol, metaData, txns, domain metadata, adds, removes."""
    md = snapshot.metadata
    schema = _checkpoint_schema(snapshot)
    parts = [
        _single("protocol", snapshot.protocol.to_dict(), schema),
        _single("metaData", {
            "id": md.id, "name": md.name, "description": md.description,
            "format": {"provider": md.format.provider, "options": dict(md.format.options)},
            "schemaString": md.schema_string, "partitionColumns": list(md.partition_columns),
            "configuration": dict(md.configuration), "createdTime": md.created_time,
        }, schema),
    ]
    if CHECKPOINT_METADATA.name in schema.names:
        parts.append(_single(CHECKPOINT_METADATA.name, {"version": snapshot.version, "tags": None}, schema))
    txns = [{"appId": k, "version": v, "lastUpdated": snapshot.app_transaction_updated.get(k)}
            for k, v in snapshot.app_transactions.items()]
    if txns:
        parts.append(_rows_table("txn", pa.array(txns, type=schema.field("txn").type), schema))
    domains = [d.to_dict() for d in snapshot.domain_metadata.values()]
    if domains:
        parts.append(_rows_table("domainMetadata",
                                 pa.array(domains, type=schema.field("domainMetadata").type), schema))
    files = snapshot.files
    as_json, as_struct = snapshot.table_configuration.checkpoint_stats
    if files.num_rows:
        cols = {log_name: files.column(col).combine_chunks() for log_name, col in ADD_COLUMNS.items()}
        if as_struct:
            cols.update(_add_columns_parsed(snapshot, files))
        if not as_json:
            del cols["stats"]
        parts.append(_rows_table("add", _file_actions_column(schema.field("add").type, cols, files.num_rows),
                                 schema))
    tomb = snapshot.tombstones
    if tomb.num_rows:
        cols = {log_name: tomb.column(col).combine_chunks() for log_name, col in REMOVE_COLUMNS.items()}
        cols["extendedFileMetadata"] = pa.array([True] * tomb.num_rows, pa.bool_())
        parts.append(_rows_table("remove", _file_actions_column(
            schema.field("remove").type, cols, tomb.num_rows), schema))
    return pa.concat_tables(parts)


def _checkpoint_schema(snapshot: "Snapshot") -> pa.Schema:
    """CHECKPOINT_SCHEMA, with `add.stats_parsed` (and `add.partitionValues_parsed` for a partitioned
    table) when the table asks for struct stats, and `checkpointMetadata` on a v2Checkpoint table."""
    schema = CHECKPOINT_SCHEMA
    if snapshot.protocol.has_writer_feature("v2Checkpoint"):
        schema = schema.append(CHECKPOINT_METADATA)
    if not snapshot.table_configuration.checkpoint_stats[1] or not snapshot.files.num_rows:
        return schema
    extra = _add_columns_parsed(snapshot, snapshot.files.slice(0, 0))
    add = schema.field("add")
    add_type = pa.struct(list(add.type) + [pa.field(k, v.type) for k, v in extra.items()])
    return schema.set(schema.get_field_index("add"), pa.field("add", add_type))


def write_checkpoint(store: LogStore, snapshot: "Snapshot") -> dict[str, Any]:
    """Write `<version>.checkpoint.parquet` for the snapshot, then `_last_checkpoint` (unless it
    already names a newer checkpoint); returns the `_last_checkpoint` content."""
    table = checkpoint_table(snapshot)
    buf = io.BytesIO()
    pq.write_table(table, buf, **_PARQUET_OPTIONS)
    data = buf.getvalue()
    # Atomic replace: a reader sees a whole checkpoint (old or new, both the same state), and a
    # corrupt checkpoint left at this version by a crashed writer gets repaired.
    store.write_atomic(checkpoint_name(snapshot.version), data)
    last = {"version": snapshot.version, "size": table.num_rows, "sizeInBytes": len(data),
            "numOfAddFiles": snapshot.num_files}
    current = read_last_checkpoint(store)
    if current is None or current.get("version", -1) <= snapshot.version:
        store.write_atomic(LAST_CHECKPOINT, json.dumps(last).encode())
    return last


def repair_last_checkpoint(store: LogStore, latest_version: int) -> bool:
    """Delete a `_last_checkpoint` that names a checkpoint the log does not hold, or a version past the
    latest (a log copied back, a crash mid-cleanup): readers that trust it, delta-rs among them, fail to
    load the table, and a later checkpoint at a lower version would never replace it. Without it readers
    list the log. Returns whether it acted."""
    current = read_last_checkpoint(store)
    if current is None:
        return False
    named = current["version"]
    if named <= latest_version and any(
            f.kind == "checkpoint" and f.version == named for f in store.list_from(named)):
        return False
    log.warning("%s/_delta_log/_last_checkpoint names version %d, which has no checkpoint (latest version "
                "%d); removing it so that readers list the log", store.table_uri, named, latest_version)
    store.delete(LAST_CHECKPOINT)
    return True
