"""Snapshot -> DataFrame, read by Spark's native Parquet reader over exactly the snapshot's live files.

Spark infers partition columns from `col=value/` folders under `basePath`, typed by the declared schema.
That is only right when every file's folders spell its `partitionValues` (the Delta convention, which
our writer and delta-spark follow); otherwise the files are read per partition with the values added as
literals. Delta readers take partition values from the log, never from folder names.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, SparkSession, functions as F

from ..storage.files import exists, is_object_store_uri
from ..column_mapping import is_mapped, logical_partition_values, mode_of, physical_schema
from ..paths import (
    absolute_file_path, decode_path, is_absolute_path, parse_partition_folder, parse_partition_value,
)
from ..schema import nullable_type, partition_column_types, quote_identifier, without_columns
from ..storage.log_store import LogStore
from .connect import empty_dataframe
from .embedded import has_jar_class, jar_class, reads_with_jar_format, register_jar_function
from .writer import spark_schema

# Spark lists the given files with a distributed job above this many paths, which is slow to plan.
_DISCOVERY_THRESHOLD = "1000000"


def snapshot_dataframe(spark: SparkSession, snapshot: Any) -> DataFrame:
    """All rows of the snapshot, with the table's columns in the table's order. A data file that is gone
    (time travel past a VACUUM) is a DataFileNotFoundError naming the version, the file and why."""
    from pyspark.errors import AnalysisException

    try:
        return _snapshot_dataframe(spark, snapshot)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc):
            raise
        missing = next((decode_path(p) for p, uri in zip(snapshot.files.column("path").to_pylist(),
                                                         snapshot.file_uris())
                        if not exists(uri, snapshot.store.options)), None)
        if missing is None:
            raise
        raise snapshot.missing_file_error(missing) from None


def matching_dataframe(spark: SparkSession, snapshot: Any, where: str) -> DataFrame:
    """The snapshot's rows matching the SQL predicate `where`, reading only the files whose partition
    values or statistics may hold such a row: a filter on the source of a generated partition column
    (`event_ts` for `event_date = cast(event_ts as date)`) narrows the partitions too
    (`generated_columns.derived_partition_filter`)."""
    from ..expressions import files_matching

    files = files_matching(snapshot, where)
    if files.num_rows == 0:
        return empty_dataframe(spark, spark_schema(snapshot.schema_json))
    columns = [quote_identifier(f["name"]) for f in snapshot.schema_json["fields"]]
    return files_dataframe(spark, snapshot, files).select(*columns).where(where)


def _snapshot_dataframe(spark: SparkSession, snapshot: Any) -> DataFrame:
    schema_json = snapshot.schema_json
    schema = spark_schema(schema_json)
    columns = [quote_identifier(f.name) for f in schema.fields]
    if snapshot.num_files == 0:
        return empty_dataframe(spark, schema)
    through_source = read_through_data_source(spark, snapshot.store)
    if (has_deletion_vectors(snapshot.files) or is_mapped(snapshot.configuration) or widened_columns(schema_json)
            or through_source):
        df = files_dataframe(spark, snapshot, snapshot.files)
        # the table's columns in its order already, but for the Python data source of object stores
        return df.select(*columns) if through_source else df
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", _DISCOVERY_THRESHOLD)
    root = snapshot.table_uri
    uris = snapshot.file_uris()
    partitions = snapshot.partition_columns
    if not partitions:
        return spark.read.schema(schema).parquet(*uris).select(*columns)
    if _folders_match(snapshot, spark):
        return spark.read.schema(schema).option("basePath", root).parquet(*uris).select(*columns)
    return _read_per_partition(spark, snapshot, uris).select(*columns)


def read_through_data_source(spark: SparkSession, store: LogStore) -> bool:
    """Whether the table's files are read by the Python data source of `files_source`: on an object store
    that Spark's own Parquet reader cannot reach (`hadoop.native_io`)."""
    if not is_object_store_uri(store.table_uri):
        return False
    from .hadoop import native_io

    return not native_io(spark, store.table_uri, store.task_options())[0]


