"""Spark-side table operations, each exactly ONE commit through a `Transaction`.

- `write_dataframe`: create / append / overwrite / replaceWhere / dynamic partition overwrite.
- `merge`: MERGE INTO: candidate files from min/max stats of the join keys, then a join on the files'
  rows to find the files that really hold matched rows; only those are rewritten or marked.
- `delete`: DELETE; files wholly inside the predicate are removed without being read.
- `alter_table`: a table's definition (properties, constraints, comments, columns) without its rows.

Each returns the committed version, or None when there was nothing to commit. Data files are written
before the commit; when the commit fails or is interrupted, `Transaction.commit_or_discard` deletes the
files no landed commit names (any left by a killed process are invisible to readers; VACUUM removes them).
Each operation lives in its own module under `dml/`; this module is what callers import.
"""
from __future__ import annotations

from .dml.alter import alter_table, check_existing_rows
from .dml.delete import delete
from .dml.merge import MergeDuplicateSourceError, merge
from .dml.rows import rows_with_row_ids
from .dml.write import dataframe_schema, write_dataframe
from .writer import write_files

__all__ = ["MergeDuplicateSourceError", "alter_table", "check_existing_rows", "dataframe_schema", "delete", "merge",
           "rows_with_row_ids", "write_dataframe", "write_files"]
