"""Finding rows in a table's files: by file key (`FileKeys`), by partition, by predicate; marking them in
deletion vectors; and the rows of files with their row IDs (row tracking)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import Column, DataFrame, SparkSession, functions as F
from pyspark.sql.types import StructType

from ...actions import AddFile, now_ms
from ...errors import DeltaError
from ...column_mapping import physical_names
from ...paths import parse_partition_value
from ...schema import partition_column_types, quote_identifier
from ... import deletion_vectors, row_tracking
from ..reader import (
    FILE_COLUMN, FILE_SIZE_COLUMN, ROW_INDEX_COLUMN, deleted_rows_column, files_dataframe, has_deletion_vectors,
    local_file_expr, local_file_key, local_path_of, read_through_data_source, sizes_differ, tells_files_by_size,
)
from .files import add_files_of, take_rows


ACTION_COLUMN = "__deltalog_action"


ROW_ID_COLUMN = "__deltalog_row_id"  # a matched target row's row ID (row tracking), for its new version


class FileKeys:
    """How the rows a DML reads name their file: by size (`FILE_SIZE_COLUMN`) where no two of the files
    read share one, else by path (`FILE_COLUMN`). Spark hands each row its file's size almost for free,
    while it copies the path into every row: a 10M-row merge match took 2.1 s with paths, 0.9 s with
    sizes. (The Python data source of object stores without a Hadoop connector gives paths.)"""

    def __init__(self, spark: SparkSession, snapshot: Any, files: pa.Table, by_size: bool | None = None):
        self.spark, self.snapshot = spark, snapshot
        self.by_size = by_size if by_size is not None else (
            not read_through_data_source(spark, snapshot.store) and files.num_rows > 0
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


def rows_with_row_ids(spark: SparkSession, snapshot: Any, files: pa.Table, like: FileKeys | None = None) -> DataFrame:
    """The rows of `files` (live files of `snapshot`, which `row_tracking.keeps_row_ids`) with the table's
    columns plus its two hidden row tracking columns holding each row's row ID and row commit version:
    the file's materialized value where it has one, else the default (`baseRowId` + the row's position
    in the file, and `defaultRowCommitVersion`). Its columns are those of
    `row_tracking.with_materialized_fields`; with `like`, also that key's column and ROW_INDEX_COLUMN
    (as `like.dataframe` gives them)."""
    fields = row_tracking.materialized_fields(snapshot.configuration)
    view = snapshot.with_extra_columns(fields)
    keys = FileKeys(spark, view, files, by_size=like.by_size if like is not None else None)
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


def _file_lookup(spark: SparkSession, snapshot: Any, files: pa.Table, keys: FileKeys,
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


def with_default_row_ids(spark: SparkSession, snapshot: Any, files: pa.Table, keys: FileKeys,
                          rows: DataFrame) -> DataFrame:
    """`rows` (of `files`, with their `keys` column, ROW_INDEX_COLUMN and ROW_ID_COLUMN: the materialized row ID
    or null) with ROW_ID_COLUMN defaulted to the file's baseRowId + the row's position, by a broadcast lookup
    of the files (run on the matched rows only, not on every row scanned)."""
    base = "__deltalog_base_row_id"
    lookup, on = _file_lookup(spark, snapshot, files, keys, {base: "base_row_id"})
    return (rows.join(F.broadcast(lookup), on)
            .withColumn(ROW_ID_COLUMN, F.coalesce(F.col(ROW_ID_COLUMN), F.col(base) + F.col(ROW_INDEX_COLUMN)))
            .drop(base, _LOOKUP_KEY))


def partition_rows_matching(spark: SparkSession, snapshot: Any, files: pa.Table, predicate: str) -> list[int] | None:
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


def split_files_by_predicate(spark: SparkSession, snapshot: Any, candidates: pa.Table,
                              predicate: str) -> tuple[pa.Table, pa.Table, int]:
    """(files wholly matching, files partly matching, number of matching rows) among `candidates`."""
    if candidates.num_rows == 0:
        return candidates, candidates, 0
    keys = FileKeys(spark, snapshot, candidates)
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
    return take_rows(candidates, whole), take_rows(candidates, partial), matched


def marks_enabled(txn: Any) -> bool:
    """Whether this transaction's DML marks rows in deletion vectors instead of rewriting files."""
    return deletion_vectors.is_enabled(txn.metadata.configuration)


def marked_rows_by_file(keys: FileKeys, files: pa.Table, table: pa.Table) -> list[tuple[AddFile, Any]]:
    """(the file's add, its row indexes) for the rows of `files` that `table` (`keys.column`,
    ROW_INDEX_COLUMN; collected to the driver, as a DV holds row numbers, not rows) names."""
    if table.num_rows == 0:
        return []
    grouped = table.group_by(keys.column).aggregate([(ROW_INDEX_COLUMN, "list")])
    row_of = keys.rows_of(files)
    adds = add_files_of(files)
    return [(adds[row_of(key)], np.asarray(rows.values, dtype=np.uint64))
            for key, rows in zip(grouped.column(keys.column).to_pylist(), grouped.column(f"{ROW_INDEX_COLUMN}_list"))]


def mark_matching_rows(spark: SparkSession, snapshot: Any, files: pa.Table,
                        predicate: str) -> deletion_vectors.MarkedRows:
    """Merge-on-read DELETE of the rows of `files` matching `predicate`: their row numbers go into
    deletion vectors (one new DV file); no data file is rewritten."""
    keys = FileKeys(spark, snapshot, files)
    hits = keys.dataframe(files).filter(F.coalesce(F.expr(predicate), F.lit(False)))
    table = hits.select(keys.column, ROW_INDEX_COLUMN).toArrow()
    return deletion_vectors.mark_rows(snapshot.store, marked_rows_by_file(keys, files, table), now_ms())


def actions_per_file(hits: pa.Table, key: str) -> list[dict[str, Any]]:
    """Per file of `hits` (its `key` column, ROW_INDEX_COLUMN, ACTION_COLUMN, on the driver): the most actions
    one row got (`max_n`) and the rows updated (`u`), deleted (`d`), updated and deleted by a not matched
    by source clause (`bu`, `bd`), as the Spark aggregation of the copy-on-write path gives them."""
    per_row = hits.group_by([key, ROW_INDEX_COLUMN]).aggregate([([], "count_all")])
    most = per_row.group_by(key).aggregate([("count_all", "max")])
    out = {f: {key: f, "max_n": n, "u": 0, "d": 0, "bu": 0, "bd": 0}
           for f, n in zip(most.column(key).to_pylist(), most.column("count_all_max").to_pylist())}
    counts = hits.group_by([key, ACTION_COLUMN]).aggregate([([], "count_all")])
    names = {"update": "u", "delete": "d", "by_source_update": "bu", "by_source_delete": "bd"}
    for f, action, n in zip(*(counts.column(c).to_pylist() for c in (key, ACTION_COLUMN, "count_all"))):
        if action in names:
            out[f][names[action]] += n
    return list(out.values())
