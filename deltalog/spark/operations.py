"""Spark-side table operations, each exactly ONE commit through a `Transaction`.

- `write_dataframe`: create / append / overwrite / replaceWhere / dynamic partition overwrite.
- `merge`: copy-on-write MERGE INTO: candidate files from min/max stats of the join keys, then a join on
  the files' rows to find the files that really hold matched rows; only those are rewritten.
- `delete`: copy-on-write DELETE; files wholly inside the predicate are removed without being read.

Each returns the committed version, or None when there was nothing to commit. Data files are written
before the commit; when the commit fails or is interrupted, `Transaction.commit_or_discard` deletes the
files no landed commit names (any left by a killed process are invisible to readers; VACUUM removes them).
"""
from __future__ import annotations

import copy
import json
import logging
import math
import time
from dataclasses import replace
from urllib.parse import unquote, urlparse
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, functions as F
from pyspark.sql.types import StructType

from ..actions import AddFile, Metadata, RemoveFile, SetTransaction, now_ms
from ..errors import DeltaError, InvalidTableError, NotATableError, SchemaMismatchError
from .. import sql
from ..column_mapping import MODE as MAPPING_MODE, is_mapped, physical_names
from ..paths import parse_partition_value
from ..schema import (
    check_column_names, find_field, nullable_type, partition_column_types, quote_identifier, schema_string,
    to_arrow_schema,
)
from ..skipping import ALWAYS, bind, bind_to, files_matching, parse_sql_predicate
from ..constraints import check_constraints
from ..schema_evolution import (
    SCHEMA_MODES, WRITE_MODES, check_append_schema, checked_table_schema, evolved_schema,
)
from ..definition import TableDefinition, added_checks, changed_properties, describe_change
from ..file_actions import files_table
from ..table import DeltaTable, new_metadata
from ..transaction import rearranged_only, reruns_after_conflict
from .. import change_data, deletion_vectors, row_tracking
from .change_data import change_rows, write_change_data
from .cluster import is_local_master
from .reader import (
    FILE_COLUMN, FILE_SIZE_COLUMN, ROW_INDEX_COLUMN, deleted_rows_column, files_dataframe, has_deletion_vectors,
    local_file_expr, local_file_key, local_path_of, read_through_data_source, sizes_differ, tells_files_by_size,
    widened_columns,
)
from .writer import cast_by_name, target_file_size, write_files

_SPARK_MODE = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists",
               "errorifexists": "ErrorIfExists", "ignore": "Ignore"}
_ACTION = "__deltalog_action"
_NEW = "__deltalog_new_"
_SOURCE_ID = "__deltalog_source_id"
_ROW_ID = "__deltalog_row_id"  # a matched target row's row ID (row tracking), for its new version
_OLD = "__deltalog_old_"  # a matched target row's value, carried from the matching join (merge-on-read)
_BY_SOURCE_NEW = "__deltalog_by_source_value_"  # not a prefix of _NEW's names, nor _NEW of its
# A merge source whose cached size is under this is broadcast to the join with the target's rows.
log = logging.getLogger(__name__)
_BROADCAST_SOURCE_BYTES = 64 << 20


# ---------------------------------------------------------------------------------------------------
# helpers


def _plain_fields(t: Any) -> Any:
    """A type without the field metadata a table declares for itself (comments, `delta.*` such as
    invariants): a new table must not inherit them from the tables its data was read from."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return {**t, "fields": [
                {**f, "type": _plain_fields(f["type"]),
                 "metadata": {k: v for k, v in (f.get("metadata") or {}).items()
                              if k != "comment" and not k.startswith("delta.")}}
                for f in t["fields"]]}
        if kind == "array":
            return {**t, "elementType": _plain_fields(t["elementType"])}
        if kind == "map":
            return {**t, "keyType": _plain_fields(t["keyType"]), "valueType": _plain_fields(t["valueType"])}
    return t


def dataframe_schema(df: DataFrame, table: str) -> dict[str, Any]:
    """The Delta schema of a DataFrame: all nullable, names unique ignoring case, types Delta has, and
    no field metadata a table declares for itself."""
    schema_json = _plain_fields(nullable_type(json.loads(df.schema.json())))
    check_column_names(schema_json, table)
    void = [f["name"] for f in schema_json["fields"] if f["type"] == "void"]
    if void:
        raise SchemaMismatchError(
            f"{table}: column(s) {', '.join(repr(v) for v in void)} have no type (a bare NULL); Delta needs a "
            f"type for every column: cast them, e.g. cast(null as string).")
    try:
        to_arrow_schema(schema_json)
    except DeltaError as e:
        raise SchemaMismatchError(f"{table}: {e}") from None
    return schema_json


def _same_columns(a: Sequence[str], b: Sequence[str]) -> bool:
    return [x.lower() for x in a] == [x.lower() for x in b]


def _table_partition_names(schema_json: dict[str, Any], partition_by: Sequence[str], table: str) -> list[str]:
    """Partition column names spelled as in the schema; each must exist and be primitive."""
    out = []
    for c in partition_by:
        f = find_field(schema_json, c)
        if f is None:
            raise SchemaMismatchError(
                f"{table}: partition column '{c}' is not a column of the data; columns are "
                f"{', '.join(x['name'] for x in schema_json['fields'])}.")
        out.append(f["name"])
    partition_column_types(schema_json, out, table)
    if len(set(c.lower() for c in out)) != len(out):
        raise InvalidTableError(f"{table}: partition columns {out} repeat a column.")
    if out and len(out) == len(schema_json["fields"]):
        raise InvalidTableError(
            f"{table}: every column is a partition column ({out}); Delta needs at least one data column.")
    return out


def _refuse_rows_outside(df: DataFrame, predicate: str, table: str) -> DataFrame:
    """The rows, failing the write at the first row outside the replace-where predicate (as Delta's
    replaceWhere constraint check does): such a row would survive beside the rows it should replace.
    Checked as the rows are written, not in a pass of its own."""
    outside = ~F.coalesce(F.expr(predicate), F.lit(False))
    row = F.to_json(F.struct(*[F.col(quote_identifier(c)) for c in df.columns]))
    message = F.concat(F.lit(f"{table}: rows written with replace-where predicate {predicate!r} must "
                             f"satisfy it, and this one does not: "), row,
                       F.lit(". Filter the data to the predicate, or widen the predicate. Nothing was committed."))
    first = df.columns[0]
    checked = F.when(outside, F.raise_error(message)).otherwise(F.col(quote_identifier(first)))
    return df.select(checked.alias(first), *[F.col(quote_identifier(c)) for c in df.columns[1:]])


def _mapped_if_dropping(table: str, conf: dict[str, str], current: dict[str, Any],
                        new: dict[str, Any]) -> dict[str, str]:
    """The table's properties for a commit that drops columns while old files keep them. Without column
    mapping, a column of the same name added later would read the old values back from those files; so
    the drop turns column mapping on (`name` mode, in the same commit, no file rewritten: the columns
    keep their names as physical names, and a column added later gets a new one)."""
    dropped = {f["name"].lower() for f in current["fields"]} - {f["name"].lower() for f in new["fields"]}
    if not dropped or is_mapped(conf):
        return conf
    log.warning("%s: dropping column(s) %s turns on column mapping (delta.columnMapping.mode=name) so that "
                "their old values can never come back; readers need column mapping support (delta-rs, "
                "Spark with Delta 1.2+, DuckDB and polars have it).", table, sorted(dropped))
    return {**conf, MAPPING_MODE: "name"}


def _fill_missing(df: DataFrame, schema_json: dict[str, Any]) -> DataFrame:
    """Add the table's columns that the DataFrame lacks, as nulls (then writer.conform orders/casts)."""
    have = {c.lower() for c in df.columns}
    target = StructType.fromJson(schema_json)
    for f in target.fields:
        if f.name.lower() not in have:
            df = df.withColumn(f.name, F.lit(None).cast(f.dataType))
    return df


def _type_void_columns(df: DataFrame, schema_json: dict[str, Any]) -> DataFrame:
    """Columns of NULL literals (Spark's void type) take the table's type for that column."""
    target = StructType.fromJson(schema_json)
    by_lower = {f.name.lower(): f for f in target.fields}
    for f in df.schema.fields:
        if f.dataType.typeName() == "void" and f.name.lower() in by_lower:
            df = df.withColumn(f.name, F.col(quote_identifier(f.name)).cast(by_lower[f.name.lower()].dataType))
    return df


def _sum_records(adds: Sequence[AddFile]) -> int:
    return sum(a.num_records or 0 for a in adds)


def _records(files: pa.Table) -> int | None:
    """Total live rows of some of the snapshot's files: numRecords less what their deletion vectors
    delete (None when a file lacks stats)."""
    total = 0
    for s, dv in zip(files.column("stats").to_pylist(), files.column("deletion_vector").to_pylist()):
        if not s:
            return None
        n = json.loads(s).get("numRecords")
        if n is None:
            return None
        total += int(n) - int((dv or {}).get("cardinality") or 0)
    return total


def _add_files_of(files: pa.Table) -> list[AddFile]:
    out = []
    for row in files.to_pylist():
        out.append(AddFile(path=row["path"], partition_values=dict(row["partition_values"] or []),
                           size=row["size"], modification_time=row["modification_time"],
                           data_change=row["data_change"], stats=row["stats"],
                           tags=dict(row["tags"]) if row.get("tags") is not None else None,
                           deletion_vector=row.get("deletion_vector")))
    return out


def _removes(files: pa.Table, timestamp: int | None = None) -> list[RemoveFile]:
    ts = timestamp or now_ms()
    return [a.remove(deletion_timestamp=ts) for a in _add_files_of(files)]


