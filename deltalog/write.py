"""`write_deltalake`: a pure-Arrow writer — Parquet data files plus one commit (tests, tools, small jobs).

Rows are grouped by partition values; each group becomes Parquet files under its Hive-escaped
`col=value/` folder with a fresh uuid name, partition columns left out of the files (Delta keeps them in
`partitionValues`, unless the table has the materializePartitionColumns feature). Each file gets an
`add` with statistics. The commit goes through `Transaction`, so concurrent writers are checked for
conflicts like any other writer. When anything fails before the commit lands, the data files this call
wrote are deleted again and the log is untouched.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from .actions import AddFile, Metadata, RemoveFile, now_ms
from . import identity
from .column_mapping import is_mapped, names_needing_mapping
from .errors import InvalidTableError, ProtocolChangedException, SchemaMismatchError, UnsupportedFeatureError
from .expressions import (
    Compare, Expr, In, IsNull, PartitionPredicate, bind, conjunction, inexact_on_partitions, parse_sql_predicate,
    prune,
)
from .paths import (
    encode_path, new_data_file_path, parse_partition_value, partition_folder,
    serialize_partition_value,
)
from .schema import from_arrow_schema, partition_column_types, schema_string, to_arrow_schema
from .write_plan import WritePlan
from .stats import StatsCollector
from .storage.log_store import LogStore
from .table import DeltaTable, new_metadata

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS_PER_FILE = 1_000_000
_DELTA_SPARK_MODE = {"error": "ErrorIfExists", "errorifexists": "ErrorIfExists", "append": "Append",
                     "overwrite": "Overwrite"}


# ------------------------------------------------------------------------------------ predicates

@dataclass(frozen=True)
class ReplaceWhere:
    """A replace-where predicate (skipping's expression model, as the Spark writer's) that decides
    exactly which partitions it replaces: only partition columns, literals of their types."""
    predicate: PartitionPredicate
    text: str

    def partitions_matching(self, files: pa.Table) -> list[bool]:
        """For each row of `files` (a `partition_values` map column), whether the predicate holds."""
        return prune(files, self.predicate.expr, self.predicate.schema_json, self.predicate.partition_columns,
                     dict(self.predicate.configuration)).to_pylist()


def replace_where(predicate: Any, metadata: Metadata, table: str) -> ReplaceWhere:
    """A predicate on partition columns: SQL text (`d >= '2024-01-01' AND region IN ('eu', 'us')`), a dict
    {column: value | [values] | None}, or an expression (`deltalog.expressions.col("d") >= ...`)."""
    parts = list(metadata.partition_columns)
    allowed = (f"Allowed: comparisons, IN, BETWEEN and IS [NOT] NULL tests of partition columns {parts} with "
               f"literals of their types, joined by AND / OR (e.g. \"d = '2024-01-01' AND region IN ('eu', "
               f"'us')\"), a dict {{column: value}}, or an expression from deltalog.expressions.")
    if isinstance(predicate, Expr):
        expr, text = predicate, predicate.to_sql()
    elif isinstance(predicate, dict):
        types = {c.lower(): t for c, t in partition_column_types(metadata.schema_json, parts, table).items()} \
            if parts else {}
        try:
            expr = conjunction([_condition(c, v, types.get(c.lower())) for c, v in predicate.items()])
        except (ValueError, TypeError) as e:
            raise InvalidTableError(f"{table}: predicate {predicate!r}: a value does not fit its column's type "
                                    f"({e}). {allowed}") from None
        text = expr.to_sql()
    elif isinstance(predicate, str):
        text = predicate
        try:
            expr = parse_sql_predicate(predicate, strict=True)
        except ValueError as e:
            raise InvalidTableError(f"{table}: predicate {predicate!r}: {e}. {allowed}") from None
    else:
        raise InvalidTableError(f"{table}: predicate must be SQL text, a dict or a skipping expression, not "
                                f"{type(predicate).__name__}. {allowed}")
    problems = inexact_on_partitions(expr, metadata.schema_json, parts)
    if problems:
        raise InvalidTableError(f"{table}: predicate {text!r}: {'; '.join(problems)}; this writer replaces "
                                f"whole partitions only. {allowed}")
    return ReplaceWhere(bind(expr, metadata.schema_json, parts, metadata.configuration), text)


def _condition(column: str, value: Any, delta_type: str | None) -> Expr:
    """One dict entry as an expression, its values read in the column's type (`1` for a string column is
    '1', a date's ISO text a date)."""
    if delta_type is None:  # not a partition column: inexact_on_partitions names it
        return Compare(column, "=", value)
    typed = [None if v is None else parse_partition_value(serialize_partition_value(v, delta_type), delta_type)
             for v in (value if isinstance(value, (list, tuple, set, frozenset)) else [value])]
    if not isinstance(value, (list, tuple, set, frozenset)):
        return IsNull(column) if typed[0] is None else Compare(column, "=", typed[0])
    return In(column, tuple(typed))


