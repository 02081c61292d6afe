"""`replace_where`: the table's rows matching `incremental_predicates` are replaced by the new rows; a new
row outside them fails the model, as Delta's replaceWhere does."""
from __future__ import annotations

from typing import List, Optional

from dbt_common.exceptions import CompilationError

from .incremental_write import IncrementalWrite


def replace(w: IncrementalWrite, predicates: List[str], df=None) -> Optional[int]:
    from deltalog.spark import operations

    if not predicates:
        raise CompilationError(f"Model {w.name}: incremental_strategy 'replace_where' needs "
                               "`incremental_predicates` (the rows of the table that the new data replaces)")
    return operations.write_dataframe(w.df if df is None else df, w.table, mode="overwrite",
                                      replace_where=" and ".join(f"({p})" for p in predicates),
                                      operation="WRITE", **w.commit)


def run(w: IncrementalWrite) -> Optional[int]:
    return replace(w, w.predicates)