def _bytes(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


class _FileKeys:
    """How the rows a DML reads name their file: by size (`FILE_SIZE_COLUMN`) where no two of the files
    read share one, else by path (`FILE_COLUMN`). Spark hands each row its file's size almost for free,
    while it copies the path into every row: a 10M-row merge match took 2.1 s with paths, 0.9 s with
    sizes. (The Python data source of object stores without a Hadoop connector gives paths.)"""

    def __init__(self, spark: SparkSession, snapshot: Any, files: pa.Table, by_size: bool | None = None):
        self.spark, self.snapshot = spark, snapshot
        self.by_size = by_size if by_size is not None else (
            not read_through_data_source(spark, snapshot.table_uri) and files.num_rows > 0
            and sizes_differ(files) and (not has_deletion_vectors(files) or tells_files_by_size(spark, files)))
        self.column = FILE_SIZE_COLUMN if self.by_size else FILE_COLUMN

    def dataframe(self, files: pa.Table, with_row_index: bool = True, with_deleted: bool = False) -> DataFrame:
        """The rows of `files` with this key (and their row indexes)."""
        return files_dataframe(self.spark, self.snapshot, files, with_file=not self.by_size,
                               with_size=self.by_size, with_row_index=with_row_index, with_deleted=with_deleted)

    def deleted_rows(self, files: pa.Table) -> Any:
        """`deleted_rows_column` for rows of `files` with this key, evaluated where the query puts it."""
        return deleted_rows_column(self.spark, self.snapshot, files, deterministic=False, by_size=self.by_size)

    def rows_of(self, files: pa.Table) -> Callable[[Any], int]:
        """key -> row of `files`; DeltaError for a file the snapshot does not list there."""
        if self.by_size:
            index = {s: i for i, s in enumerate(files.column("size").to_pylist())}
        else:
            root = self.snapshot.table_uri
            index = {local_file_key(root, p): i for i, p in enumerate(files.column("path").to_pylist())}

        def row_of(key: Any) -> int:
            i = index.get(key if self.by_size else local_path_of(key))
            if i is None:
                what = f"a file of {key} bytes" if self.by_size else key
                raise DeltaError(f"{self.snapshot.table_uri}: Spark read {what}, which the snapshot does not "
                                 f"list among the files read.")
            return i
        return row_of


class _WithHiddenColumns:
    """A snapshot whose schema has extra (hidden) columns at its end, so that every reader reads them
    too (nulls where a file lacks them)."""

    def __init__(self, snapshot: Any, fields: list[dict[str, Any]]):
        self._snapshot = snapshot
        self.schema_json = {**snapshot.schema_json, "fields": [*snapshot.schema_json["fields"], *fields]}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._snapshot, name)


def rows_with_row_ids(spark: SparkSession, snapshot: Any, files: pa.Table, like: _FileKeys | None = None) -> DataFrame:
    """The rows of `files` (live files of `snapshot`, which `row_tracking.keeps_row_ids`) with the table's
    columns plus its two hidden row tracking columns holding each row's row ID and row commit version:
    the file's materialized value where it has one, else the default (`baseRowId` + the row's position
    in the file, and `defaultRowCommitVersion`). Its columns are those of
    `row_tracking.with_materialized_fields`; with `like`, also that key's column and ROW_INDEX_COLUMN
    (as `like.dataframe` gives them)."""
    fields = row_tracking.materialized_fields(snapshot.configuration)
    view = _WithHiddenColumns(snapshot, fields)
    keys = _FileKeys(spark, view, files, by_size=like.by_size if like is not None else None)
    df = keys.dataframe(files)
    row_id, version = (f["name"] for f in fields)
    base, default_version = "__deltalog_base_row_id", "__deltalog_row_commit_version"
    lookup, on = _file_lookup(spark, snapshot, files, keys, {base: "base_row_id",
                                                             default_version: "default_row_commit_version"})
    return (df.join(F.broadcast(lookup), on)
            .withColumn(row_id, F.coalesce(F.col(quote_identifier(row_id)), F.col(base) + F.col(ROW_INDEX_COLUMN)))
            .withColumn(version, F.coalesce(F.col(quote_identifier(version)), F.col(default_version)))
            .drop(base, default_version, _LOOKUP_KEY,
                  *([] if like is not None else [ROW_INDEX_COLUMN, keys.column])))


_LOOKUP_KEY = "__deltalog_lookup_key"


def _file_lookup(spark: SparkSession, snapshot: Any, files: pa.Table, keys: _FileKeys,
                 columns: dict[str, str]) -> tuple[DataFrame, Column]:
    """A small DataFrame of `files`' log `columns` ({name: column of `files`}) keyed by _LOOKUP_KEY as
    `keys` names a row's file, and the condition joining rows that carry `keys.column` to it."""
    if keys.by_size:
        key_values = files.column("size")
        on = F.col(keys.column) == F.col(_LOOKUP_KEY)
    else:
        key_values = pa.array([local_file_key(snapshot.table_uri, p) for p in files.column("path").to_pylist()])
        on = local_file_expr(F.col(keys.column)) == F.col(_LOOKUP_KEY)
    table = pa.table({_LOOKUP_KEY: key_values, **{name: files.column(c) for name, c in columns.items()}})
    return spark.createDataFrame(table), on


def _with_default_row_ids(spark: SparkSession, snapshot: Any, files: pa.Table, keys: _FileKeys,
                          rows: DataFrame) -> DataFrame:
    """`rows` (of `files`, with their `keys` column, ROW_INDEX_COLUMN and _ROW_ID: the materialized row ID
    or null) with _ROW_ID defaulted to the file's baseRowId + the row's position, by a broadcast lookup
    of the files (run on the matched rows only, not on every row scanned)."""
    base = "__deltalog_base_row_id"
    lookup, on = _file_lookup(spark, snapshot, files, keys, {base: "base_row_id"})
    return (rows.join(F.broadcast(lookup), on)
            .withColumn(_ROW_ID, F.coalesce(F.col(_ROW_ID), F.col(base) + F.col(ROW_INDEX_COLUMN)))
            .drop(base, _LOOKUP_KEY))


def _take(files: pa.Table, rows: Sequence[int]) -> pa.Table:
    return files.take(pa.array(sorted(rows), pa.int64())) if rows else files.slice(0, 0)


# ---------------------------------------------------------------------------------------------------
# rows matching a predicate (shared by delete, replace_where)


def _partition_rows_matching(spark: SparkSession, snapshot: Any, files: pa.Table, predicate: str) -> list[int] | None:
    """Rows of `files` whose partition values satisfy `predicate`, evaluated exactly by Spark over the
    distinct partition values; None when the predicate needs more than partition columns."""
    partitions = snapshot.partition_columns
    if not partitions or files.num_rows == 0:
        return None
    full = StructType.fromJson(snapshot.schema_json)
    part_schema = StructType([full[c] for c in partitions])
    types = partition_column_types(snapshot.schema_json, partitions)
    keys: dict[tuple, list[int]] = {}
    names = physical_names(snapshot.schema_json, snapshot.configuration)  # as the log keys them
    for i, pv in enumerate(files.column("partition_values").to_pylist()):
        pv = dict(pv or [])
        keys.setdefault(tuple(pv.get(names[c]) for c in partitions), []).append(i)
    key_list = list(keys)
    rows = [tuple(parse_partition_value(v, types[c]) for c, v in zip(partitions, k)) + (i,)
            for i, k in enumerate(key_list)]
    from pyspark.sql.types import IntegerType, StructField
    schema = StructType(list(part_schema.fields) + [StructField("__deltalog_key", IntegerType())])
    try:
        matched = spark.createDataFrame(rows, schema).filter(predicate).select("__deltalog_key").collect()
    except Exception as e:  # AnalysisException: the predicate mentions data columns
        if "AnalysisException" in type(e).__name__ or "UNRESOLVED" in str(e) or "cannot be resolved" in str(e):
            return None
        raise
    out: list[int] = []
    for r in matched:
        out.extend(keys[key_list[r[0]]])
    return out


def _split_files_by_predicate(spark: SparkSession, snapshot: Any, candidates: pa.Table,
                              predicate: str) -> tuple[pa.Table, pa.Table, int]:
    """(files wholly matching, files partly matching, number of matching rows) among `candidates`."""
    if candidates.num_rows == 0:
        return candidates, candidates, 0
    keys = _FileKeys(spark, snapshot, candidates)
    df = keys.dataframe(candidates, with_row_index=False)
    flag = F.coalesce(F.expr(predicate), F.lit(False)).cast("int")
    counts = (df.select(F.col(keys.column), flag.alias("m"))
              .groupBy(keys.column).agg(F.count(F.lit(1)).alias("n"), F.sum("m").alias("m"))
              .filter("m > 0").collect())
    row_of = keys.rows_of(candidates)
    whole, partial, matched = [], [], 0
    for r in counts:
        i = row_of(r[keys.column])
        matched += int(r["m"])
        (whole if int(r["m"]) == int(r["n"]) else partial).append(i)
    return _take(candidates, whole), _take(candidates, partial), matched


def _marks_enabled(txn: Any) -> bool:
    """Whether this transaction's DML marks rows in deletion vectors instead of rewriting files."""
    return deletion_vectors.is_enabled(txn.metadata.configuration)


def _rows_by_file(keys: _FileKeys, files: pa.Table, table: pa.Table) -> list[tuple[AddFile, Any]]:
    """(the file's add, its row indexes) for the rows of `files` that `table` (`keys.column`,
    ROW_INDEX_COLUMN; collected to the driver, as a DV holds row numbers, not rows) names."""
    if table.num_rows == 0:
        return []
    grouped = table.group_by(keys.column).aggregate([(ROW_INDEX_COLUMN, "list")])
    row_of = keys.rows_of(files)
    adds = _add_files_of(files)
    return [(adds[row_of(key)], np.asarray(rows.values, dtype=np.uint64))
            for key, rows in zip(grouped.column(keys.column).to_pylist(), grouped.column(f"{ROW_INDEX_COLUMN}_list"))]


def _mark_matching_rows(spark: SparkSession, snapshot: Any, files: pa.Table,
                        predicate: str) -> deletion_vectors.MarkedRows:
    """Merge-on-read DELETE of the rows of `files` matching `predicate`: their row numbers go into
    deletion vectors (one new DV file); no data file is rewritten."""
    keys = _FileKeys(spark, snapshot, files)
    hits = keys.dataframe(files).filter(F.coalesce(F.expr(predicate), F.lit(False)))
    table = hits.select(keys.column, ROW_INDEX_COLUMN).toArrow()
    return deletion_vectors.mark_rows(snapshot.store, _rows_by_file(keys, files, table), now_ms())


def _actions_per_file(hits: pa.Table, key: str) -> list[dict[str, Any]]:
    """Per file of `hits` (its `key` column, ROW_INDEX_COLUMN, _ACTION, on the driver): the most actions
    one row got (`max_n`) and the rows updated (`u`), deleted (`d`), updated and deleted by a not matched
    by source clause (`bu`, `bd`), as the Spark aggregation of the copy-on-write path gives them."""
    per_row = hits.group_by([key, ROW_INDEX_COLUMN]).aggregate([([], "count_all")])
    most = per_row.group_by(key).aggregate([("count_all", "max")])
    out = {f: {key: f, "max_n": n, "u": 0, "d": 0, "bu": 0, "bd": 0}
           for f, n in zip(most.column(key).to_pylist(), most.column("count_all_max").to_pylist())}
    counts = hits.group_by([key, _ACTION]).aggregate([([], "count_all")])
    names = {"update": "u", "delete": "d", "by_source_update": "bu", "by_source_delete": "bd"}
    for f, action, n in zip(*(counts.column(c).to_pylist() for c in (key, _ACTION, "count_all"))):
        if action in names:
            out[f][names[action]] += n
    return list(out.values())


