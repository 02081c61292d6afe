"""The rows of a snapshot read with pyarrow alone (no Spark): each live file's rows minus those its
deletion vector deletes, with partition values from the log, in the table's schema."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .column_mapping import logical_column, mode_of, physical_names
from .deletion_vectors import deleted_rows, keep_mask
from .paths import absolute_file_path, parse_partition_value
from .schema import partition_column_types, to_arrow_schema


def read_file(snapshot: Any, index: int) -> pa.Table:
    """The live rows of the snapshot's `index`-th file, in the table's schema (columns the file lacks
    are nulls)."""
    files = snapshot.files
    schema = to_arrow_schema(snapshot.schema_json)
    partitions = snapshot.partition_columns
    log_path = files.column("path")[index].as_py()
    data = pq.read_table(absolute_file_path(snapshot.table_uri, log_path))
    dv = files.column("deletion_vector")[index].as_py()
    if dv:
        data = data.filter(keep_mask(data.num_rows, deleted_rows(snapshot.store, dv)))
    values = dict(files.column("partition_values")[index].as_py() or [])
    types = partition_column_types(snapshot.schema_json, partitions) if partitions else {}
    mode = mode_of(snapshot.configuration)
    keys = physical_names(snapshot.schema_json, snapshot.configuration)
    columns = []
    for field, delta_field in zip(schema, snapshot.schema_json["fields"]):
        column = None if field.name in types else logical_column(data, delta_field, mode)
        if field.name in types:
            value = parse_partition_value(values.get(keys[field.name]), types[field.name])
            columns.append(pa.array([value] * data.num_rows, field.type))
        elif column is not None:
            columns.append(column.cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.table(columns, schema=schema)


def read_table(snapshot: Any) -> pa.Table:
    """Every live row of the snapshot."""
    parts = [read_file(snapshot, i) for i in range(snapshot.num_files)]
    return pa.concat_tables(parts) if parts else to_arrow_schema(snapshot.schema_json).empty_table()
