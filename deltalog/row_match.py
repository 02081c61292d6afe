"""Which live rows of some of a snapshot's files hold given keys, matched with pyarrow where the caller
runs: only the key columns are read, deleted rows are left out, and the match is Arrow's hash join. This
is how a merge with a small source finds its target rows without a scan of the table by an engine (as
delta-rs matches merges)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .scan import read_data_file
from .schema import to_arrow_schema

FILE = "file"  # the row of `files` a matched row is in
ROW_INDEX = "row_index"  # its position in that file


def matching_rows(snapshot: Any, files: pa.Table, keys: pa.Table, columns: list[str], threads: int = 4) -> pa.Table:
    """The rows of `files` (rows of `snapshot.files`) whose `columns` equal the first len(columns)
    columns of a row of `keys`, one output row per pair: FILE, ROW_INDEX and the other columns of `keys`.
    Rows deleted by deletion vectors never match, nor does a null key. `keys` is cast to the columns'
    types (the caller makes sure equality means the same in both)."""
    names = [f"__key{i}" for i in range(len(columns))]
    types = to_arrow_schema(snapshot.schema_json)
    wanted = keys.rename_columns(names + keys.column_names[len(columns):])
    for i in range(len(columns)):
        wanted = wanted.set_column(i, names[i], wanted.column(i).cast(types.field(columns[i]).type))
    wanted = wanted.filter(_all_valid(wanted, names))

    paths = files.column("path").to_pylist()
    partition_values = files.column("partition_values").to_pylist()
    dvs = files.column("deletion_vector").to_pylist()

    def read(i: int) -> pa.Table:
        data = read_data_file(snapshot.store, snapshot.schema_json, snapshot.configuration,
                              snapshot.partition_columns, paths[i], dict(partition_values[i] or []), dvs[i],
                              row_index=True, columns=columns)
        data = data.rename_columns(names + [ROW_INDEX]).filter(_all_valid(data, list(range(len(columns)))))
        return data.append_column(FILE, pa.array(np.full(data.num_rows, i, dtype=np.int32)))

    with ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
        parts = list(pool.map(read, range(len(paths))))
    if not parts or wanted.num_rows == 0:
        return pa.table({FILE: pa.array([], pa.int32()), ROW_INDEX: pa.array([], pa.int64()),
                         **{c: wanted.column(c).slice(0, 0) for c in wanted.column_names[len(columns):]}})
    target = pa.concat_tables(parts)
    joined = target.join(wanted, keys=names, join_type="inner", use_threads=True)
    return joined.select([FILE, ROW_INDEX, *wanted.column_names[len(columns):]])


def _all_valid(table: pa.Table, columns: list[Any]) -> pa.Array | bool:
    masks = [pc.is_valid(table.column(c)) for c in columns]
    out = masks[0]
    for m in masks[1:]:
        out = pc.and_(out, m)
    return out