# ---------------------------------------------------------------------------------------- schemas

def _spelled_like(data_type: pa.DataType, target: pa.DataType) -> pa.DataType:
    """`data_type` with its struct fields named as `target` spells them (Delta matches names ignoring
    case): pyarrow casts structs by exact name, and would read a field spelled otherwise as NULL."""
    if pa.types.is_struct(data_type) and pa.types.is_struct(target):
        wanted = {target.field(i).name.lower(): target.field(i) for i in range(target.num_fields)}
        fields = []
        for i in range(data_type.num_fields):
            f = data_type.field(i)
            t = wanted.get(f.name.lower())
            fields.append(f if t is None else f.with_name(t.name).with_type(_spelled_like(f.type, t.type)))
        return pa.struct(fields)
    if (pa.types.is_list(data_type) or pa.types.is_large_list(data_type)) and (
            pa.types.is_list(target) or pa.types.is_large_list(target)):
        item = data_type.value_field.with_type(_spelled_like(data_type.value_type, target.value_type))
        return pa.large_list(item) if pa.types.is_large_list(data_type) else pa.list_(item)
    if pa.types.is_map(data_type) and pa.types.is_map(target):
        return pa.map_(data_type.key_field.with_type(_spelled_like(data_type.key_type, target.key_type)),
                       data_type.item_field.with_type(_spelled_like(data_type.item_type, target.item_type)),
                       data_type.keys_sorted)
    return data_type


def _conform(data: pa.Table, target: pa.Schema, table: str) -> pa.Table:
    """The data with the target's columns in the target's order and types (missing columns null)."""
    by_lower = {name.lower(): i for i, name in enumerate(data.column_names)}
    columns = []
    for field in target:
        i = by_lower.get(field.name.lower())
        if i is None:
            if not field.nullable and data.num_rows:
                raise SchemaMismatchError(f"{table}: NOT NULL column {field.name!r} is missing from the data.")
            columns.append(pa.nulls(data.num_rows, field.type))
            continue
        col = data.column(i)
        if not col.type.equals(field.type):
            spelled = _spelled_like(col.type, field.type)
            if not spelled.equals(col.type):
                col = pa.chunked_array([chunk.view(spelled) for chunk in col.chunks], spelled)
            try:
                # Timestamps are cut to microseconds, as Delta stores them; everything else must fit.
                safe = not (pa.types.is_timestamp(col.type) and pa.types.is_timestamp(field.type))
                col = col.cast(field.type, safe=safe)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(
                    f"{table}: column {field.name!r} of type {col.type} cannot be written as {field.type}: "
                    f"{e}. Nothing was written.") from None
        if not field.nullable and col.null_count:
            raise InvalidTableError(
                f"{table}: column {field.name!r} is NOT NULL in the table, but the data holds "
                f"{col.null_count} null value(s). Nothing was written. Fill or filter them first.")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)


# ------------------------------------------------------------------------------------------ write

def _partition_groups(data: pa.Table, partition_columns: list[str]) -> list[tuple[dict, pa.Table]]:
    """(raw partition key values, rows) per distinct partition, without a Python loop over rows."""
    if not partition_columns:
        return [({}, data)]
    if data.num_rows == 0:
        return []
    keyed = data.select(partition_columns).append_column("__row", pa.array(range(data.num_rows), pa.int64()))
    groups = keyed.group_by(partition_columns, use_threads=False).aggregate([("__row", "list")])
    out = []
    for i in range(groups.num_rows):
        key = {c: groups.column(c)[i].as_py() for c in partition_columns}
        rows = groups.column("__row_list")[i].values
        out.append((key, data.take(rows)))
    return out


class _OpenFile:
    def __init__(self, store: LogStore, rel: str, values: dict, schema: pa.Schema, stats: StatsCollector):
        self.rel, self.values, self.stats = rel, values, stats
        self.handle = store.open_data_file(rel)
        self.writer = pq.ParquetWriter(self.handle, schema, compression="snappy")
        self.rows = 0
        self.pending: list[pa.Table] = []
        self.pending_rows = 0


