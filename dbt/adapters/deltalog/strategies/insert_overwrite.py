"""`insert_overwrite`: the partitions the new rows fall in are replaced by them (the whole table when it
has no partitions), as dbt-spark's dynamic partition overwrite does."""
from __future__ import annotations

from typing import Optional

from .incremental_write import IncrementalWrite


def run(w: IncrementalWrite) -> Optional[int]:
    from deltalog.spark import operations

    partitioned = bool(w.table.snapshot().partition_columns)
    return operations.write_dataframe(w.df, w.table, mode="overwrite", overwrite_partitions=partitioned,
                                      operation="WRITE", **w.commit)