def _remaining_rows(spark: SparkSession, snapshot: Any, files: pa.Table, predicate: str) -> tuple[DataFrame, bool]:
    """The rows of `files` that do NOT satisfy `predicate` (null counts as not satisfied), and whether
    they keep their row IDs: on a table with row tracking they come with its hidden columns
    (`rows_with_row_ids`), to be written by `_write_kept_rows`."""
    keeps_ids = row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, files)
    rows = rows_with_row_ids(spark, snapshot, files) if keeps_ids else files_dataframe(spark, snapshot, files)
    return rows.filter(~F.coalesce(F.expr(predicate), F.lit(False))), keeps_ids


def _write_kept_rows(txn: Any, plan: dict[str, Any], table: str, partition_by: Sequence[str],
                     schema_json: dict[str, Any], configuration: dict[str, str], method: str,
                     store_partition_columns: bool) -> list[AddFile]:
    """The files of the rows a copy-on-write delete keeps (`plan["keep"]`), each row keeping its row ID
    and commit version in the hidden columns where the table tracks them."""
    keeps_ids = plan.get("keeps_ids", False)
    if keeps_ids:
        schema_json = row_tracking.with_materialized_fields(schema_json, configuration)
    adds = write_files(plan["keep"], table, partition_by, schema_json, configuration, method=method,
                       store_partition_columns=store_partition_columns)
    if keeps_ids:
        adds = [replace(a, stats=row_tracking.without_hidden_stats(a.stats, configuration)) for a in adds]
        txn.rows_keep_ids = True
    return adds


def _deleted_rows_changes(spark: SparkSession, snapshot: Any, removed: pa.Table, predicate: str,
                          method: str, inserted: Sequence[AddFile] = (), metadata: Metadata | None = None) -> list:
    """With the change data feed on, a commit that rewrites files records the rows it deleted (the
    removed files' rows matching `predicate`) and, for replace_where, the rows it inserted (read back
    from the files it wrote, so a query is never run twice): `cdc` actions, or none."""
    metadata = metadata or snapshot.metadata
    if not change_data.is_enabled(metadata.configuration):
        return []
    changes = [change_rows(files_dataframe(spark, snapshot, removed).filter(F.coalesce(F.expr(predicate), F.lit(False))),
                           metadata.schema_json, change_data.DELETE)]
    if inserted:
        view = copy.copy(snapshot)
        view.metadata = metadata
        files = files_table([a.to_dict() for a in inserted])
        changes.append(change_rows(files_dataframe(spark, view, files), metadata.schema_json, change_data.INSERT))
    return write_change_data(changes, snapshot.table_uri, metadata.partition_columns, metadata.schema_json,
                             dict(metadata.configuration), method=method)


def _delete_plan(spark: SparkSession, txn: Any, predicate: str | None) -> dict[str, Any]:
    """What deleting the rows matching `predicate` takes: files to remove whole, files to rewrite, the
    DataFrame of rows to keep from them, and counts. Records what was read in the transaction."""
    snapshot = txn.snapshot
    files = snapshot.files
    text = (predicate or "").strip()
    if not text or text.lower() in ("true", "1=1", "(true)"):
        txn.read_whole_table()
        return {"remove": files, "rewrite": files.slice(0, 0), "keep": None, "deleted": _records(files),
                "whole_table": True}
    expr = parse_sql_predicate(text)
    candidates = files_matching(snapshot, expr) if expr is not ALWAYS else files
    txn.read_files(candidates)
    # a concurrently added file conflicts only when its partition or its min/max may hold such rows
    txn.read_predicate(bind_to(expr, snapshot))
    by_partition = _partition_rows_matching(spark, snapshot, candidates, text)
    if by_partition is not None:
        whole = _take(candidates, by_partition)
        return {"remove": whole, "rewrite": candidates.slice(0, 0), "keep": None, "deleted": _records(whole),
                "whole_table": False}
    if _marks_enabled(txn):
        marked = _mark_matching_rows(spark, snapshot, candidates, text)
        touched = {a.path for a in marked.removes}
        hit = pc.is_in(candidates.column("path"), pa.array(sorted(touched), pa.string()))
        return {"remove": candidates.slice(0, 0), "rewrite": candidates.slice(0, 0), "keep": None,
                "deleted": marked.rows, "whole_table": False, "marked": marked,
                "marked_files": candidates.filter(hit)}
    whole, partial, matched = _split_files_by_predicate(spark, snapshot, candidates, text)
    keep, keeps_ids = _remaining_rows(spark, snapshot, partial, text) if partial.num_rows else (None, False)
    return {"remove": whole, "rewrite": partial, "keep": keep, "deleted": matched, "whole_table": False,
            "keeps_ids": keeps_ids}


# ---------------------------------------------------------------------------------------------------
# table definition: constraints, comments, properties


def _metadata_differs(a: Metadata, b: Metadata) -> bool:
    return (a.schema_json != b.schema_json or list(a.partition_columns) != list(b.partition_columns)
            or a.configuration != b.configuration or a.description != b.description)


def check_existing_rows(spark: SparkSession, snapshot: Any, metadata: Metadata, txn: Any = None) -> None:
    """The table's current rows against the CHECK constraints and NOT NULL columns that `metadata`
    adds, as Delta checks ADD CONSTRAINT: the first violating row fails, naming the constraint."""
    added = added_checks(snapshot.metadata, metadata)
    if not added or not snapshot.files.num_rows:
        return
    if txn is not None:
        txn.read_whole_table()  # the check read every row: a concurrent write must conflict
    rows = files_dataframe(spark, snapshot, snapshot.files)
    checks = {c.name: c for c in check_constraints(metadata.configuration)}
    for name in added:
        if name.startswith("NOT NULL "):
            column = name[len("NOT NULL "):]
            bad, what = rows.filter(F.col(quote_identifier(column)).isNull()), f"NOT NULL on column {column}"
        else:
            c = checks[name]
            bad, what = rows.filter(~F.coalesce(F.expr(c.expression), F.lit(False))), c.describe()
        found = bad.limit(1).select(F.to_json(F.struct(*[F.col(quote_identifier(c)) for c in bad.columns]), {"ignoreNullFields": "false"})).collect()
        if found:
            raise InvalidTableError(
                f"{snapshot.table_uri}: cannot add {what}: the table's existing row {found[0][0]} violates it. "
                f"Nothing was committed; fix or delete such rows first (or rebuild the table).")


def alter_table(spark: SparkSession, table_uri: str, definition: TableDefinition,
                extra_commit_info: dict[str, Any] | None = None) -> int | None:
    """Apply a table definition to an existing table in one metadata commit (None when nothing
    changes). New CHECK constraints and NOT NULL columns are checked against the rows first."""
    table = DeltaTable(table_uri)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to alter.")
    txn = table.transaction()
    snapshot = txn.snapshot
    metadata = definition.apply(snapshot.metadata, table.uri)
    changed = _metadata_differs(metadata, snapshot.metadata)
    if changed:
        check_existing_rows(spark, snapshot, metadata, txn)
        txn.update_metadata(metadata)
    if definition.apply_clustering(txn) and not changed:
        from ..clustering import clustering_columns
        return txn.commit(operation="CLUSTER BY", parameters={
            "oldClusteringColumns": ",".join(clustering_columns(snapshot)),
            "newClusteringColumns": ",".join(definition.clustering or ())}, extra_commit_info=extra_commit_info)
    if not changed:
        return None
    return txn.commit(operation=describe_change(snapshot.metadata, metadata),
                      parameters={"properties": changed_properties(snapshot.metadata, metadata)},
                      extra_commit_info=extra_commit_info)


# ---------------------------------------------------------------------------------------------------
# write_dataframe