class _FileSink:
    """Streams rows into Parquet data files: one open file per partition, rolled at `max_rows` rows,
    statistics accumulated as rows pass, small batches buffered into row groups. `close()` makes
    the files durable and returns their add actions; `abort()` deletes everything written."""

    ROW_GROUP_ROWS = 128 * 1024
    MAX_OPEN_FILES = 64

    def __init__(self, store: LogStore, metadata: Metadata, store_partition_columns: bool, max_rows: int):
        self.store = store
        table = store.table_uri
        self.metadata = metadata
        self.schema_json = metadata.schema_json
        self.part_cols = list(metadata.partition_columns)
        self.types = partition_column_types(self.schema_json, self.part_cols, table) if self.part_cols else {}
        self.store_partition_columns = store_partition_columns
        self.max_rows = max_rows
        target = to_arrow_schema(self.schema_json)
        drop = [] if store_partition_columns else self.part_cols
        self.file_schema = pa.schema([f for f in target if f.name not in drop])
        self.open: dict[str, _OpenFile] = {}  # by partition folder, oldest first
        self.adds: list[AddFile] = []
        self.written: list[str] = []  # relative paths
        self.num_rows = 0

    def write(self, data: pa.Table) -> None:
        self.num_rows += data.num_rows
        for key, rows in _partition_groups(data, self.part_cols):
            values = {c: serialize_partition_value(key[c], self.types[c]) for c in self.part_cols}
            folder = partition_folder(self.part_cols, values)
            rows = rows.select(self.file_schema.names)
            while rows.num_rows:
                f = self.open.get(folder) or self._new_file(folder, values)
                chunk = rows.slice(0, self.max_rows - f.rows)
                rows = rows.slice(chunk.num_rows)
                f.pending.append(chunk)
                f.pending_rows += chunk.num_rows
                f.rows += chunk.num_rows
                f.stats.update(chunk)
                if f.pending_rows >= self.ROW_GROUP_ROWS:
                    self._flush(f)
                if f.rows >= self.max_rows:
                    self._finish(folder)

    def _new_file(self, folder: str, values: dict) -> _OpenFile:
        if len(self.open) >= self.MAX_OPEN_FILES:  # bound open handles: finish the oldest file
            self._finish(next(iter(self.open)))
        rel = new_data_file_path(folder)
        self.written.append(rel)
        f = _OpenFile(self.store, rel, values, self.file_schema,
                      StatsCollector(self.schema_json, self.part_cols, self.metadata.configuration))
        self.open[folder] = f
        return f

    @staticmethod
    def _flush(f: _OpenFile) -> None:
        if f.pending:
            f.writer.write_table(pa.concat_tables(f.pending))
            f.pending, f.pending_rows = [], 0

    def _finish(self, folder: str) -> None:
        f = self.open.pop(folder)
        self._flush(f)
        f.writer.close()
        size, mtime = self.store.close_data_file(f.handle, f.rel)  # durable before the commit names it
        self.adds.append(AddFile(
            path=encode_path(f.rel), partition_values=f.values, size=size,
            modification_time=mtime, data_change=True, stats=f.stats.to_json()))

    def close(self) -> list[AddFile]:
        while self.open:
            self._finish(next(iter(self.open)))
        return self.adds

    def abort(self, txn: Any) -> None:
        """Close what is open and delete the files written, except those a commit that landed before
        the failure (or Ctrl-C) names."""
        for f in self.open.values():
            try:
                f.writer.close()
            except Exception:
                pass
            f.handle.close()
        self.open.clear()
        txn.discard_uncommitted(encode_path(rel) for rel in self.written)


def _as_stream(data: Any, table: str) -> tuple[pa.Schema, Iterable[pa.RecordBatch]]:
    """The schema and the record batches of the data, without reading a stream into memory."""
    if isinstance(data, pa.Table):
        return data.schema, data.to_batches()
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, data
    if isinstance(data, pa.RecordBatch):
        return data.schema, [data]
    if type(data).__module__.startswith("pandas"):
        t = pa.Table.from_pandas(data, preserve_index=False)
        return t.schema, t.to_batches()
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, reader
    raise TypeError(f"{table}: data must be a pyarrow Table or RecordBatchReader (or another Arrow "
                    f"stream), not {type(data).__name__}")