def _folders_match(snapshot: Any, spark: SparkSession) -> bool:
    """Whether Spark's folder-based partition discovery yields exactly the log's partition values."""
    partitions = snapshot.partition_columns
    types = partition_column_types(snapshot.schema_json, partitions)
    if "timestamp" in types.values():
        tz = (spark.conf.get("spark.sql.session.timeZone") or "").upper()
        if tz not in ("UTC", "Z", "ETC/UTC", "GMT", "+00:00"):
            return False  # Spark would read folder timestamps in the session time zone
    files = snapshot.files
    paths = files.column("path").to_pylist()
    values = files.column("partition_values").to_pylist()
    lowered = [c.lower() for c in partitions]
    for path, pv in zip(paths, values):
        relative = decode_path(path)
        if is_absolute_path(relative):
            return False
        folders = relative.split("/")[:-1]
        if len(folders) != len(partitions):
            return False
        found = parse_partition_folder(relative)
        if [k.lower() for k in found] != lowered:
            return False
        pv = dict(pv or [])
        found_lower = {k.lower(): v for k, v in found.items()}
        for c in partitions:
            t = types[c]
            try:
                if parse_partition_value(found_lower[c.lower()], t) != parse_partition_value(pv.get(c), t):
                    return False
            except Exception:
                return False
    return True


def _read_per_partition(spark: SparkSession, snapshot: Any, uris: list[str]) -> DataFrame:
    partitions = snapshot.partition_columns
    types = partition_column_types(snapshot.schema_json, partitions)
    data_schema = spark_schema(without_columns(snapshot.schema_json, partitions))
    full = spark_schema(snapshot.schema_json)
    groups: dict[tuple, list[str]] = {}
    for uri, pv in zip(uris, snapshot.files.column("partition_values").to_pylist()):
        pv = dict(pv or [])
        groups.setdefault(tuple(pv.get(c) for c in partitions), []).append(uri)
    out: DataFrame | None = None
    for key, group in groups.items():
        df = spark.read.schema(data_schema).parquet(*group)
        for c, raw in zip(partitions, key):
            value = parse_partition_value(raw, types[c])
            df = df.withColumn(c, F.lit(value).cast(full[c].dataType))
        out = df if out is None else out.unionByName(df)
    return out


def view_identifier(view_name: str) -> str:
    """A one-part view name Spark accepts: `a.b` is backquoted so the dot stays part of the name."""
    if view_name.startswith("`") and view_name.endswith("`"):
        return view_name
    return quote_identifier(view_name)


def register_view(spark: SparkSession, view_name: str, table: Any, version: int | None = None) -> DataFrame:
    """Create or replace the temporary view `view_name` over the latest (or given) snapshot of `table`
    (a `DeltaTable` or a location)."""
    from ..table import as_table
    snapshot = as_table(table).snapshot(version)
    df = snapshot_dataframe(spark, snapshot)
    df.createOrReplaceTempView(view_identifier(view_name))
    return df


FILE_COLUMN = "__deltalog_file"
ROW_INDEX_COLUMN = "__deltalog_row_index"
FILE_SIZE_COLUMN = "__deltalog_file_size"


def has_deletion_vectors(files: Any) -> bool:
    dvs = files.column("deletion_vector")
    return dvs.null_count < len(dvs)