@reruns_after_conflict(rearranged_only)
def write_dataframe(df: DataFrame, table_uri: str, mode: str = "append", partition_by: Sequence[str] | str | None = None,
                    replace_where: str | None = None, overwrite_partitions: bool = False,
                    schema_mode: str | None = None, configuration: dict[str, str] | None = None,
                    operation: str | None = None, operation_parameters: dict[str, Any] | None = None,
                    user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
                    method: str = "native", table_schema: dict[str, Any] | None = None,
                    definition: TableDefinition | None = None,
                    app_transactions: dict[str, int] | None = None,
                    read_version: int | None = None) -> int | None:
    """Write a DataFrame to a Delta table in one commit (creating the table as version 0 when absent).

    mode: 'append' (a blind append), 'overwrite' (remove all live files, add the new ones; history is
    kept), 'error' (the table must not exist), 'ignore' (do nothing when it exists).
    replace_where: with mode='overwrite', only the table's rows matching this SQL predicate are replaced.
    overwrite_partitions: with mode='overwrite', replace only the partitions present in `df`.
    schema_mode: 'merge' adds the data's new columns; 'overwrite' (with mode='overwrite') replaces the
    schema and partitioning.
    table_schema: the existing table's schema after this write (columns added or dropped, e.g. by dbt's
    on_schema_change), committed in the same commit as the data: a failed write changes nothing.
    definition: properties, description, comments, NOT NULL columns and CHECK constraints the table
    gets in this same commit (version 0 included); rows the write keeps must satisfy new constraints.
    app_transactions: {appId: version} recorded in the same commit (`txn` actions): what this write
    consumed, so that a rerun after a crash neither skips nor repeats it.
    read_version: the version of this table `df` was computed from (it reads the table it writes): the
    commit is made against that version (an overwrite removes exactly its files) and is checked, as a
    read of the whole table, against every commit landed since: none is overwritten unseen.
    """
    mode = (mode or "append").lower()
    if mode not in WRITE_MODES:
        raise ValueError(f"{table_uri}: write mode {mode!r} is not one of {', '.join(WRITE_MODES)}.")
    if schema_mode not in SCHEMA_MODES:
        raise ValueError(f"{table_uri}: schema_mode {schema_mode!r} is not one of None, 'merge', 'overwrite'.")
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if (replace_where or overwrite_partitions) and mode != "overwrite":
        raise ValueError(f"{table_uri}: replace_where and overwrite_partitions need mode='overwrite' (got {mode!r}).")
    if replace_where and overwrite_partitions:
        raise ValueError(f"{table_uri}: use either replace_where or overwrite_partitions, not both.")
    if schema_mode == "overwrite" and mode != "overwrite":
        raise ValueError(f"{table_uri}: schema_mode='overwrite' needs mode='overwrite'.")

    table = DeltaTable(table_uri)
    txn = table.transaction(read_version=read_version)
    if read_version is not None and txn.snapshot is not None:
        txn.read_whole_table()  # `df` read the table: what it read is not known file by file
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    name = table.uri
    snapshot = txn.snapshot
    if snapshot is not None and schema_mode != "overwrite":
        df = _type_void_columns(df, snapshot.schema_json)
    data_schema = dataframe_schema(df, name)
    params: dict[str, Any] = {"mode": _SPARK_MODE[mode]}
    started = time.time()

    if snapshot is None:
        parts = _table_partition_names(data_schema, partition_by or [], name)
        metadata = new_metadata(data_schema, parts, configuration, table=name)
        if definition is not None:
            metadata = definition.apply(metadata, name)
        txn.update_metadata(metadata)
        if definition is not None:
            definition.apply_clustering(txn)
        schema_json, conf = txn.metadata.schema_json, dict(txn.metadata.configuration)
        remove = None
    else:
        if mode in ("error", "errorifexists"):
            raise InvalidTableError(
                f"{name}: a Delta table already exists here (version {snapshot.version}); use mode='append' "
                f"or 'overwrite'.")
        if mode == "ignore":
            return None
        current = snapshot.schema_json
        parts = list(snapshot.partition_columns)
        conf = dict(snapshot.configuration)
        new_conf = {**conf, **{str(k): str(v) for k, v in (configuration or {}).items()}}
        if schema_mode == "overwrite" and not (replace_where or overwrite_partitions):
            if partition_by is not None:
                parts = _table_partition_names(data_schema, partition_by, name)
            else:
                parts = _table_partition_names(data_schema, parts, name) if all(
                    find_field(data_schema, p) for p in parts) else []
            schema_json = data_schema
        else:
            if partition_by is not None and partition_by and not _same_columns(partition_by, parts):
                raise InvalidTableError(
                    f"{name}: the table is partitioned by {parts}, not {list(partition_by)}. Overwrite it with "
                    f"schema_mode='overwrite' to change its partitioning.")
            if table_schema is not None:
                schema_json = checked_table_schema(name, current, table_schema, parts)
                check_append_schema(name, schema_json, data_schema)
                new_conf = _mapped_if_dropping(name, new_conf, current, schema_json)
            elif schema_mode == "merge":
                schema_json = evolved_schema(name, current, data_schema)
            else:
                check_append_schema(name, current, data_schema)
                schema_json = current
        metadata = Metadata(
            id=snapshot.metadata.id, schema_string=schema_string(schema_json), partition_columns=parts,
            configuration=new_conf, format=snapshot.metadata.format, name=snapshot.metadata.name,
            description=snapshot.metadata.description, created_time=snapshot.metadata.created_time)
        if definition is not None:
            metadata = definition.apply(metadata, name)
        if _metadata_differs(metadata, snapshot.metadata):
            replaces_all = mode == "overwrite" and not (replace_where or overwrite_partitions)
            if not replaces_all:
                # rows this write keeps must satisfy what the table now declares
                check_existing_rows(df.sparkSession, snapshot, metadata, txn)
            txn.update_metadata(metadata, replaces_table=replaces_all)
        if definition is not None:
            definition.apply_clustering(txn)
        schema_json, conf = txn.metadata.schema_json, dict(txn.metadata.configuration)
        remove = None
        if mode == "overwrite":
            if replace_where:
                remove = _delete_plan(df.sparkSession, txn, replace_where)
                params["predicate"] = json.dumps([replace_where])
            elif not overwrite_partitions or not parts:
                txn.read_whole_table()
                remove = {"remove": snapshot.files, "rewrite": snapshot.files.slice(0, 0), "keep": None,
                          "deleted": None}
    params["partitionBy"] = json.dumps(parts)

    df = _fill_missing(df, schema_json)
    if replace_where and snapshot is not None:
        df = _refuse_rows_outside(df, replace_where, name)
    materialize = bool(txn.protocol and txn.protocol.has_writer_feature("materializePartitionColumns"))
    adds = write_files(df, name, parts, schema_json, conf, method=method,
                       store_partition_columns=materialize)
    kept_adds: list[AddFile] = []
    cdc = []
    marked = remove.get("marked") if remove is not None else None
    written_dv = [marked.dv_file] if marked is not None and marked.dv_file else []
    if marked is not None:
        try:
            cdc = _deleted_rows_changes(df.sparkSession, snapshot, remove["marked_files"], replace_where, method,
                                        adds, txn.metadata)
        except BaseException:
            txn.discard_uncommitted([*adds, *written_dv])
            raise
    if remove is not None and remove.get("keep") is not None:
        kept_adds = _write_kept_rows(txn, remove, name, parts, schema_json, conf, method, materialize)
        rewritten = pa.concat_tables([remove["remove"], remove["rewrite"]])
        try:
            cdc = _deleted_rows_changes(df.sparkSession, snapshot, rewritten, replace_where, method, adds,
                                        txn.metadata)
        except BaseException:
            txn.discard_uncommitted([*adds, *kept_adds])
            raise

    removes: list[RemoveFile] = []
    removed_files = None
    if overwrite_partitions and snapshot is not None and parts and remove is None:
        # Dynamic partition overwrite: the partitions the new data lands in are replaced.
        keys = [physical_names(schema_json, conf)[c] for c in parts]  # as the log keys them
        written = {tuple(a.partition_values.get(k) for k in keys) for a in adds}
        txn.read_predicate(lambda pv, _w=written, _k=keys: tuple(pv.get(k) for k in _k) in _w)
        mask = [tuple(dict(pv or []).get(k) for k in keys) in written
                for pv in snapshot.files.column("partition_values").to_pylist()]
        removed_files = snapshot.files.filter(pa.array(mask, pa.bool_()))
        params["partitionOverwriteMode"] = "DYNAMIC"
    elif remove is not None:
        removed_files = pa.concat_tables([remove["remove"], remove["rewrite"]]) \
            if remove["rewrite"].num_rows else remove["remove"]
    if removed_files is not None:
        removes = _removes(removed_files)
    dv_adds = []
    if marked is not None:  # merge-on-read: the replaced rows are marked in deletion vectors
        removes += marked.removes
        dv_adds = marked.adds

    if mode == "append" and snapshot is not None:
        read = _target_files_read(df, snapshot)
        if read is not None:
            # INSERT ... SELECT from its own target: not blind; it conflicts as a MERGE would (DESIGN.md).
            txn.read_files(read)
            if snapshot.partition_columns:
                txn.read_predicate(lambda pv: True)
    if mode == "append" and snapshot is not None and not adds and not txn.metadata_changed \
            and txn.protocol == snapshot.protocol and not app_transactions:
        return None  # an empty append changes nothing
    txn.add_actions([*removes, *adds, *kept_adds, *dv_adds, *cdc, *_set_transactions(app_transactions)])
    metrics = {
        "numFiles": len(adds) + len(kept_adds),
        "numOutputRows": _sum_records(adds) + _sum_records(kept_adds),
        "numOutputBytes": sum(a.size for a in adds) + sum(a.size for a in kept_adds),
    }
    if removes:
        metrics["numRemovedFiles"] = len(removes) - len(dv_adds)
        metrics["numRemovedBytes"] = _bytes(removed_files) if removed_files is not None else 0
    if dv_adds:
        metrics["numDeletionVectorsAdded"] = len(dv_adds)
    if remove is not None and remove.get("keep") is not None:
        metrics["numCopiedRows"] = _sum_records(kept_adds)
    if remove is not None and remove.get("deleted") is not None:
        metrics["numDeletedRows"] = remove["deleted"]
    metrics["executionTimeMs"] = int((time.time() - started) * 1000)
    operation = operation or "WRITE"
    if operation_parameters:
        params.update(operation_parameters)
    return txn.commit_or_discard([*adds, *kept_adds, *written_dv, *cdc], operation=operation, parameters=params,
                              metrics=metrics, user_metadata=user_metadata, extra_commit_info=extra_commit_info)


# ---------------------------------------------------------------------------------------------------
# delete


@reruns_after_conflict(rearranged_only)
def delete(spark: SparkSession, table_uri: str, predicate: str | None = None,
           user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
           method: str = "native") -> int | None:
    """DELETE FROM table WHERE predicate (None/'true': every row), copy-on-write, in one commit.
    Returns None when no row matched (nothing is committed)."""
    table = DeltaTable(table_uri)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to delete from.")
    txn = table.transaction()
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    started = time.time()
    plan = _delete_plan(spark, txn, predicate)
    snapshot = txn.snapshot
    marked = plan.get("marked")
    if marked is not None:
        return _commit_marked_delete(spark, txn, plan, predicate, method, started, user_metadata,
                                     extra_commit_info)
    removed = pa.concat_tables([plan["remove"], plan["rewrite"]]) if plan["rewrite"].num_rows else plan["remove"]
    if removed.num_rows == 0:
        return None
    adds: list[AddFile] = []
    cdc = []
    if plan["keep"] is not None:
        materialize = bool(txn.protocol and txn.protocol.has_writer_feature("materializePartitionColumns"))
        adds = _write_kept_rows(txn, plan, snapshot.table_uri, snapshot.partition_columns, snapshot.schema_json,
                                snapshot.configuration, method, materialize)
        try:
            cdc = _deleted_rows_changes(spark, snapshot, removed, predicate, method)
        except BaseException:
            txn.discard_uncommitted(adds)
            raise
    txn.add_actions([*_removes(removed), *adds, *cdc])
    metrics = {
        "numRemovedFiles": removed.num_rows, "numAddedFiles": len(adds),
        "numRemovedBytes": _bytes(removed), "numAddedBytes": sum(a.size for a in adds),
        "numCopiedRows": _sum_records(adds), "executionTimeMs": int((time.time() - started) * 1000),
    }
    if plan["deleted"] is not None:
        metrics["numDeletedRows"] = plan["deleted"]
    pred = (predicate or "").strip()
    return txn.commit_or_discard([*adds, *cdc], operation="DELETE",
                              parameters={"predicate": json.dumps([pred] if pred else [])},
                              metrics=metrics, user_metadata=user_metadata, extra_commit_info=extra_commit_info)


