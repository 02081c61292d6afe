"""The rows of a snapshot read with pyarrow alone (no Spark): each live file's rows minus those its
deletion vector deletes, with partition values from the log, in the table's schema."""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from .column_mapping import logical_column, mode_of, physical_names
from .deletion_vectors import deleted_rows, keep_mask
from .storage.files import exists, read_parquet
from .paths import absolute_file_path, decode_path, parse_partition_value
from .schema import partition_column_types, to_arrow_schema


def read_data_file(store: Any, schema_json: dict[str, Any], configuration: dict[str, str],
                   partition_columns: list[str], log_path: str, partition_values: dict[str, str | None],
                   deletion_vector: dict[str, Any] | None, *, skip_deleted: bool = True,
                   row_index: bool = False, columns: list[str] | None = None) -> pa.Table:
    """One data file's rows in the table's schema (columns the file lacks are nulls; partition values,
    keyed by physical name, from the log), or only its `columns` (top-level names, in that order).
    `store` is the table's log store (for its URI, options and deletion vector files). With
    `row_index`, a last column `row_index` holds each row's position in the file; unless `skip_deleted`
    is false, the rows the deletion vector deletes are left out."""
    schema = to_arrow_schema(schema_json)
    fields = schema_json["fields"]
    mode = mode_of(configuration)
    keys = physical_names(schema_json, configuration)
    stored = None  # every column of the file
    if columns is not None:
        by_name = {f["name"]: i for i, f in enumerate(fields)}
        chosen = [by_name[c] for c in columns]
        schema = pa.schema([schema.field(i) for i in chosen])
        fields = [fields[i] for i in chosen]
        if mode != "id":  # (under id mapping a file's column is found by field id, after reading)
            stored = [keys[f["name"]] for f in fields if f["name"] not in partition_columns]
    data = read_parquet(absolute_file_path(store.table_uri, log_path), columns=stored,
                        storage_options=store.options, missing_ok=True)
    positions = pa.array(np.arange(data.num_rows, dtype=np.int64)) if row_index else None
    if deletion_vector and skip_deleted:
        keep = keep_mask(data.num_rows, deleted_rows(store, deletion_vector))
        data = data.filter(keep)
        positions = positions.filter(keep) if positions is not None else None
    types = partition_column_types(schema_json, partition_columns) if partition_columns else {}
    columns = []
    for field, delta_field in zip(schema, fields):
        if field.name in types:
            value = parse_partition_value((partition_values or {}).get(keys[field.name]), types[field.name])
            columns.append(pa.array([value] * data.num_rows, field.type))
            continue
        column = logical_column(data, delta_field, mode)
        columns.append(column.cast(field.type) if column is not None else pa.nulls(data.num_rows, field.type))
    if positions is not None:
        columns.append(positions)
        schema = schema.append(pa.field("row_index", pa.int64()))
    return pa.table(columns, schema=schema)


def read_file(snapshot: Any, index: int, columns: list[str] | None = None) -> pa.Table:
    """The live rows of the snapshot's `index`-th file, in the table's schema (or only its `columns`)."""
    files = snapshot.files
    path = files.column("path")[index].as_py()
    try:
        return read_data_file(snapshot.store, snapshot.schema_json, snapshot.configuration,
                              snapshot.partition_columns, path,
                              dict(files.column("partition_values")[index].as_py() or []),
                              files.column("deletion_vector")[index].as_py(), columns=columns)
    except FileNotFoundError:
        uri = absolute_file_path(snapshot.table_uri, path)
        if not exists(uri, snapshot.store.options):
            raise snapshot.missing_file_error(decode_path(path)) from None
        raise


def read_table(snapshot: Any, columns: list[str] | None = None) -> pa.Table:
    """Every live row of the snapshot (only its `columns`, top-level names in that order, when given)."""
    parts = [read_file(snapshot, i, columns) for i in range(snapshot.num_files)]
    if parts:
        return pa.concat_tables(parts)
    schema = to_arrow_schema(snapshot.schema_json)
    return (schema if columns is None else pa.schema([schema.field(c) for c in columns])).empty_table()