def files_dataframe(spark: SparkSession, snapshot: Any, files: Any, with_file: bool = False,
                    with_row_index: bool = False, with_deleted: bool = False, with_size: bool = False) -> DataFrame:
    """The rows of some of the snapshot's live files (`files`: rows of `snapshot.files`), with the table's
    columns, plus optionally the file each row comes from (`FILE_COLUMN`, as Spark spells the path: see
    `local_path_of`), its size (`FILE_SIZE_COLUMN`: not on object stores) and the row's position in that
    file (`ROW_INDEX_COLUMN`). Rows that the files' deletion vectors delete are left out, unless
    `with_deleted` (the caller filters them later with `deleted_rows_column`)."""
    if read_through_data_source(spark, snapshot.store):
        # no Hadoop connector for the store: executors read the files with pyarrow (see files_source)
        from .files_source import read_files
        return read_files(spark, snapshot, files, spark_schema(snapshot.schema_json), with_file=with_file,
                          with_row_index=with_row_index, skip_deleted=not with_deleted,
                          file_column=FILE_COLUMN, row_index_column=ROW_INDEX_COLUMN)
    if with_deleted or not has_deletion_vectors(files):
        return _files_dataframe(spark, snapshot, files, with_file, with_row_index, with_size)
    flags = deletion_flags_option(spark, snapshot, files)
    if flags is not None:
        # every file through the jar's Parquet format, which flags deleted rows per batch of the scan
        return _files_dataframe(spark, snapshot, files, with_file, with_row_index, with_size, flags=flags)
    # the jar cannot be loaded, or a DV holds a row index past 32 bits: the deleted rows, read on the
    # driver, are anti-joined. Decoding Spark's spelling of every row's file path costs twice the scan:
    # the hash key is the row index alone, and the path is compared only for the rows whose index some
    # DV holds (wrapped in coalesce so that Spark does not make it a second key).
    marked = pc.is_valid(files.column("deletion_vector"))
    with_dv = files.filter(marked)
    df = _files_dataframe(spark, snapshot, with_dv, with_file=True, with_row_index=True, with_size=with_size)
    deleted = _deleted_rows_dataframe(spark, snapshot, with_dv)
    same_file = F.coalesce(local_file_expr(F.col(FILE_COLUMN)) == F.col(_DV_FILE), F.lit(False))
    df = df.join(F.broadcast(deleted), (F.col(ROW_INDEX_COLUMN) == F.col(_DV_ROW)) & same_file, "left_anti")
    # drop() by name (absent names are ignored): one call into the JVM, where a select builds a column
    # object per column
    df = df.drop(*[c for c, wanted in ((FILE_COLUMN, with_file), (ROW_INDEX_COLUMN, with_row_index)) if not wanted])
    unmarked = files.filter(pc.invert(marked))
    if unmarked.num_rows:
        df = _files_dataframe(spark, snapshot, unmarked, with_file, with_row_index, with_size).unionByName(df)
    return df


_FLAGGED_FORMAT = "io.deltalog.dv.DeletionVectorParquetFormat"
_DELETED_FLAG = "__deltalog_deleted"
_FLAGS_OPTION = "deltalog.deletionVectors"


def deletion_flags_option(spark: SparkSession, snapshot: Any, files: Any) -> str | None:
    """The option of the jar's `DeletionVectorParquetFormat` for these files (base64: per file its key,
    size and 32-bit Roaring bitmap, empty without a DV); None where tasks cannot load the jar or a DV
    holds a row index past 32 bits."""
    import base64
    import struct

    if not reads_with_jar_format(spark, "dv.DeletionVectorParquetFormat"):
        return None
    bitmaps = _portable_bitmaps(snapshot, files.column("deletion_vector").to_pylist())
    if any(b is None for b in bitmaps):
        return None
    parts = []
    for log_path, bitmap, size in zip(files.column("path").to_pylist(), bitmaps, files.column("size").to_pylist()):
        key = local_file_key(snapshot.table_uri, log_path).encode("utf-8")
        parts += [struct.pack(">i", len(key)), key, struct.pack(">qi", size, len(bitmap)), bitmap]
    return base64.b64encode(b"".join(parts)).decode("ascii")


def _portable_bitmaps(snapshot: Any, dvs: list[dict[str, Any] | None]) -> list[bytes | None]:
    """Each DV's rows as a portable 32-bit Roaring bitmap, what the jar reads (empty without a DV; None
    where a row index is past 32 bits). Read by several threads: on an object store each DV is a
    request of its own."""
    from concurrent.futures import ThreadPoolExecutor

    from pyroaring import BitMap

    from ..deletion_vectors import read_deletion_vector

    def portable(dv: dict[str, Any] | None) -> bytes | None:
        if not dv:
            return b""
        rows = read_deletion_vector(snapshot.store, dv)
        if len(rows) and rows.max() > 0xFFFFFFFF:
            return None
        return BitMap(np.asarray(rows.to_array(), dtype=np.uint32)).serialize()

    if sum(1 for dv in dvs if dv) < 8:
        return [portable(dv) for dv in dvs]
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(portable, dvs))