def write_deltalake(uri: str, data: Any, mode: str = "error", partition_by: list[str] | str | None = None,
                    configuration: dict[str, str] | None = None,
                    predicate: Any = None, schema_mode: str | None = None,
                    user_metadata: str | None = None, name: str | None = None,
                    description: str | None = None, max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
                    extra_commit_info: dict[str, Any] | None = None,
                    storage_options: dict[str, Any] | None = None, operation: str = "WRITE") -> int:
    """Write Arrow data (a Table, a RecordBatchReader streamed batch by batch, or any Arrow stream) to
    the Delta table at `uri` as one commit; returns the committed version (for mode='ignore' on an
    existing table, the current version).

    mode: 'error' (the table must not exist), 'append', 'overwrite', 'ignore' (do nothing if it exists).
    predicate (overwrite only): replace only the partitions it selects — SQL text of =, IN, IS NULL on
    partition columns joined by AND, a dict {column: value | [values]}, or a skipping expression.
    schema_mode: None (data must fit the table), 'merge' (add new columns and struct fields, as
    deltalog.schema_evolution says), 'overwrite' (replace the
    schema and partitioning; with mode='overwrite').
    storage_options: for an object-store URI (s3://, abfss://, gs://), the keys delta-rs takes.
    operation: the commitInfo's operation (e.g. "CREATE TABLE AS SELECT", as Spark's writer names it)."""
    dt = DeltaTable(uri, storage_options)
    table = dt.uri
    plan = WritePlan.of(table, mode, partition_by, replace_where=predicate, schema_mode=schema_mode,
                        default_mode="error")
    mode = plan.mode
    if max_rows_per_file < 1:
        raise ValueError(f"{table}: max_rows_per_file must be >= 1")
    arrow_schema, batches = _as_stream(data, table)
    data_schema = from_arrow_schema(arrow_schema)

    txn = dt.transaction()
    snap = txn.snapshot
    if snap is not None and mode in ("error", "errorifexists"):
        raise InvalidTableError(f"{table}: a Delta table already exists here (version {snap.version}); "
                                f"use mode='append' or 'overwrite'.")
    if snap is not None and mode == "ignore":
        return snap.version
    if is_mapped(snap.configuration if snap is not None else None) or is_mapped(configuration):
        raise UnsupportedFeatureError(
            f"{table}: the table uses column mapping (delta.columnMapping.mode), which this Arrow writer "
            f"does not write; write it with deltalog.spark.operations (physical names, field ids).")

    if snap is None:
        txn.update_metadata(new_metadata(data_schema, list(plan.partition_by or []), configuration, name,
                                         description, table=table))
    elif plan.replaces_schema:
        schema_json, parts, conf = plan.layout(table, snap, data_schema, configuration)
        md = new_metadata(schema_json, parts, conf, name or snap.metadata.name,
                          description or snap.metadata.description, table=table)
        md.id, md.created_time = snap.metadata.id, snap.metadata.created_time  # the same table, a new schema
        old = snap.metadata
        if (md.schema_json, list(md.partition_columns), dict(md.configuration), md.name, md.description) != (
                old.schema_json, list(old.partition_columns), dict(old.configuration), old.name, old.description):
            txn.update_metadata(md)  # none when nothing changed, as Spark's writer (streams read on)
    else:
        merged, _, conf = plan.layout(table, snap, data_schema, configuration)
        current = snap.schema_json
        if merged != current or conf != snap.configuration:
            md = Metadata.from_dict(snap.metadata.to_dict())
            md.schema_string = schema_string(merged)
            md.configuration = conf
            txn.update_metadata(md)
    md = txn.metadata
    if is_mapped(md.configuration):  # turned on here for column names other engines refuse without it
        raise UnsupportedFeatureError(
            f"{table}: column name(s) {names_needing_mapping(md.schema_json)} need column mapping "
            f"(delta.columnMapping.mode=name) for other engines to read the table, and this Arrow writer does "
            f"not write column-mapped tables. Rename the columns, or write with deltalog.spark.operations. "
            f"Nothing was written.")
    txn.isolation_level()  # a bad delta.isolationLevel fails here, before any data file is written
    target = to_arrow_schema(md.schema_json)
    _conform(arrow_schema.empty_table(), target, table)  # type problems fail before any file is written
    part_cols = list(md.partition_columns)

    removes: list[RemoveFile] = []
    where = None
    types = partition_column_types(md.schema_json, part_cols, table) if part_cols else {}
    if snap is not None and mode == "overwrite":
        if predicate is not None:
            where = replace_where(predicate, md, table)
            txn.read_predicate(where.predicate)
            touched = [a for a, hit in zip(snap.add_files(), where.partitions_matching(snap.files)) if hit]
        else:
            txn.read_whole_table()
            touched = snap.add_files()
        txn.read_files(touched)
        now = now_ms()
        removes = [a.remove(now, data_change=True) for a in touched]

    numbering = identity.numberings(md.schema_json, arrow_schema.names, table)
    protocol = txn.protocol
    sink = _FileSink(dt.store, md, bool(protocol and protocol.stores_partition_columns),
                     max_rows_per_file)
    try:
        for batch in batches:
            rows = pa.Table.from_batches([batch])
            for n in numbering:  # identity columns the data leaves out: the next values past the mark
                rows = rows.append_column(n.column.name, n.take(rows.num_rows, table))
            rows = _conform(rows, target, table)
            if where is not None:
                _check_rows_match(rows, part_cols, types, where, table)
            sink.write(rows)
        adds = sink.close()
        params: dict[str, Any] = {"mode": _DELTA_SPARK_MODE.get(mode, "Append"), "partitionBy": json.dumps(part_cols)}
        if where is not None:
            params["predicate"] = json.dumps([where.text])
        metrics = {"numFiles": len(adds), "numOutputRows": sink.num_rows,
                   "numOutputBytes": sum(a.size for a in adds)}
        if removes:
            metrics.update(numRemovedFiles=len(removes), numRemovedBytes=sum(r.size or 0 for r in removes))
        commit_args = dict(operation=operation, parameters=params, metrics=metrics, user_metadata=user_metadata,
                           extra_commit_info=extra_commit_info)
        txn.add_actions([*removes, *adds])
        txn.record_identity(n.generated(a.path for a in adds) for n in numbering)
        try:
            return txn.commit(**commit_args)
        except ProtocolChangedException as e:
            if snap is not None or e.winning_version != 0:
                raise
            return _commit_into_created_table(dt, mode, md, adds, commit_args)
    except _Ignored as ignored:
        sink.abort(txn)
        return ignored.version
    except BaseException:
        sink.abort(txn)
        raise