def _commit_marked_delete(spark: SparkSession, txn: Any, plan: dict[str, Any], predicate: str | None, method: str,
                          started: float, user_metadata: str | None,
                          extra_commit_info: dict[str, Any] | None) -> int | None:
    """The commit of a merge-on-read DELETE: each touched file is removed as it was and added again
    with its new deletion vector (or only removed when no row is left)."""
    marked: deletion_vectors.MarkedRows = plan["marked"]
    if not marked.removes:
        return None
    snapshot = txn.snapshot
    written = [marked.dv_file] if marked.dv_file else []
    try:
        cdc = _deleted_rows_changes(spark, snapshot, plan["marked_files"], predicate, method)
    except BaseException:
        txn.discard_uncommitted(written)
        raise
    txn.add_actions([*marked.removes, *marked.adds, *cdc])
    metrics = {
        "numRemovedFiles": marked.files_emptied, "numAddedFiles": 0, "numCopiedRows": 0,
        "numDeletionVectorsAdded": len(marked.adds), "numDeletionVectorsRemoved":
            sum(1 for r in marked.removes if r.deletion_vector), "numDeletedRows": marked.rows,
        "executionTimeMs": int((time.time() - started) * 1000),
    }
    pred = (predicate or "").strip()
    return txn.commit_or_discard([*written, *cdc], operation="DELETE",
                                 parameters={"predicate": json.dumps([pred] if pred else [])},
                                 metrics=metrics, user_metadata=user_metadata, extra_commit_info=extra_commit_info)


# ---------------------------------------------------------------------------------------------------
# merge

def _assignments(spec: Any, target_columns: list[str], source_columns: list[str], source_alias: str,
                 target_alias: str, table: str, what: str) -> dict[str, str]:
    """target column -> SQL expression, for '*' or a dict (keys matched to target columns ignoring case)."""
    if spec == "*":
        src = {c.lower(): c for c in source_columns}
        out = {}
        for c in target_columns:
            s = src.get(c.lower())
            # UPDATE SET * keeps a column the source lacks; INSERT * fills it with null
            out[c] = (f"{quote_identifier(source_alias)}.{quote_identifier(s)}" if s is not None else
                      (f"{quote_identifier(target_alias)}.{quote_identifier(c)}" if what == "update" else "null"))
        return out
    if not isinstance(spec, dict):
        raise ValueError(f"{table}: {what} must be '*' or a dict of target column -> SQL expression.")
    by_lower = {c.lower(): c for c in target_columns}
    out = {}
    for k, v in spec.items():
        c = by_lower.get(str(k).strip("`").lower())
        if c is None:
            raise SchemaMismatchError(
                f"{table}: merge {what} sets column '{k}', which the table does not have; columns are "
                f"{', '.join(target_columns)}.")
        out[c] = str(v)
    return out


def _assigned(df: DataFrame, expr: str, wanted: Any) -> Column:
    """A MERGE clause's value `expr`, over `df`, as the target column's type `wanted`. Struct fields are
    assigned by name, as Delta's MERGE assigns them; Spark's cast would match them by position."""
    from pyspark.sql.types import ArrayType, MapType

    column = F.expr(expr)
    if not isinstance(wanted, (StructType, ArrayType, MapType)):
        return column.cast(wanted)
    return cast_by_name(column, df.select(column).schema.fields[0].dataType, wanted)


def _stored_value(column: str, stored: Any, wanted: Any) -> Column:
    """A target column's value as the table's (possibly evolved) type `wanted`: null for a column the
    files do not hold yet (`stored` None), upcast for one whose type this commit widens."""
    if stored is None:
        return F.lit(None).cast(wanted)
    return cast_by_name(F.col(column), stored, wanted)


class MergeDuplicateSourceError(InvalidTableError):
    """Several source rows matched one target row (Delta's DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE)."""


