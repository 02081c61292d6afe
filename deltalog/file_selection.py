"""Which files an operation reads for a predicate, and what it records on its transaction: the one rule
shared by DELETE, UPDATE, MERGE and replace-where.

`files_for(txn, predicate)` keeps the live files whose partition values or min/max statistics may hold a
matching row, and records both those files and the predicate (bound to the snapshot) as read: a
concurrent commit then conflicts when it removes one of those files, or adds a file the predicate may
match; other commits pass."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from .expressions import ALWAYS, Expr, as_expr, bind_to, files_matching

_EVERY_ROW = ("", "true", "1=1", "(true)")


def selects_every_row(predicate: Expr | str | None) -> bool:
    """No predicate, or SQL text spelled as always true: the operation reads the whole table. (An
    expression that prunes nothing still reads file by file: a concurrent file conflicts by its
    partition and statistics, as for any predicate.)"""
    return predicate is None or isinstance(predicate, str) and predicate.strip().lower() in _EVERY_ROW


def files_for(txn: Any, predicate: Expr | str | None) -> pa.Table:
    """The files of `txn.snapshot` that may hold rows matching `predicate` (an expression or SQL text),
    recorded on `txn` as read. A predicate selecting every row reads the whole table."""
    snapshot = txn.snapshot
    if selects_every_row(predicate):
        txn.read_whole_table()
        return snapshot.files
    expr = as_expr(predicate)
    files = files_matching(snapshot, expr) if expr is not ALWAYS else snapshot.files
    txn.read_files(files)
    txn.read_predicate(bind_to(expr, snapshot))
    return files
