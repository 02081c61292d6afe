"""The change data feed in Spark: writing a commit's changed rows, and reading the changes of a range
of versions as one DataFrame (see `deltalog.change_data` for the log side)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import pyarrow as pa
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, SparkSession, functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from ..actions import AddCDCFile
from ..change_data import (
    CHANGE_DATA_DIR, CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN, DELETE, INSERT,
    commit_changes, with_change_type,
)
from ..errors import VersionNotFoundError
from ..paths import absolute_file_path, decode_path
from ..schema import quote_identifier, schema_string
from ..storage import files as fs
from ..storage.log_store import LogStore
from ..storage import store_of
from .connect import empty_dataframe
from .reader import FILE_COLUMN, files_dataframe, local_file_expr, local_file_key, snapshot_dataframe
from .writer import spark_schema, write_files


def change_rows(rows: DataFrame, schema_json: dict[str, Any], change_type: Any) -> DataFrame:
    """`rows` (the table's columns) with `_change_type` set to `change_type` (a string or a Column)."""
    target = spark_schema(schema_json)
    value = F.lit(change_type) if isinstance(change_type, str) else change_type
    have = {c.lower() for c in rows.columns}
    # a column this commit adds is not in the old rows: NULL there, as readers see it
    return rows.select(*[(F.col(quote_identifier(f.name)) if f.name.lower() in have else F.lit(None))
                         .cast(f.dataType).alias(f.name) for f in target.fields],
                       value.cast("string").alias(CHANGE_TYPE_COLUMN))


def write_change_data(changes: Sequence[DataFrame], store: LogStore, partition_columns: Sequence[str],
                      schema_json: dict[str, Any], configuration: dict[str, str],
                      method: str = "native") -> list[AddCDCFile]:
    """Write the rows of `changes` (each from `change_rows`) as change data files under
    `_change_data/`, partitioned as the table is; returns their `cdc` actions (not committed)."""
    if not changes:
        return []
    out = changes[0]
    for df in changes[1:]:
        out = out.unionByName(df)
    adds = write_files(out, f"{store.table_uri.rstrip('/')}/{CHANGE_DATA_DIR}", partition_columns,
                       with_change_type(schema_json), configuration, method=method, conform=False, store=store)
    return [AddCDCFile(path=f"{CHANGE_DATA_DIR}/{a.path}", partition_values=a.partition_values, size=a.size)
            for a in adds]


def changes_dataframe(spark: SparkSession, table: str | LogStore, start_version: int,
                      end_version: int | None = None) -> DataFrame:
    """The rows each commit from `start_version` to `end_version` (default: the latest; both included)
    changed: the table's columns (as of the end version) plus `_change_type`, `_commit_version` and
    `_commit_timestamp`, as Delta's `table_changes` and delta-rs's `load_cdf` give them."""
    store = store_of(table)
    snapshot, commits = commit_changes(store, start_version, end_version)
    columns = [quote_identifier(f["name"]) for f in snapshot.schema_json["fields"]]
    extra = [CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN]
    cdc_view = snapshot.with_metadata(
        replace(snapshot.metadata, schema_string=schema_string(with_change_type(snapshot.schema_json))))
    parts = []
    for kind, view in (("cdc", cdc_view), ("inserted", snapshot), ("deleted", snapshot)):
        # commits whose files stand for some of their rows are read one by one: a path (and its DV)
        # may appear in several of them
        for c in commits if kind != "cdc" else []:
            if c.by_rows and getattr(c, kind).num_rows:
                _check_files_exist(snapshot.store, getattr(c, kind), start_version)
                rows = files_dataframe(spark, view, getattr(c, kind))
                parts.append(rows.select(*columns, F.lit(INSERT if kind == "inserted" else DELETE).alias(CHANGE_TYPE_COLUMN),
                                         F.lit(c.version).cast("long").alias(COMMIT_VERSION_COLUMN),
                                         F.timestamp_millis(F.lit(c.timestamp)).alias(COMMIT_TIMESTAMP_COLUMN)))
        files = [(c.version, c.timestamp, getattr(c, kind)) for c in commits
                 if getattr(c, kind).num_rows and not (c.by_rows and kind != "cdc")]
        if not files:
            continue
        table = pa.concat_tables([f for _, _, f in files])
        _check_files_exist(snapshot.store, table, start_version)
        rows = files_dataframe(spark, view, table, with_file=True)
        if kind != "cdc":
            rows = rows.withColumn(CHANGE_TYPE_COLUMN, F.lit(INSERT if kind == "inserted" else DELETE))
        which = spark.createDataFrame([
            (local_file_key(snapshot.table_uri, p), version, timestamp)
            for version, timestamp, f in files for p in f.column("path").to_pylist()
        ], f"__file string, {COMMIT_VERSION_COLUMN} long, __ms long")
        rows = rows.join(F.broadcast(which), local_file_expr(F.col(FILE_COLUMN)) == F.col("__file"))
        parts.append(rows.select(*columns, CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN,
                                 F.timestamp_millis(F.col("__ms")).alias(COMMIT_TIMESTAMP_COLUMN)))
    if not parts:
        return no_changes(spark, snapshot)
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out.select(*columns, *extra)


def _check_files_exist(store: LogStore, files: pa.Table, start_version: int) -> None:
    root = store.table_uri
    missing = [decode_path(p) for p in files.column("path").to_pylist()
               if not fs.exists(absolute_file_path(root, p), store.options)]
    if missing:
        raise VersionNotFoundError(
            f"{root}: {len(missing)} file(s) holding changes since version {start_version} were deleted by "
            f"VACUUM (e.g. {missing[0]}); read changes from a later version.")


def no_changes(spark: SparkSession, snapshot: Any) -> DataFrame:
    """An empty change feed with the columns `changes_dataframe` gives for the snapshot's table."""
    schema = spark_schema(snapshot.schema_json)
    empty = StructType([*schema.fields, StructField(CHANGE_TYPE_COLUMN, StringType()),
                        StructField(COMMIT_VERSION_COLUMN, LongType()),
                        StructField(COMMIT_TIMESTAMP_COLUMN, TimestampType())])
    return empty_dataframe(spark, empty)


def snapshot_as_inserts(spark: SparkSession, snapshot: Any) -> DataFrame:
    """Every row of the snapshot as an insert at its version: where a consumer of changes starts."""
    return snapshot_dataframe(spark, snapshot).select(
        "*", F.lit(INSERT).alias(CHANGE_TYPE_COLUMN), F.lit(snapshot.version).cast("long").alias(COMMIT_VERSION_COLUMN),
        F.timestamp_millis(F.lit(snapshot.timestamp)).alias(COMMIT_TIMESTAMP_COLUMN))