@reruns_after_conflict(rearranged_only)
def merge(spark: SparkSession, table_uri: str, source_df: DataFrame, on: str,
          when_matched_update: Any = None, when_matched_condition: str | None = None,
          when_matched_delete_condition: str | None = None, when_not_matched_insert: Any = None,
          when_not_matched_condition: str | None = None, source_alias: str = "DBT_INTERNAL_SOURCE",
          target_alias: str = "DBT_INTERNAL_DEST", operation: str = "MERGE",
          user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
          method: str = "native", unique_keys: dict[str, str] | None = None,
          unique_keys_where: str | None = None, table_schema: dict[str, Any] | None = None,
          when_not_matched_by_source_delete: bool = False, when_not_matched_by_source_update: Any = None,
          when_not_matched_by_source_condition: str | None = None,
          app_transactions: dict[str, int] | None = None, read_version: int | None = None) -> int | None:
    """MERGE INTO the table USING source ON `on` (SQL with the two aliases), copy-on-write, one commit.

    unique_keys: {source column: name to report} of the key columns (dbt's unique_key): they must hold
    no NULL — a NULL key never matches, so an upsert would insert that row again on every run — and no
    key may appear twice in the source (rows where `unique_keys_where` holds, when given), matched or
    not, or one run would leave duplicates.
    table_schema: the table's schema after this merge (columns added or dropped), committed with the data.

    Matched target rows: deleted when `when_matched_delete_condition` holds (checked first), else updated
    with `when_matched_update` ('*' or {target column: SQL expression}) when `when_matched_condition`
    (default true) holds. Unmatched source rows: inserted with `when_not_matched_insert` when
    `when_not_matched_condition` holds. Target rows no source row matches: deleted
    (`when_not_matched_by_source_delete`) or updated with `when_not_matched_by_source_update` ({target
    column: SQL over the target's columns}) when `when_not_matched_by_source_condition` (default true)
    holds; such a clause reads every row of the table. Returns the version, or None when nothing changed
    (and no `app_transactions`, {appId: version}, are to be recorded: see `write_dataframe`).
    read_version: the version of this table the source was computed from (it reads its own target):
    the merge runs against that version, so that a commit landed since is a conflict rather than
    overwritten by rows computed before it (a lost update).
    """
    table = DeltaTable(table_uri)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to merge into; create it first.")
    txn = table.transaction(read_version=read_version)
    if read_version is not None:
        txn.read_whole_table()  # the source read the table: what it read is not known file by file
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    name = table.uri
    snapshot = txn.snapshot
    schema_json = snapshot.schema_json
    if table_schema is not None:
        schema_json = checked_table_schema(name, snapshot.schema_json, table_schema, snapshot.partition_columns)
        if schema_json != snapshot.schema_json:
            conf = _mapped_if_dropping(name, dict(snapshot.configuration), snapshot.schema_json, schema_json)
            txn.update_metadata(replace(snapshot.metadata, schema_string=schema_string(schema_json),
                                        configuration=conf))
    target_schema = StructType.fromJson(schema_json)
    target_columns = [f.name for f in target_schema.fields]
    # Columns the table gains in this commit are not in its files yet: old rows read them as null.
    stored = {f["name"].lower(): f["type"] for f in snapshot.schema_json["fields"]}
    started = time.time()
    S, T = quote_identifier(source_alias), quote_identifier(target_alias)

    update = _assignments(when_matched_update, target_columns, source_df.columns, source_alias, target_alias,
                          name, "update") if when_matched_update is not None else None
    insert = _assignments(when_not_matched_insert, target_columns, source_df.columns, source_alias, target_alias,
                          name, "insert") if when_not_matched_insert is not None else None
    has_matched = update is not None or when_matched_delete_condition is not None
    if when_not_matched_by_source_delete and when_not_matched_by_source_update is not None:
        raise ValueError(f"{name}: a merge deletes or updates the rows the source does not match, not both.")
    by_source_update = _assignments(when_not_matched_by_source_update, target_columns, [], source_alias,
                                    target_alias, name, "update") \
        if when_not_matched_by_source_update is not None else None
    by_source = when_not_matched_by_source_delete or by_source_update is not None
    # the target rows of matched pairs are needed by row (file, row index) for either kind of clause
    by_row = has_matched or by_source
    # Merge-on-read marks the changed rows and writes only their new versions: those (and the change
    # feed's pre-images) are built from target values carried through the matching join, so the touched
    # files are not scanned a second time. Rows no source row matches come from a scan of their own.
    marking = _marks_enabled(txn)
    carry = marking and not by_source
    feed = change_data.is_enabled(txn.metadata.configuration)

    # The source is read several times (bounds, join, inserts): compute it once, as delta-spark does.
    # Each row gets an id (stable: it is computed once, into the cache) so the inserts are the source
    # rows whose id the matching join did not see, without joining the target a second time.
    # On a local master its partitions are merged down to the cores first: caching many small
    # partitions costs more than computing them (a 100k-row source of 16 partitions: 0.53 s, of 2: 0.32 s).
    # (Not on a cluster, where the cores registered so far may be a few of those to come.)
    if is_local_master(spark):
        source_df = source_df.coalesce(spark.sparkContext.defaultParallelism)
    source = source_df.withColumn(_SOURCE_ID, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    matched_rows = None
    phases = _Phases(f"{operation} {name}")
    try:
        # 1. Candidate files: min/max of the source's equi-join keys (in the job that counts and caches
        # the source), and target-only conjuncts.
        keys = [(s, t) for s, t in sql.equi_keys(on, source_alias, target_alias)
                if find_field(schema_json, t) is not None and s.lower() in {c.lower() for c in source.columns}]
        aggs = [F.count(F.lit(1)).alias("n")]
        src_types = {f.name.lower(): f.dataType.typeName() for f in source.schema.fields}
        for i, (s, _) in enumerate(keys):
            c = F.col(quote_identifier(s))
            if src_types[s.lower()] == "timestamp":
                # as epoch micros: Python would read a collected timestamp in its own time zone
                aggs += [F.unix_micros(F.min(c)).alias(f"mn{i}"), F.unix_micros(F.max(c)).alias(f"mx{i}")]
            else:
                aggs += [F.min(c).alias(f"mn{i}"), F.max(c).alias(f"mx{i}")]
        bounds = source.agg(*aggs).collect()[0]
        phases.done("source")
        num_source = bounds["n"]
        if num_source == 0 and not by_source:
            return _record_only(txn, app_transactions, operation, extra_commit_info)
        small_source = _fits_broadcast(source)
        if unique_keys:
            _check_unique_keys(source, unique_keys, unique_keys_where, name)
        exprs = []
        for i, (s, t) in enumerate(keys):
            lo, hi = bounds[f"mn{i}"], bounds[f"mx{i}"]
            if src_types[s.lower()] == "timestamp" and lo is not None:
                lo, hi = _utc_from_micros(lo), _utc_from_micros(hi)
            if lo is None:  # every source key is null: equality matches nothing
                exprs.append("false")
            else:
                exprs.append(f"{quote_identifier(t)} >= {_sql_literal(lo)} and "
                             f"{quote_identifier(t)} <= {_sql_literal(hi)}")
        exprs += [f"({c})" for c in sql.only_alias_conjuncts(on, target_alias, source_alias)]
        prune_text = " and ".join(f"({e})" for e in exprs)
        prune_expr = parse_sql_predicate(prune_text) if prune_text else ALWAYS
        candidates = files_matching(snapshot, prune_expr) if prune_expr is not ALWAYS else snapshot.files
        txn.read_files(candidates)
        # what the merge read: the rows within the source's key bounds (at WriteSerializable a concurrent
        # file whose min/max stats lie outside them cannot hold a row this merge would have matched)
        txn.read_predicate(bind(prune_expr, schema_json, snapshot.partition_columns, snapshot.configuration))
        if by_source:
            txn.read_whole_table()  # any row of the table may be one the source does not match

        # 2. Matched rows with the action each gets (at most one source row per target row). Every
        # matched pair is kept (action null when no clause applies): their source ids rule out inserts.
        # Only the columns the condition and clauses use are read from the target (Parquet pruning), and
        # a small source is broadcast, so the target's rows are not shuffled.
        touched = candidates.slice(0, 0)
        n_updated = n_deleted = 0
        src = source.alias(source_alias)
        file_keys = _FileKeys(spark, snapshot, snapshot.files if by_source else candidates)
        file_key = file_keys.column
        # Merge-on-read sets the update's values from the source alone (SET * and the like) after the
        # match, on the source rows of updated pairs: the matching join then carries row positions, not
        # new rows, and broadcasts only the source columns `on` and the conditions use.
        late_update = _source_only(src, update) if carry and update else set()
        on_driver = None
        if (candidates.num_rows and carry and not feed and small_source and num_source <= _DRIVER_MATCH_SOURCE_ROWS
                and late_update == set(target_columns) and not when_matched_condition
                and not when_matched_delete_condition):
            on_driver = _match_on_driver(spark, snapshot, candidates, source, on, keys, target_schema)
        # (an upsert whose every row updates one target row: its new rows are the source's own rows)
        each_source_row_once = False
        # row tracking: updated rows keep their row IDs, written into the hidden columns (driver match)
        keep_ids, hidden = False, []
        if on_driver is not None:
            matched, touched, driver_marks, each_source_row_once = on_driver
            keep_ids = _ROW_ID in matched.column_names
            if not (each_source_row_once and not keep_ids):  # else the source rows are the new rows
                matched_rows = spark.createDataFrame(matched)
            if keep_ids:
                hidden = [f["name"] for f in row_tracking.materialized_fields(snapshot.configuration)]
            n_updated = sum(len(rows) for _, rows in driver_marks)
            phases.done("match (on the driver)")
        elif candidates.num_rows and (by_row or insert is not None):
            # Rows deleted by DVs are filtered out after the join, on the few rows it keeps (a file's
            # key and row index are then at hand anyway), rather than on every row scanned.
            late = file_keys.deleted_rows(candidates) if by_row and has_deletion_vectors(candidates) else None
            # row tracking: the updated rows' new versions keep their row IDs (merge-on-read), read from
            # the hidden column where OPTIMIZE materialized them, else baseRowId + the row's position
            keep_ids = carry and by_row and row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration,
                                                                       candidates)
            target_keys = file_keys
            if keep_ids:
                fields = row_tracking.materialized_fields(snapshot.configuration)
                hidden = [f["name"] for f in fields]
                target_keys = _FileKeys(spark, _WithHiddenColumns(snapshot, fields[:1]), candidates)
            target = (target_keys.dataframe(candidates, with_deleted=late is not None) if by_row else
                      files_dataframe(spark, snapshot, candidates)).alias(target_alias)
            joined = target.join(F.broadcast(src) if small_source else src, F.expr(on), "inner")
            if late is not None:
                joined = joined.filter(~late)
            if by_row:
                delete_cond = F.coalesce(F.expr(when_matched_delete_condition), F.lit(False)) \
                    if when_matched_delete_condition else F.lit(False)
                update_cond = (F.coalesce(F.expr(when_matched_condition), F.lit(False))
                               if when_matched_condition else F.lit(True)) if update is not None else F.lit(False)
                action = F.when(delete_cond, F.lit("delete")).when(update_cond, F.lit("update"))
                new_values = [_assigned(joined, update[c], target_schema[c].dataType).alias(_NEW + str(i))
                              for i, c in enumerate(target_columns)
                              if update and c in update and c not in late_update]
                key_cols = [F.col(f"{S}.{quote_identifier(s)}").alias(f"__deltalog_key{i}")
                            for i, (s, _) in enumerate(keys)]
                new_values += [F.lit(None).cast(target_schema[c].dataType).alias(_BY_SOURCE_NEW + str(i))
                               for i, c in enumerate(target_columns) if by_source_update and c in by_source_update]
                if carry:
                    new_values += [_stored_value(f"{T}.{quote_identifier(c)}", stored.get(c.lower()),
                                                 target_schema[c].dataType).alias(_OLD + str(i))
                                   for i, c in enumerate(target_columns) if feed or not (update and c in update)]
                if keep_ids:
                    new_values.append(F.col(f"{T}.{quote_identifier(hidden[0])}").alias(_ROW_ID))
                matched_rows = joined.select(F.col(f"{T}.{file_key}").alias(file_key),
                                             F.col(f"{T}.{ROW_INDEX_COLUMN}").alias(ROW_INDEX_COLUMN),
                                             action.alias(_ACTION), *new_values, *key_cols,
                                             F.col(f"{S}.{_SOURCE_ID}").alias(_SOURCE_ID))
                if keep_ids:
                    matched_rows = _with_default_row_ids(spark, snapshot, candidates, file_keys, matched_rows)
            else:
                matched_rows = joined.select(F.col(f"{S}.{_SOURCE_ID}").alias(_SOURCE_ID))
            matched_rows = matched_rows.persist(StorageLevel.MEMORY_AND_DISK)
        n_by_source_updated = n_by_source_deleted = 0
        acting = None
        if by_row and matched_rows is not None:
            acting = matched_rows.filter(F.col(_ACTION).isNotNull())
        if by_source and snapshot.files.num_rows:
            # 2b. Target rows no source row matched (in any file), with the action the clause gives them.
            everything = file_keys.dataframe(snapshot.files)
            if matched_rows is not None:
                seen_rows = matched_rows.select(file_key, ROW_INDEX_COLUMN).distinct()
                everything = everything.join(seen_rows, [file_key, ROW_INDEX_COLUMN], "left_anti")
            unmatched_target = everything.alias(target_alias)
            if when_not_matched_by_source_condition:
                unmatched_target = unmatched_target.filter(
                    F.coalesce(F.expr(when_not_matched_by_source_condition), F.lit(False)))
            kind = "by_source_delete" if when_not_matched_by_source_delete else "by_source_update"
            cols = [F.col(file_key), F.col(ROW_INDEX_COLUMN), F.lit(kind).alias(_ACTION)]
            cols += [F.lit(None).cast(target_schema[c].dataType).alias(_NEW + str(i))
                     for i, c in enumerate(target_columns) if update and c in update]
            cols += [_assigned(unmatched_target, by_source_update[c], target_schema[c].dataType).alias(_BY_SOURCE_NEW + str(i))
                     for i, c in enumerate(target_columns) if by_source_update and c in by_source_update]
            cols += [F.lit(None).alias(f"__deltalog_key{i}") for i, _ in enumerate(keys)]
            cols += [F.lit(None).cast("long").alias(_SOURCE_ID)]
            by_source_rows = unmatched_target.select(*cols)
            if acting is not None:  # the same columns and types as the matched rows' actions
                by_source_rows = by_source_rows.select(*[F.col(c).cast(acting.schema[c].dataType).alias(c)
                                                         for c in acting.columns])
                acting = acting.unionByName(by_source_rows)
            else:
                acting = by_source_rows
            candidates = snapshot.files  # the files touched are looked up among all of them
        hit_rows = None
        if on_driver is not None:
            pass  # the driver's match gave the rows and files already
        elif acting is not None and marking:
            # merge-on-read needs the changed rows' positions on the driver anyway (for the DVs)
            hit_rows = acting.select(file_key, ROW_INDEX_COLUMN, _ACTION).toArrow()
            phases.done("match")
            per_file = _actions_per_file(hit_rows, file_key)
        elif acting is not None:
            per_file = (acting.groupBy(file_key, ROW_INDEX_COLUMN)
                        .agg(F.count(F.lit(1)).alias("n"), F.max(_ACTION).alias("a"))
                        .groupBy(file_key)
                        .agg(F.max("n").alias("max_n"),
                             F.sum(F.when(F.col("a") == "update", 1).otherwise(0)).alias("u"),
                             F.sum(F.when(F.col("a") == "delete", 1).otherwise(0)).alias("d"),
                             F.sum(F.when(F.col("a") == "by_source_update", 1).otherwise(0)).alias("bu"),
                             F.sum(F.when(F.col("a") == "by_source_delete", 1).otherwise(0)).alias("bd"))
                        .collect())
        if acting is not None and on_driver is None:
            dup = [r for r in per_file if r["max_n"] > 1]
            if dup:
                sample = (acting.filter(F.col(file_key) == dup[0][file_key])
                          .groupBy(file_key, ROW_INDEX_COLUMN).agg(F.count(F.lit(1)).alias("n"),
                                                                      *[F.first(f"__deltalog_key{i}").alias(s)
                                                                        for i, (s, _) in enumerate(keys)])
                          .filter("n > 1").limit(1).collect())
                raise _duplicate_source_error(name, keys, sample[0] if sample else None,
                                              sample[0]["n"] if sample else ">1")
            row_of = file_keys.rows_of(candidates)
            rows = []
            for r in per_file:
                rows.append(row_of(r[file_key]))
                n_updated += int(r["u"])
                n_deleted += int(r["d"])
                n_by_source_updated += int(r["bu"])
                n_by_source_deleted += int(r["bd"])
            touched = _take(candidates, rows)

        # 3. New content: the touched files' rows (updated, deleted or copied) plus the inserts. The
        # changes are few next to the touched rows: broadcast them rather than shuffle every row.
        parts: list[DataFrame] = []
        # merge-on-read: the changed rows are marked in deletion vectors and only their new versions
        # are written; copy-on-write rewrites every row of the touched files
        marked = None
        if touched.num_rows and carry:
            if acting is None:  # (matched on the driver) no join: each source row updates one target row
                updated, deleted = src, None
            else:
                updated = acting.filter(F.col(_ACTION) == "update")
                deleted = acting.filter(F.col(_ACTION) == "delete")
            if acting is not None and late_update:  # the source rows of the updated pairs, for the values they set
                pairs = updated.alias("__deltalog_pair")
                # the driver's pairs are at hand and narrow: broadcast them, not the source's rows
                pairs, rows = (F.broadcast(pairs), src) if on_driver else \
                    (pairs, F.broadcast(src) if small_source else src)
                updated = rows.join(pairs, F.col(f"__deltalog_pair.{_SOURCE_ID}") == F.col(f"{S}.{_SOURCE_ID}"))
            old_cols = [F.col(_OLD + str(i)).alias(c) for i, c in enumerate(target_columns)] if feed else []
            # the new version keeps the row's ID (row tracking); its commit version is this commit's
            row_id = f"__deltalog_pair.{_ROW_ID}" if late_update else _ROW_ID
            if _atomic_types(target_schema) and not feed:  # SQL text: one JVM call; column objects cost 3 each
                exprs = [(f"CAST(({update[c]}) AS {target_schema[c].dataType.simpleString()})" if c in late_update else
                          quote_identifier((_NEW if update and c in update else _OLD) + str(i)))
                         + f" AS {quote_identifier(c)}" for i, c in enumerate(target_columns)]
                if keep_ids:
                    exprs += [f"{'.'.join(map(quote_identifier, row_id.split('.')))} AS {quote_identifier(hidden[0])}",
                              f"CAST(NULL AS BIGINT) AS {quote_identifier(hidden[1])}"]
                parts.append(updated.selectExpr(*exprs))
            else:  # (the change feed selects out_cols again; a nested type's simpleString() is no SQL)
                out_cols = [(_assigned(updated, update[c], target_schema[c].dataType) if c in late_update else
                             F.col((_NEW if update and c in update else _OLD) + str(i))).alias(c)
                            for i, c in enumerate(target_columns)]
                if keep_ids:
                    out_cols += [F.col(row_id).alias(hidden[0]), F.lit(None).cast("long").alias(hidden[1])]
                parts.append(updated.select(*out_cols))
        elif touched.num_rows:
            # row tracking: every row rewritten keeps its row ID, and copied rows their commit version
            keep_ids = row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, touched)
            if keep_ids:
                hidden = [f["name"] for f in row_tracking.materialized_fields(snapshot.configuration)]
                old = rows_with_row_ids(spark, snapshot, touched, like=file_keys)
            else:
                old = file_keys.dataframe(touched)
            changes = acting.select(file_key, ROW_INDEX_COLUMN, _ACTION,
                                    *[c for c in acting.columns if c.startswith((_NEW, _BY_SOURCE_NEW))])
            broadcast_changes = small_source and not by_source  # by-source changes may be many rows
            with_actions = old.join(F.broadcast(changes) if broadcast_changes else changes,
                                    [file_key, ROW_INDEX_COLUMN], "inner" if marking else "left")
            j = with_actions.filter(F.col(_ACTION).isNull() | ~F.col(_ACTION).isin("delete", "by_source_delete"))
            out_cols, old_cols = [], []
            for i, c in enumerate(target_columns):
                current = _stored_value(quote_identifier(c), stored.get(c.lower()), target_schema[c].dataType)
                old_cols.append(current.alias(c))
                value = current
                if by_source_update and c in by_source_update:
                    value = F.when(F.col(_ACTION) == "by_source_update", F.col(_BY_SOURCE_NEW + str(i))).otherwise(value)
                if update and c in update:
                    value = F.when(F.col(_ACTION) == "update", F.col(_NEW + str(i))).otherwise(value)
                out_cols.append(value.alias(c))
            if keep_ids:
                rewritten = F.col(_ACTION).isin("update", "by_source_update")
                out_cols += [F.col(quote_identifier(hidden[0])).alias(hidden[0]),
                             F.when(rewritten, F.lit(None).cast("long"))
                             .otherwise(F.col(quote_identifier(hidden[1]))).alias(hidden[1])]
            parts.append(j.select(*out_cols))
            updated = with_actions.filter(F.col(_ACTION).isin("update", "by_source_update"))
            deleted = with_actions.filter(F.col(_ACTION).isin("delete", "by_source_delete"))
        n_insert_df = None
        if insert is not None and not each_source_row_once:
            if matched_rows is not None:
                seen = matched_rows.select(_SOURCE_ID)
                unmatched = src.join(F.broadcast(seen) if small_source else seen, _SOURCE_ID,
                                     "left_anti").alias(source_alias)
            else:
                unmatched = src
            if when_not_matched_condition:
                unmatched = unmatched.filter(F.coalesce(F.expr(when_not_matched_condition), F.lit(False)))
            # A source alias stays resolvable in the insert expressions.
            n_insert_df = unmatched.select(*[_assigned(unmatched, insert.get(c, "null"), target_schema[c].dataType).alias(c)
                                             for c in target_columns],
                                           *[F.lit(None).cast("long").alias(h) for h in hidden])
            parts.append(n_insert_df)

        if not touched.num_rows and n_insert_df is None and not txn.metadata_changed:
            return _record_only(txn, app_transactions, operation, extra_commit_info)
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        if carry:
            out = _in_few_files(out, n_updated + num_source, snapshot)
        materialize = bool(txn.protocol and txn.protocol.has_writer_feature("materializePartitionColumns"))
        # the metadata this commit writes (with any new column's physical name under column mapping)
        write_schema = txn.metadata.schema_json
        if keep_ids:
            write_schema = row_tracking.with_materialized_fields(write_schema, txn.metadata.configuration)
        adds = write_files(out, name, snapshot.partition_columns, write_schema,
                           dict(txn.metadata.configuration), method=method, store_partition_columns=materialize)
        if keep_ids:
            adds = [replace(a, stats=row_tracking.without_hidden_stats(a.stats, txn.metadata.configuration))
                    for a in adds]
            txn.rows_keep_ids = True
        written = _sum_records(adds)
        phases.done("write")
        if marking and touched.num_rows:
            try:
                rows_by_file = driver_marks if on_driver else _rows_by_file(file_keys, touched, hit_rows)
                marked = deletion_vectors.mark_rows(snapshot.store, rows_by_file, now_ms())
            except BaseException:
                txn.discard_uncommitted(adds)
                raise
            touched_rows = n_updated + n_deleted + n_by_source_updated + n_by_source_deleted
        else:
            touched_rows = _records(touched) if touched.num_rows else 0
        if touched_rows is None:
            touched_rows = files_dataframe(spark, snapshot, touched).count()
        copied = touched_rows - n_updated - n_deleted - n_by_source_updated - n_by_source_deleted
        written_dv = [marked.dv_file] if marked is not None and marked.dv_file else []
        inserted = written - copied - n_updated - n_by_source_updated
        if not touched.num_rows and inserted == 0 and not txn.metadata_changed:
            txn.discard_uncommitted(adds)
            return _record_only(txn, app_transactions, operation, extra_commit_info)
        adds_committed = adds if marked is None else [*adds, *marked.adds]
        removes = _removes(touched) if marked is None else marked.removes
        cdc = []
        if touched.num_rows and feed:
            # the rows this merge changed, for the change data feed (copied rows are not changes)
            changed = [change_rows(updated.select(*old_cols), schema_json, change_data.UPDATE_PREIMAGE),
                       change_rows(updated.select(*out_cols), schema_json, change_data.UPDATE_POSTIMAGE),
                       change_rows(deleted.select(*old_cols), schema_json, change_data.DELETE)]
            if n_insert_df is not None:
                changed.append(change_rows(n_insert_df, schema_json, change_data.INSERT))
            try:
                cdc = write_change_data(changed, name, snapshot.partition_columns, txn.metadata.schema_json,
                                        dict(txn.metadata.configuration), method=method)
            except BaseException:
                txn.discard_uncommitted([*adds, *written_dv])
                raise
        txn.add_actions([*removes, *adds_committed, *cdc, *_set_transactions(app_transactions)])
        matched_preds = []
        if when_matched_delete_condition is not None:
            matched_preds.append({"actionType": "delete", "predicate": when_matched_delete_condition})
        if update is not None:
            p = {"actionType": "update"}
            if when_matched_condition:
                p["predicate"] = when_matched_condition
            matched_preds.append(p)
        not_matched = []
        if insert is not None:
            p = {"actionType": "insert"}
            if when_not_matched_condition:
                p["predicate"] = when_not_matched_condition
            not_matched.append(p)
        by_source_preds = []
        if by_source:
            p = {"actionType": "delete" if when_not_matched_by_source_delete else "update"}
            if when_not_matched_by_source_condition:
                p["predicate"] = when_not_matched_by_source_condition
            by_source_preds.append(p)
        params = {"predicate": json.dumps([on]), "matchedPredicates": json.dumps(matched_preds),
                  "notMatchedPredicates": json.dumps(not_matched),
                  "notMatchedBySourcePredicates": json.dumps(by_source_preds)}
        metrics = {
            "numSourceRows": num_source, "numTargetRowsInserted": inserted,
            "numTargetRowsUpdated": n_updated + n_by_source_updated,
            "numTargetRowsDeleted": n_deleted + n_by_source_deleted, "numTargetRowsMatchedUpdated": n_updated,
            "numTargetRowsMatchedDeleted": n_deleted,
            "numTargetRowsNotMatchedBySourceUpdated": n_by_source_updated,
            "numTargetRowsNotMatchedBySourceDeleted": n_by_source_deleted, "numTargetRowsCopied": copied,
            "numOutputRows": written, "numTargetFilesAdded": len(adds),
            "numTargetFilesRemoved": touched.num_rows if marked is None else marked.files_emptied,
            "numTargetBytesAdded": sum(a.size for a in adds),
            "numTargetBytesRemoved": _bytes(touched) if marked is None else 0,
            "numTargetFilesScanned": candidates.num_rows,
            "executionTimeMs": int((time.time() - started) * 1000),
        }
        if marked is not None:
            metrics["numTargetDeletionVectorsAdded"] = len(marked.adds)
        version = txn.commit_or_discard([*adds, *written_dv, *cdc], operation=operation, parameters=params,
                                        metrics=metrics, user_metadata=user_metadata,
                                        extra_commit_info=extra_commit_info)
        phases.done("commit")
        return version
    finally:
        phases.log()
        source.unpersist()
        if matched_rows is not None:
            matched_rows.unpersist()