def _parquet(spark: SparkSession, schema: Any, uris: list[str], flags: str | None, base_path: str | None = None
             ) -> DataFrame:
    """`spark.read.parquet(*uris)` with this schema; with `flags` (`deletion_flags_option`), through the
    jar's format, keeping the rows no deletion vector deletes."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    reader = spark.read
    if base_path:
        reader = reader.option("basePath", base_path)
    if flags is None:
        return reader.schema(schema).parquet(*uris)
    # the flag is the last data column (partition columns, found in folders, come after it)
    schema = StructType([*schema.fields, StructField(_DELETED_FLAG, BooleanType())])
    df = reader.format(_FLAGGED_FORMAT).option(_FLAGS_OPTION, flags).schema(schema).load(uris)
    # (SQL text: building the column objects costs 15 ms of calls into the JVM, more than the rest)
    return df.where(f"NOT {_DELETED_FLAG}").drop(_DELETED_FLAG)


_DV_FILE, _DV_ROW = "__deltalog_dv_file", "__deltalog_dv_row"


def local_file_key(table_uri: str, log_path: str) -> str:
    """A data file's local path as the log names it (`path`), the key that `local_file_expr` and
    `local_path_of` give Spark's spelling of it: what Python-side file tables are joined on."""
    path = absolute_file_path(table_uri, log_path)
    return path if is_object_store_uri(path) else os.path.normpath(path)


def local_file_expr(spark_path: Any) -> Any:
    """The local path of a Spark file path column (`_metadata.file_path`, a URI), as `local_file_key`
    spells it."""
    return F.url_decode(F.replace(F.regexp_replace(spark_path, "^file:", ""), F.lit("+"), F.lit("%2B")))


def sizes_differ(files: Any) -> bool:
    """Whether no two of these files share a size, so that a row's `FILE_SIZE_COLUMN` names its file."""
    sizes = files.column("size")
    return len(pc.unique(sizes)) == len(sizes)


def tells_files_by_size(spark: SparkSession, files: Any) -> bool:
    """Whether `deleted_rows_column` may tell these files apart by size: no two share one, and tasks
    can load the jar's `DeletedRowsCatalog`."""
    return sizes_differ(files) and has_jar_class(spark, "dv.DeletedRowsCatalog")


def deleted_rows_column(spark: SparkSession, snapshot: Any, files: Any, deterministic: bool = True,
                        by_size: bool = False) -> Any:
    """A boolean column, true for the rows of `files` their deletion vectors delete, computed by the
    jar's `DeletedRows` from FILE_COLUMN and ROW_INDEX_COLUMN; None where tasks cannot load the jar or
    a DV holds a row index past 32 bits (the anti-join of `_deleted_rows_dataframe` serves them). Not
    `deterministic`, it is evaluated where the query puts it: after a join that keeps few rows, say.

    `by_size` (see `tells_files_by_size`): the rows come from `files` alone, with FILE_SIZE_COLUMN, and
    the file is told by its size (`DeletedRowsCatalog`), which Spark hands the function far more cheaply
    than the path it would copy into a Java string for every row."""
    import struct

    sizes = files.column("size").to_pylist()
    if not by_size and not has_jar_class(spark, "dv.DeletedRows"):
        return None
    dvs = files.column("deletion_vector").to_pylist()
    bitmaps = _portable_bitmaps(snapshot, dvs)
    if any(b is None for b in bitmaps):
        return None
    parts = []
    for log_path, dv, bitmap, size in zip(files.column("path").to_pylist(), dvs, bitmaps, sizes):
        if not dv and not by_size:
            continue
        if by_size:
            parts += [struct.pack(">q", size)]
        else:
            key = local_file_key(snapshot.table_uri, log_path).encode("utf-8")
            parts += [struct.pack(">i", len(key)), key]
        parts += [struct.pack(">i", len(bitmap)), bitmap]
    blob = b"".join(parts)
    if by_size:
        return F.call_function(_size_function(spark, blob, deterministic), F.col(FILE_SIZE_COLUMN),
                               F.col(ROW_INDEX_COLUMN))
    name = register_jar_function(spark, "dv.DeletedRows", bytearray(blob), returns="BooleanType",
                                 deterministic=deterministic)
    return F.call_function(name, F.col(FILE_COLUMN), F.col(ROW_INDEX_COLUMN))


_DV_CATALOG = "__deltalog"


