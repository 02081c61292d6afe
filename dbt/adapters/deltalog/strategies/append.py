"""`append`: the new rows added as they are, one blind append."""
from __future__ import annotations

from typing import Optional

from .incremental_write import IncrementalWrite


def run(w: IncrementalWrite) -> Optional[int]:
    from deltalog.spark import operations

    return operations.write_dataframe(w.df, w.table, mode="append", operation="WRITE", **w.commit)