class _Phases:
    """Seconds spent in each phase of an operation, logged at debug level (where a slow merge goes)."""

    def __init__(self, what: str):
        self.what, self.last, self.spent = what, time.time(), []

    def done(self, phase: str) -> None:
        now = time.time()
        self.spent.append((phase, now - self.last))
        self.last = now

    def log(self) -> None:
        if self.spent:
            log.debug("%s: %s", self.what, ", ".join(f"{p} {s:.2f} s" for p, s in self.spent))


def _in_few_files(df: DataFrame, rows: int, snapshot: Any) -> DataFrame:
    """`df` in as few partitions as `rows` of the table's average row size fill files of its target size:
    merge-on-read writes only the changed rows, which would otherwise become one small file per
    partition of the source."""
    records = _records(snapshot.files)
    if not records:
        return df
    row_bytes = _bytes(snapshot.files) / records
    return df.coalesce(max(1, math.ceil(rows * row_bytes / target_file_size(snapshot))))


def _set_transactions(app_transactions: dict[str, int] | None) -> list[SetTransaction]:
    return [SetTransaction(app, int(v), now_ms()) for app, v in (app_transactions or {}).items()]


def _record_only(txn: Any, app_transactions: dict[str, int] | None, operation: str,
                 extra_commit_info: dict[str, Any] | None) -> int | None:
    """A write that changed no rows still records what it consumed, when asked to: the next run must
    not read it again. Otherwise nothing is committed (None)."""
    if not app_transactions:
        return None
    txn.add_actions(_set_transactions(app_transactions))
    return txn.commit(operation=operation, extra_commit_info=extra_commit_info)