def _size_function(spark: SparkSession, blob: bytes, deterministic: bool) -> str:
    """The name of the jar's function (`DeletedRowsCatalog`, a Spark function catalog) testing rows
    against these deletion vectors by file size: the blob is registered on the driver and travels to
    the executors inside the function, not as a literal spelled in the plan."""
    import hashlib

    digest = hashlib.sha1(blob).hexdigest()
    jar_class(spark, "dv.DeletedRowsCatalog").register(digest, bytearray(blob))
    key = f"spark.sql.catalog.{_DV_CATALOG}"
    if spark.conf.get(key, None) is None:
        spark.conf.set(key, "io.deltalog.dv.DeletedRowsCatalog")
    return f"{_DV_CATALOG}.{'dv' if deterministic else 'dv_nondeterministic'}.d{digest}"


def _deleted_rows_dataframe(spark: SparkSession, snapshot: Any, files: Any) -> DataFrame:
    """(local path, row index) of every row the files' deletion vectors delete, read on the driver."""
    from ..deletion_vectors import deleted_rows

    paths, rows = [], []
    for log_path, dv in zip(files.column("path").to_pylist(), files.column("deletion_vector").to_pylist()):
        deleted = deleted_rows(snapshot.store, dv)
        paths.append(np.full(len(deleted), local_file_key(snapshot.table_uri, log_path),
                             dtype=object))
        rows.append(deleted)
    table = pa.table({_DV_FILE: pa.array(np.concatenate(paths) if paths else [], pa.string()),
                      _DV_ROW: pa.array(np.concatenate(rows) if rows else [], pa.int64())})
    return spark.createDataFrame(table)


def _files_dataframe(spark: SparkSession, snapshot: Any, files: Any, with_file: bool = False,
                     with_row_index: bool = False, with_size: bool = False, flags: str | None = None) -> DataFrame:
    schema = spark_schema(snapshot.schema_json)
    extra = []
    if with_file:
        extra.append(F.col("_metadata.file_path").alias(FILE_COLUMN))
    if with_row_index:
        extra.append(F.col("_metadata.row_index").alias(ROW_INDEX_COLUMN))
    if with_size:
        extra.append(F.col("_metadata.file_size").alias(FILE_SIZE_COLUMN))
    if files.num_rows == 0:
        from pyspark.sql.types import LongType, StringType, StructField, StructType
        fields = list(schema.fields)
        if with_file:
            fields.append(StructField(FILE_COLUMN, StringType()))
        if with_row_index:
            fields.append(StructField(ROW_INDEX_COLUMN, LongType()))
        if with_size:
            fields.append(StructField(FILE_SIZE_COLUMN, LongType()))
        return empty_dataframe(spark, StructType(fields))
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", _DISCOVERY_THRESHOLD)
    root = snapshot.table_uri
    uris = [absolute_file_path(root, p) for p in files.column("path").to_pylist()]
    partitions = snapshot.partition_columns
    mapped = is_mapped(snapshot.configuration)
    files = logical_partition_values(files, snapshot.schema_json, snapshot.configuration)
    if not partitions:  # already the table's columns, then the extra ones
        return _read_parquet(spark, snapshot, snapshot.schema_json, uris, extra, flags)
    # (each column object costs a call into the JVM: built only where needed)
    columns = [F.col(quote_identifier(f.name)) for f in schema.fields]
    extra_names = [F.col(n) for n, on in ((FILE_COLUMN, with_file), (ROW_INDEX_COLUMN, with_row_index),
                                          (FILE_SIZE_COLUMN, with_size)) if on]
    if not mapped and not widened_columns(snapshot.schema_json) and _folders_match(_SubSnapshot(snapshot, files), spark):
        return _parquet(spark, schema, uris, flags, base_path=root).select(*columns, *extra)
    types = partition_column_types(snapshot.schema_json, partitions)
    data_schema = without_columns(snapshot.schema_json, partitions)
    groups: dict[tuple, list[str]] = {}
    for uri, pv in zip(uris, files.column("partition_values").to_pylist()):
        pv = dict(pv or [])
        groups.setdefault(tuple(pv.get(c) for c in partitions), []).append(uri)
    out: DataFrame | None = None
    for key, group in groups.items():
        df = _read_parquet(spark, snapshot, data_schema, group, extra, flags)
        for c, raw in zip(partitions, key):
            df = df.withColumn(c, F.lit(parse_partition_value(raw, types[c])).cast(schema[c].dataType))
        df = df.select(*columns, *extra_names)
        out = df if out is None else out.unionByName(df)
    return out


