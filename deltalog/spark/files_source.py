"""A Spark data source (PySpark's Python data source API) over some data files of a Delta table on an
object store, for Spark sessions without a Hadoop connector for its scheme (no `hadoop-aws` here).

Each task reads its files with pyarrow's file system for the store (`deltalog.storage.files`), through
the same per-file reader as the pure-Arrow scan (`deltalog.scan.read_data_file`): column mapping,
partition values from the log, widened types and deletion vectors are all applied there. It can add
the file each row comes from and its position in that file, as `_metadata.file_path` and
`_metadata.row_index` do on native scans.

The credentials travel in an option whose name Spark redacts in plans and logs (`secret...`); nothing
else about the store is secret. PySpark's Python sources do not prune columns, so a read costs the
whole files: the native reader is used wherever Spark can reach the files itself.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Iterator
from urllib.parse import quote

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType

SOURCE_NAME = "deltalog_files"
_registering = threading.Lock()


def register_source(spark: SparkSession, source: type) -> None:
    """Register a Python data source in the session. Spark refuses one that two threads register at once
    ("already exists"); one at a time, a registration replaces the last."""
    with _registering:
        spark.dataSource.register(source)


# Spark redacts option values whose key matches spark.redaction.regex (`secret` does by default).
SECRET_OPTION = "secret_storage_options"
_TARGET_PARTITION_BYTES = 128 * 1024 * 1024


def spark_file_path(uri: str) -> str:
    """A file's URI spelled as Spark spells `_metadata.file_path` (URI-encoded), so that
    `reader.local_path_of` / `local_file_expr` decode both alike."""
    scheme, sep, rest = uri.partition("://")
    return f"{scheme}{sep}{quote(rest, safe='/@=')}" if sep else quote(uri, safe="/@=")


class FilesPartition(InputPartition):
    """Some data files of a table, read by one task (this source's and the table stream's)."""

    def __init__(self, files: list[list[Any]]):
        super().__init__(None)
        self.files = files  # [log path, partition values, deletion vector]


class DeltaFilesSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(json.loads(self.options["plan"]), json.loads(self.options.get(SECRET_OPTION) or "{}"))


class _Reader(DataSourceReader):
    def __init__(self, plan: dict[str, Any], storage_options: dict[str, str]):
        self.plan = plan
        self.storage_options = storage_options

    def partitions(self) -> list[InputPartition]:
        out, group, size = [], [], 0
        for entry, file_size in zip(self.plan["files"], self.plan["sizes"]):
            if group and size + file_size > _TARGET_PARTITION_BYTES:
                out.append(FilesPartition(group))
                group, size = [], 0
            group.append(entry)
            size += file_size
        if group:
            out.append(FilesPartition(group))
        return out

    def read(self, partition: FilesPartition) -> Iterator[Any]:
        import pyarrow as pa

        from ..scan import read_data_file
        from ..storage import log_store_for

        plan = self.plan
        store = log_store_for(plan["table_uri"], self.storage_options)
        for log_path, values, dv in partition.files:
            table = read_data_file(store, plan["schema"], plan["configuration"], plan["partition_columns"],
                                   log_path, values, dv, skip_deleted=plan["skip_deleted"],
                                   row_index=plan["with_row_index"])
            if plan["with_file"]:
                from ..paths import absolute_file_path
                name = spark_file_path(absolute_file_path(store.table_uri, log_path))
                table = table.append_column(plan["file_column"], pa.array([name] * table.num_rows, pa.string()))
            if plan["with_row_index"]:
                i = table.column_names.index("row_index")
                table = table.set_column(i, plan["row_index_column"], table.column(i))
                if plan["with_file"]:  # the declared order: file, then row index
                    table = table.select([*table.column_names[:i], *table.column_names[i + 1:], plan["row_index_column"]])
            yield from table.to_batches()


def read_files(spark: SparkSession, snapshot: Any, files: Any, schema: StructType, *, with_file: bool,
               with_row_index: bool, skip_deleted: bool, file_column: str, row_index_column: str) -> DataFrame:
    """The rows of `files` (rows of `snapshot.files`) in the Spark schema `schema` of the table, plus the
    file column and the row index column when asked."""
    register_source(spark, DeltaFilesSource)
    fields = list(schema.fields)
    if with_file:
        fields.append(StructField(file_column, StringType()))
    if with_row_index:
        fields.append(StructField(row_index_column, LongType()))
    plan = {
        "table_uri": snapshot.table_uri, "schema": snapshot.schema_json,
        "configuration": dict(snapshot.configuration or {}), "partition_columns": list(snapshot.partition_columns),
        "files": [[p, dict(v or []), dv] for p, v, dv in zip(files.column("path").to_pylist(),
                                                                files.column("partition_values").to_pylist(),
                                                                files.column("deletion_vector").to_pylist())],
        "sizes": files.column("size").to_pylist(),
        "with_file": with_file, "with_row_index": with_row_index, "skip_deleted": skip_deleted,
        "file_column": file_column, "row_index_column": row_index_column,
    }
    from ..storage.options import StorageOptions

    options = snapshot.store.options.over(StorageOptions.from_environment()).as_dict()
    return (spark.read.format(SOURCE_NAME).schema(StructType(fields)).option("plan", json.dumps(plan))
            .option(SECRET_OPTION, json.dumps(options)).load())