# A merge-on-read MERGE whose source has at most this many rows (and fits a broadcast) may match on the
# driver (`_match_on_driver`), reading at most this many target rows' keys there.
_DRIVER_MATCH_SOURCE_ROWS = 1_000_000
_DRIVER_MATCH_TARGET_ROWS = 20_000_000
# key types whose equality Arrow and Spark agree on (not floats: Spark's NaN = NaN and -0.0 = 0.0)
_DRIVER_MATCH_TYPES = ("byte", "short", "integer", "long", "string", "date", "timestamp", "timestamp_ntz",
                       "boolean", "binary")


def _match_on_driver(spark: SparkSession, snapshot: Any, candidates: pa.Table, source: DataFrame, on: str,
                     keys: list[tuple[str, str]], target_schema: StructType) -> Any:
    """A merge's matched pairs found on the driver (`row_match`: the candidate files' key columns read
    with pyarrow, joined with the source's keys in Arrow) where `on` is equality of key columns alone,
    of one type on both sides: (the matched rows, as an Arrow table with the columns the Spark match
    gives them: _ACTION and _SOURCE_ID, and _ROW_ID under row tracking; the files touched, their (add, row indexes) to mark, whether every source row matched exactly one
    target row). None where that does not apply, or the table
    is too big for it: then Spark matches. Spark's scan and join of the table cost seconds of fixed
    overhead that dwarf a small source (a 10M-row target's ids: 0.5 s here, 2-3 s by Spark)."""
    from ..row_match import FILE, ROW_INDEX, matching_rows

    if not keys or len(sql.conjuncts(on)) != len(keys):
        return None  # other conditions than key equality
    by_lower = {f.name.lower(): f for f in target_schema.fields}
    source_types = {f.name.lower(): f.dataType for f in source.schema.fields}
    partitions = {c.lower() for c in snapshot.partition_columns}
    columns = []
    for s, t in keys:
        field = by_lower.get(t.lower())
        if field is None or t.lower() in partitions or source_types.get(s.lower()) is None:
            return None
        stype, ttype = source_types[s.lower()], field.dataType
        if stype.simpleString() != ttype.simpleString() or \
                not (ttype.typeName() in _DRIVER_MATCH_TYPES or ttype.typeName() == "decimal"):
            return None  # Spark would coerce the types, or Arrow's equality differs from Spark's
        columns.append(field.name)
    records = _records(candidates)
    if records is None or records > _DRIVER_MATCH_TARGET_ROWS or widened_columns(snapshot.schema_json) & set(columns):
        return None
    source_keys = source.select(*[F.col(quote_identifier(s)).alias(s) for s, _ in keys],
                                F.col(_SOURCE_ID)).toArrow()
    pairs = matching_rows(snapshot, candidates, source_keys, columns)
    if pairs.num_rows > _DRIVER_MATCH_SOURCE_ROWS:
        return None  # many target rows per source row: Spark carries them
    per_row = pairs.group_by([FILE, ROW_INDEX]).aggregate([([], "count_all")])
    repeated = per_row.filter(pc.greater(per_row.column("count_all"), 1))
    if repeated.num_rows:
        first = repeated.slice(0, 1).to_pylist()[0]
        sid = pairs.filter(pc.and_(pc.equal(pairs.column(FILE), first[FILE]),
                                   pc.equal(pairs.column(ROW_INDEX), first[ROW_INDEX]))).column(_SOURCE_ID)[0]
        row = source_keys.filter(pc.equal(source_keys.column(_SOURCE_ID), sid)).slice(0, 1).to_pylist()[0]
        raise _duplicate_source_error(snapshot.table_uri, keys, row, first["count_all"])
    grouped = pairs.group_by(FILE).aggregate([(ROW_INDEX, "list")]).sort_by(FILE)
    touched = _take(candidates, grouped.column(FILE).to_pylist())  # in the same (sorted) order
    marks = [(add, np.asarray(rows.values, dtype=np.uint64))
             for add, rows in zip(_add_files_of(touched), grouped.column(f"{ROW_INDEX}_list"))]
    matched = pa.table({_ACTION: pa.array(["update"] * pairs.num_rows, pa.string()),
                        _SOURCE_ID: pairs.column(_SOURCE_ID).cast(pa.int64())})
    if row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, candidates):
        matched = matched.append_column(_ROW_ID, _matched_row_ids(snapshot, candidates, pairs))
    each_source_row_once = (pairs.num_rows == source_keys.num_rows
                            and pc.count_distinct(pairs.column(_SOURCE_ID)).as_py() == pairs.num_rows)
    return matched, touched, marks, each_source_row_once


def _matched_row_ids(snapshot: Any, candidates: pa.Table, pairs: pa.Table) -> pa.Array:
    """The row ID of each matched target row (`pairs`: FILE, ROW_INDEX): its file's materialized value
    where the file has the hidden column (an OPTIMIZE wrote it), else baseRowId + its position."""
    from ..row_match import FILE, ROW_INDEX

    files = pairs.column(FILE).to_numpy()
    positions = pairs.column(ROW_INDEX).to_numpy().astype(np.int64)
    out = np.empty(len(positions), dtype=np.int64)
    for i in np.unique(files):
        row = candidates.slice(int(i), 1)
        add = replace(_add_files_of(row)[0], base_row_id=row.column("base_row_id")[0].as_py())
        here = files == i
        out[here] = row_tracking.file_row_ids(snapshot.store, add, snapshot.configuration)[positions[here]]
    return pa.array(out, pa.int64())


def _duplicate_source_error(table: str, keys: list[tuple[str, str]], row: Any, times: Any) -> Exception:
    """The error of a merge in which several source rows matched one target row; `row` holds the source
    key columns of one of them (None if unknown)."""
    key_text = ", ".join(f"{s}={row[s]!r}" for s, _ in keys) if row is not None and keys else "?"
    return MergeDuplicateSourceError(
        f"{table}: MERGE failed: several source rows matched the same target row and tried to change it "
        f"(e.g. {key_text}; the row appears {times} times in the source). Make the merge key unique in the "
        f"source (deduplicate it, or add columns to unique_key). Nothing was committed.")


def _source_only(source: DataFrame, assignments: dict[str, str]) -> set[str]:
    """The columns of `assignments` whose SQL Spark resolves against the (aliased) source alone:
    analysis only, no job."""
    from pyspark.errors import AnalysisException

    def resolves(*exprs: str) -> bool:
        try:
            source.select(*[F.expr(e) for e in exprs])
            return True
        except AnalysisException:
            return False

    if resolves(*assignments.values()):  # SET *: one call
        return set(assignments)
    return {c for c, e in assignments.items() if resolves(e)}


def _atomic_types(schema: StructType) -> bool:
    """Whether every column's type is atomic, so that its `simpleString()` is SQL Spark parses back
    (a struct's would not quote its field names)."""
    from pyspark.sql.types import ArrayType, MapType, NullType, StructType as Struct, UserDefinedType
    return not any(isinstance(f.dataType, (ArrayType, MapType, NullType, Struct, UserDefinedType))
                   for f in schema.fields)


def _fits_broadcast(df: DataFrame) -> bool:
    """Whether a (cached, counted) DataFrame is small enough to broadcast, by Spark's size estimate."""
    try:
        # a Scala BigInt, which Py4J hands over as a Python int
        size = int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # no estimate: let Spark choose the join
        return False
    return size <= _BROADCAST_SOURCE_BYTES


def _utc_from_micros(micros: int) -> Any:
    import datetime as dt
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)


def _sql_literal(value: Any) -> str:
    """A Python value (from a Spark row) as a SQL literal the skipping parser understands."""
    import datetime as dt
    from decimal import Decimal
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return f"timestamp '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"date '{value.isoformat()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _target_files_read(df: DataFrame, snapshot: Any) -> pa.Table | None:
    """The target's live files that `df` scans (all files of each scanned relation, before pruning), or
    None when it reads none of them."""
    try:
        scanned = {unquote(urlparse(u).path) if u.startswith("file:") else u for u in df.inputFiles()}
    except Exception:  # a plan Spark cannot list files for: treat it as not reading the target
        return None
    if not scanned:
        return None
    mask = pa.array([u in scanned for u in snapshot.file_uris()], pa.bool_())
    read = snapshot.files.filter(mask)
    return read if read.num_rows else None


def _check_unique_keys(source: DataFrame, keys: dict[str, str], where: str | None, table: str) -> None:
    """No NULL in the key columns, and no key twice among the source rows (where `where` holds)."""
    rows = source.filter(F.expr(where)) if where else source
    counts = rows.agg(*[F.sum(F.col(quote_identifier(c)).isNull().cast("long")).alias(f"n{i}")
                        for i, c in enumerate(keys)]).collect()[0]
    bad = {shown: counts[f"n{i}"] for i, shown in enumerate(keys.values()) if counts[f"n{i}"]}
    if bad:
        which = ", ".join(f"{c} ({n} rows)" for c, n in bad.items())
        raise InvalidTableError(
            f"{table}: MERGE refused: the source has NULL in its unique key column(s) {which}. A NULL key "
            f"never matches, so those rows would be inserted again on every run. Filter them out or "
            f"coalesce the key in the model. Nothing was committed.")
    cols = [F.col(quote_identifier(c)).alias(f"k{i}") for i, c in enumerate(keys)]
    dup = rows.groupBy(*cols).count().filter("count > 1").limit(1).collect()
    if dup:
        key_text = ", ".join(f"{shown}={dup[0][f'k{i}']!r}" for i, shown in enumerate(keys.values()))
        raise MergeDuplicateSourceError(
            f"{table}: MERGE refused: the unique key ({key_text}) appears {dup[0]['count']} times in the "
            f"source; one run would leave that many rows with one key. Deduplicate the model's rows, or add "
            f"columns to unique_key. Nothing was committed.")