def _read_parquet(spark: SparkSession, snapshot: Any, schema_json: dict[str, Any], uris: list[str],
                  extra: list, flags: str | None = None) -> DataFrame:
    """The files' columns of `schema_json` (logical names) plus `extra` (file metadata columns). With
    column mapping the files are read by physical name (or Parquet field id) and renamed: a cast to the
    logical type renames nested fields too, as Spark casts structs by position. With widened columns
    the files are read in groups holding them in the same stored types, each cast to the table's."""
    mode = mode_of(snapshot.configuration)
    widened = widened_columns(schema_json)
    if mode not in ("name", "id") and not widened:
        return _parquet(spark, spark_schema(schema_json), uris, flags).select("*", *extra)
    if mode == "id":
        spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
    physical = physical_schema(schema_json, mode)
    logical = spark_schema(nullable_type(schema_json))
    out: DataFrame | None = None
    for stored, group in _by_stored_types(physical, schema_json, uris, widened, snapshot.store.options).items():
        types = dict(stored)
        read_schema = {**physical, "fields": [{**f, "type": json.loads(types[f["name"]])} if f["name"] in types
                                              else f for f in physical["fields"]]}
        df = _parquet(spark, spark_schema(read_schema), group, flags)
        df = df.select(*[F.col(quote_identifier(p["name"])).cast(f.dataType).alias(f.name)
                         for p, f in zip(read_schema["fields"], logical.fields)], *extra)
        out = df if out is None else out.unionByName(df)
    return out


def widened_columns(schema_json: dict[str, Any]) -> set[str]:
    """Top-level columns whose type (or a nested field's) was widened (type widening's
    `delta.typeChanges`): files written before hold the narrower type."""
    def changed(t: Any) -> bool:
        if isinstance(t, dict):
            if t.get("type") == "struct":
                return any("delta.typeChanges" in (f.get("metadata") or {}) or changed(f["type"]) for f in t["fields"])
            if t.get("type") == "array":
                return changed(t["elementType"])
            if t.get("type") == "map":
                return changed(t["keyType"]) or changed(t["valueType"])
        return False

    return {f["name"] for f in schema_json["fields"]
            if "delta.typeChanges" in (f.get("metadata") or {}) or changed(f["type"])}


def _by_stored_types(physical: dict[str, Any], schema_json: dict[str, Any], uris: list[str],
                     widened: set[str], storage_options: Any) -> dict[tuple, list[str]]:
    """The files grouped by the types their footers give the widened columns ((physical name, Delta
    type JSON) pairs; one group of all files when nothing was widened). Spark's Parquet reader widens
    only some types itself (not byte -> decimal, for one)."""
    if not widened:
        return {(): uris}
    from ..storage.files import parquet_metadata
    from ..schema import type_from_arrow

    names = [p["name"] for p, f in zip(physical["fields"], schema_json["fields"]) if f["name"] in widened]
    groups: dict[tuple, list[str]] = {}
    for uri in uris:
        stored = parquet_metadata(local_path_of(uri), storage_options).schema.to_arrow_schema()
        key = tuple((n, json.dumps(type_from_arrow(stored.field(n).type))) for n in names if n in stored.names)
        groups.setdefault(key, []).append(uri)
    return groups


class _SubSnapshot:
    """A snapshot restricted to some of its files (for the folder check)."""

    def __init__(self, snapshot: Any, files: Any):
        self.partition_columns = snapshot.partition_columns
        self.schema_json = snapshot.schema_json
        self.files = files


def local_path_of(spark_file_path: str) -> str:
    """The local path of a `_metadata.file_path` value (Spark gives a URI-encoded `file:` URI)."""
    from urllib.parse import unquote, urlparse
    parsed = urlparse(spark_file_path)
    if parsed.scheme in ("file", ""):
        return os.path.normpath(unquote(parsed.path))
    return unquote(spark_file_path)
