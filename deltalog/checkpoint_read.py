"""Reading checkpoints: `_last_checkpoint`, and a checkpoint (classic single- or multi-part Parquet, or a v2
manifest with its sidecars) into the state the snapshot's replay starts from.

Only the columns the snapshot keeps are read, and they come back already in the snapshot's columnar layout
(`FILES_SCHEMA`, `TOMBSTONES_SCHEMA`), so a checkpoint of 100,000 files never turns into 100,000 Python
objects. Nothing here knows `Snapshot`: a snapshot loads through this module, and `checkpoint_write`, which
takes one, is above both.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import log_json
from .errors import CorruptLogError
from .file_actions import (DELETION_VECTOR, FILES_SCHEMA, TOMBSTONES_SCHEMA, FileActionTypeError, files_table,
                           removes_table)
from .stats import stats_json_from_parsed
from .storage.log_store import LAST_CHECKPOINT, LogFile, LogStore

log = logging.getLogger(__name__)

# The file action fields a checkpoint holds: log name -> snapshot column name (`FILES_SCHEMA`,
# `TOMBSTONES_SCHEMA`); the writer writes them back under their log names.
ADD_COLUMNS = {"path": "path", "partitionValues": "partition_values", "size": "size",
               "modificationTime": "modification_time", "dataChange": "data_change", "stats": "stats",
               "tags": "tags", "deletionVector": "deletion_vector", "baseRowId": "base_row_id",
               "defaultRowCommitVersion": "default_row_commit_version"}
REMOVE_COLUMNS = {"path": "path", "deletionTimestamp": "deletion_timestamp", "size": "size",
                  "dataChange": "data_change", "partitionValues": "partition_values",
                  "deletionVector": "deletion_vector", "baseRowId": "base_row_id",
                  "defaultRowCommitVersion": "default_row_commit_version"}


def read_last_checkpoint(store: LogStore) -> dict[str, Any] | None:
    """`_last_checkpoint`, or None when absent, half-written or corrupt (the caller then lists)."""
    try:
        data = store.read(LAST_CHECKPOINT)
        obj = log_json.loads(data)
        if not isinstance(obj, dict) or not isinstance(obj.get("version"), int) or obj["version"] < 0:
            raise ValueError("no version")
        return obj
    except (FileNotFoundError, NotADirectoryError):  # no log folder, or the path is a file
        return None
    except (ValueError, UnicodeDecodeError) as e:
        log.warning("%s/_delta_log/_last_checkpoint is unreadable (%s); listing the log instead",
                    store.table_uri, e)
        return None


@dataclass
class CheckpointState:
    """What one checkpoint holds, in the snapshot's layout."""
    version: int
    files: pa.Table
    tombstones: pa.Table
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    txns: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    domains: dict[str, dict[str, Any]] = field(default_factory=dict)


def _project(path: str | pa.Buffer | pa.Table, top: pa.Schema, struct: str, wanted: dict[str, str],
             schema: pa.Schema, table_schema: dict[str, Any] | None = None) -> pa.Table:
    """Rows of one action column (e.g. `add`) as a flat table in `schema`, reading only the leaves
    in `wanted` (log name -> our name) that the file has. With `table_schema`, stats that the file
    keeps only as `stats_parsed` structs become `stats` JSON."""
    if struct not in top.names:
        return schema.empty_table()
    present = {f.name for f in top.field(struct).type}
    if "path" not in present:
        return schema.empty_table()
    names = [n for n in wanted if n in present]
    if table_schema is not None and "stats_parsed" in present:
        names.append("stats_parsed")
    t = _read_leaves(path, struct, names)
    t = _rows_with(t, t.column("path").is_valid())  # an action always has a path
    arrays = []
    for log_name, our_name in wanted.items():
        target = schema.field(our_name).type
        if log_name not in names:
            arrays.append(pa.nulls(t.num_rows, target))
            continue
        col = t.column(names.index(log_name))
        if our_name == "deletion_vector":
            col = pa.chunked_array([_deletion_vectors(c) for c in col.chunks], type=target)
        arrays.append(col.cast(target) if col.type != target else col)
    if "stats_parsed" in names and "stats" in wanted:
        i = list(wanted).index("stats")
        arrays[i] = _stats_with_parsed(arrays[i], t.column(names.index("stats_parsed")), table_schema)
    return pa.Table.from_arrays(arrays, schema=schema)


def _stats_with_parsed(stats: pa.ChunkedArray, parsed: pa.ChunkedArray,
                       table_schema: dict[str, Any]) -> pa.ChunkedArray:
    """`stats`, with each missing JSON taken from the row's `stats_parsed` (Databricks and
    delta-kernel write struct-only stats when `delta.checkpoint.writeStatsAsJson` is false)."""
    missing = pc.and_(stats.is_null(), parsed.is_valid())
    if not pc.any(missing).as_py():
        return stats
    texts = stats.to_pylist()
    for i in pc.indices_nonzero(missing).to_pylist():
        texts[i] = stats_json_from_parsed(parsed[i].as_py(), table_schema)
    return pa.chunked_array([pa.array(texts, pa.string())])


