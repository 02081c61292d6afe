"""Predicates and data skipping: which files may hold rows matching a predicate, from partition values
and from the per-file min/max/nullCount statistics of the log.

- `model`: the expressions (`col("x") == 1`, `isin`, `is_null`, `&`, `|`, `conjunction`), each answering
  for one file's partition values and writing itself back as SQL;
- `parser`: SQL text to expressions (`parse_sql_predicate`, `as_expr`), with sqlglot;
- `literals`: literal values and value strings coerced by Delta type;
- `stats_table`: the `stats` JSON of many files parsed once into typed bounds;
- `evaluator`: the one evaluator over `Snapshot.files` (`prune`, `files_matching`) and the partition
  predicates writers and transactions bind (`bind`, `bind_to`, `inexact_on_partitions`).

Every answer errs on the side of keeping a file."""
from .evaluator import (
    PartitionPredicate, bind, bind_to, files_matching, inexact_on_partitions, only_partition_columns, prune,
    prune_snapshot, resolve_column,
)
from .model import ALWAYS, NEVER, And, Column, Compare, Expr, In, IsNull, Or, col, conjunction
from .parser import as_expr, parse_sql_predicate

__all__ = [
    "ALWAYS", "NEVER", "And", "Column", "Compare", "Expr", "In", "IsNull", "Or", "PartitionPredicate", "as_expr",
    "bind", "bind_to", "col", "conjunction", "files_matching", "inexact_on_partitions", "only_partition_columns",
    "parse_sql_predicate", "prune", "prune_snapshot", "resolve_column",
]