class _Ignored(Exception):
    def __init__(self, version: int):
        self.version = version


def _commit_into_created_table(dt: DeltaTable, mode: str, md: Metadata, adds: list[AddFile],
                               commit_args: dict[str, Any]) -> int:
    """Another writer created the table while this one wrote its files. Commit the same files into
    that table when its partitioning and schema are the ones the files were written for (as a
    retried append or overwrite would); otherwise fail, naming the difference."""
    table = dt.uri
    txn = dt.transaction()
    snap = txn.snapshot
    if mode == "error":
        raise InvalidTableError(f"{table}: the table was created concurrently (version 0) by another writer "
                                f"while this one ran with mode='error'. Nothing was written.")
    if mode == "ignore":
        raise _Ignored(snap.version)
    mine = [(f["name"], f["type"]) for f in md.schema_json["fields"]]
    theirs = [(f["name"], f["type"]) for f in snap.schema_json["fields"]]
    if snap.partition_columns != list(md.partition_columns) or mine != theirs:
        raise SchemaMismatchError(
            f"{table}: the table was created concurrently by another writer with partitioning "
            f"{snap.partition_columns} and columns {theirs}; this write prepared partitioning "
            f"{list(md.partition_columns)} and columns {mine}. Nothing was written; retry the write.")
    removes = []
    if mode == "overwrite":
        txn.read_whole_table()
        files = snap.add_files()
        txn.read_files(files)
        removes = [f.remove() for f in files]
    txn.add_actions([*removes, *adds])
    return txn.commit(**commit_args)


def _check_rows_match(data: pa.Table, part_cols: list[str], types: dict[str, str],
                      where: ReplaceWhere, table: str) -> None:
    """Replace-where data must lie inside the predicate, or rows would vanish from other partitions."""
    if data.num_rows == 0:
        return
    distinct = data.select(part_cols).group_by(part_cols, use_threads=False).aggregate([]).to_pylist()
    partitions = [{c: serialize_partition_value(row[c], types[c]) for c in part_cols} for row in distinct]
    files = pa.table({"partition_values": pa.array([list(p.items()) for p in partitions],
                                                   pa.map_(pa.string(), pa.string()))})
    for values, inside in zip(partitions, where.partitions_matching(files)):
        if not inside:
            raise InvalidTableError(
                f"{table}: data written with predicate {where.text!r} holds rows outside it (partition "
                f"{values}). Nothing was written. Filter the data to the predicate, or widen the predicate.")