def _rows_with(table: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
    """table.filter(mask), but a zero-copy slice when the selected rows are contiguous (always so in
    checkpoints written here: all adds, then all removes)."""
    idx = pc.indices_nonzero(mask)
    if len(idx) == 0:
        return table.slice(0, 0)
    first, last = idx[0].as_py(), idx[-1].as_py()
    if last - first + 1 == len(idx):
        return table.slice(first, len(idx))
    return table.take(idx)


def _deletion_vectors(chunk: pa.StructArray) -> pa.Array:
    """The checkpoint's deletionVector struct reduced to the fields the snapshot keeps."""
    have = {x.name for x in chunk.type}
    fields = [chunk.field(f.name).cast(f.type) if f.name in have else pa.nulls(len(chunk), f.type)
              for f in DELETION_VECTOR]
    return pa.StructArray.from_arrays(fields, fields=list(DELETION_VECTOR),
                                      mask=pc.invert(chunk.is_valid()))


def _non_null_rows(small: pa.Table, column: str) -> list[dict[str, Any]]:
    if column not in small.column_names:
        return []
    col = small.column(column)
    return col.filter(col.is_valid()).to_pylist()


def _map_to_dict(value: Any) -> dict:
    if value is None:
        return {}
    return dict(value) if isinstance(value, list) else value


_SMALL_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata")


# Below this many rows a checkpoint is read whole, once, through ParquetFile (0.6 ms here) rather than
# column by column through read_table's dataset machinery (1.7 ms a read): the fixed costs dominate the
# snapshot load of a stream's small tables.
_SMALL_CHECKPOINT_ROWS = 50_000


def _read_leaves(source: str | pa.Buffer | pa.Table, struct: str, names: list[str]) -> pa.Table:
    """The leaves `names` of one action column, flat, in that order (rows without the action: nulls).
    `source`: a checkpoint file, or a small one already read whole."""
    columns = [f"{struct}.{n}" for n in names]
    if isinstance(source, pa.Table):
        column = source.column(struct)
    else:
        parquet = pq.ParquetFile(_source(source))
        if parquet.metadata.num_rows > _SMALL_CHECKPOINT_ROWS:
            # read_table returns projected leaves flat (faster on large files than ParquetFile.read, which
            # rebuilds the struct)
            return pq.read_table(_source(source), columns=columns)
        column = parquet.read(columns=columns, use_threads=False).column(struct)
    fields = [f.name for f in column.type]
    chunks = [chunk.flatten() for chunk in column.chunks]  # (the parent's nulls carried into each leaf)
    return pa.table({n: pa.chunked_array([c[fields.index(n)] for c in chunks], type=column.type.field(n).type)
                     for n in names})


def _source(path: str | pa.Buffer) -> Any:
    """What pyarrow reads: a local path, or a fresh reader over a checkpoint's bytes (read once)."""
    return path if isinstance(path, str) else pa.BufferReader(path)


def _schema_of(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema stats are keyed by: the table's, with physical names under column mapping."""
    from .column_mapping import mode_of, physical_schema
    try:
        schema = json.loads(metadata["schemaString"]) if metadata else None
    except (KeyError, TypeError, ValueError):
        return None
    return physical_schema(schema, mode_of(metadata.get("configuration"))) if schema else None


def read_checkpoint(store: LogStore, parts: list[LogFile]) -> CheckpointState:
    """Read a checkpoint: classic single- or multi-part Parquet, or a v2 checkpoint (a JSON or Parquet
    manifest whose `sidecar` actions name Parquet files under `_delta_log/_sidecars` holding the file
    actions). Raises CorruptLogError naming the file when one cannot be read as a checkpoint."""
    state = CheckpointState(parts[0].version or 0, FILES_SCHEMA.empty_table(),
                            TOMBSTONES_SCHEMA.empty_table())
    with_file_actions: list[tuple[str, Any, pa.Schema]] = []  # (where, parquet source, its schema)
    inline: list[tuple[str, dict[str, Any]]] = []  # file actions of a JSON manifest
    for part in parts:
        source = f"{store.table_uri}/_delta_log/{part.name}"
        try:
            if part.name.endswith(".json"):
                sidecars = _read_json_manifest(store.read(part.name), state, inline)
            else:
                path = store.parquet_source(part.name)
                parquet = pq.ParquetFile(_source(path))
                top = parquet.schema_arrow
                wanted = [c for c in _SMALL_COLUMNS + ("sidecar",) if c in top.names]
                if parquet.metadata.num_rows <= _SMALL_CHECKPOINT_ROWS:
                    path = parquet.read(use_threads=False)  # every action column at once
                    small = path.select(wanted)
                else:
                    small = parquet.read(columns=wanted, use_threads=False)
                _apply_non_file_actions(state, small)
                with_file_actions.append((source, path, top))
                sidecars = _non_null_rows(small, "sidecar")
        except (OSError, pa.ArrowException, KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptLogError(f"{source}: not a readable checkpoint ({e})") from None
        for sidecar in sidecars:
            try:
                name = _sidecar_name(sidecar.get("path") if isinstance(sidecar, dict) else None)
            except ValueError as e:
                raise CorruptLogError(f"{source}: {e}") from None
            where = f"{store.table_uri}/_delta_log/{name} (a sidecar of {part.name})"
            try:
                path = store.parquet_source(name)
                with_file_actions.append((where, path, pq.read_schema(_source(path))))
            except (OSError, pa.ArrowException, ValueError) as e:
                raise CorruptLogError(f"{where}: not readable ({e})") from None
    # the table schema (from whichever part holds metaData) turns struct-only stats into JSON
    try:
        table_schema = _schema_of(state.metadata)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptLogError(f"{store.table_uri}: the checkpoint's metaData has an unreadable schema ({e})") from None
    files, tombstones = [], []
    for source, path, top in with_file_actions:
        try:
            files.append(_project(path, top, "add", ADD_COLUMNS, FILES_SCHEMA, table_schema))
            tombstones.append(_project(path, top, "remove", REMOVE_COLUMNS, TOMBSTONES_SCHEMA))
            # Parquet readers do not check that strings are UTF-8; a corrupt one would fail much later
            files[-1].validate(full=True)
            tombstones[-1].validate(full=True)
        except (OSError, pa.ArrowException, KeyError, TypeError, ValueError) as e:
            raise CorruptLogError(f"{source}: not a readable checkpoint ({e})") from None
    if inline:
        manifest = next(p.name for p in parts if p.name.endswith(".json"))  # a JSON manifest is one part
        try:
            files.append(files_table([a for k, a in inline if k == "add"]))
            tombstones.append(removes_table([r for k, r in inline if k == "remove"]))
        except (FileActionTypeError, pa.ArrowException, TypeError, ValueError) as e:
            raise CorruptLogError(f"{store.table_uri}/_delta_log/{manifest}: not a readable checkpoint ({e})") from None
    state.files = pa.concat_tables(files) if files else state.files
    state.tombstones = pa.concat_tables(tombstones) if tombstones else state.tombstones
    return state


def _apply_non_file_actions(state: CheckpointState, small: pa.Table) -> None:
    """ValueError when an action has a field of another type than the protocol gives it."""
    from .actions import check_action_fields

    for p in _non_null_rows(small, "protocol"):
        check_action_fields("protocol", p)
        state.protocol = p
    for m in _non_null_rows(small, "metaData"):
        m["configuration"] = _map_to_dict(m.get("configuration"))
        fmt = m.get("format") or {}
        fmt["options"] = _map_to_dict(fmt.get("options"))
        m["format"] = fmt
        check_action_fields("metaData", m)
        state.metadata = m
    for t in _non_null_rows(small, "txn"):
        check_action_fields("txn", t)
        state.txns[t["appId"]] = (t["version"], t.get("lastUpdated"))
    for d in _non_null_rows(small, "domainMetadata"):
        check_action_fields("domainMetadata", d)
        state.domains[d["domain"]] = d


def _read_json_manifest(data: bytes, state: CheckpointState, inline: list) -> list[dict[str, Any]]:
    """Apply a JSON v2 checkpoint's non-file actions to `state`, collect its file actions in `inline`;
    returns its sidecar actions."""
    from .actions import check_action_fields

    sidecars = []
    for line in data.splitlines():
        if not line.strip():
            continue
        obj = log_json.loads(line)
        if not isinstance(obj, dict) or len(obj) != 1:
            raise ValueError(f"a line of the manifest is not one action: {line[:80]!r}")
        key, value = next(iter(obj.items()))
        check_action_fields(key, value)
        if key == "protocol":
            state.protocol = value
        elif key == "metaData":
            state.metadata = value
        elif key == "txn":
            state.txns[value["appId"]] = (value["version"], value.get("lastUpdated"))
        elif key == "domainMetadata":
            state.domains[value["domain"]] = value
        elif key == "sidecar":
            sidecars.append(value)
        elif key in ("add", "remove"):
            inline.append((key, value))
    return sidecars


def _sidecar_name(path: str) -> str:
    """The log-relative name of a sidecar file: its path is relative to `_delta_log/_sidecars`."""
    from urllib.parse import unquote

    if not isinstance(path, str) or "://" in path or path.startswith("/"):
        raise ValueError(f"sidecar path {path!r} is not relative; only sidecars under _delta_log/_sidecars are read")
    name = unquote(path)
    if ".." in name.replace("\\", "/").split("/"):
        raise ValueError(f"sidecar path {path!r} leaves _delta_log/_sidecars; only sidecars under it are read")
    return "_sidecars/" + name
