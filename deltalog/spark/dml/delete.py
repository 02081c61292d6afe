"""DELETE: files wholly inside the predicate are removed without being read; the others have their
matching rows marked in deletion vectors (merge-on-read) or are rewritten without them (copy-on-write).
`delete_plan` is shared with `write_dataframe`'s replaceWhere, which deletes before it appends."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, SparkSession, functions as F

from ...actions import AddFile, Metadata
from ...errors import NotATableError
from ...file_selection import files_for, selects_every_row
from ...file_actions import files_table
from ...table import DeltaTable, as_table
from ...transaction import rearranged_only, reruns_after_conflict
from ... import change_data, deletion_vectors, row_tracking
from ..change_data import change_rows, write_change_data
from ..reader import files_dataframe
from ..writer import write_files
from .files import byte_count, record_count, removes_of, sum_records, take_rows
from .rows import (
    mark_matching_rows, marks_enabled, partition_rows_matching, rows_with_row_ids, split_files_by_predicate,
)


@dataclass(frozen=True)
class DeletePlan:
    """What deleting the rows that match a predicate takes, planned once from the snapshot: files removed
    whole, files rewritten without those rows (copy-on-write, with `keep` the rows they keep), or the
    rows marked in deletion vectors (merge-on-read); how many rows go (None: not known without a scan)."""

    remove: pa.Table
    rewrite: pa.Table
    deleted: int | None
    keep: DataFrame | None = None
    keeps_ids: bool = False            # the kept rows carry their row IDs (row tracking)
    whole_table: bool = False
    marked: deletion_vectors.MarkedRows | None = None
    marked_files: pa.Table | None = None

    @classmethod
    def whole(cls, files: pa.Table, deleted: int | None, whole_table: bool = False) -> "DeletePlan":
        """Remove `files` whole."""
        return cls(remove=files, rewrite=files.slice(0, 0), deleted=deleted, whole_table=whole_table)

    @property
    def removed(self) -> pa.Table:
        """Every file this plan removes (whole or rewritten)."""
        return pa.concat_tables([self.remove, self.rewrite]) if self.rewrite.num_rows else self.remove


def _remaining_rows(spark: SparkSession, snapshot: Any, files: pa.Table, predicate: str) -> tuple[DataFrame, bool]:
    """The rows of `files` that do NOT satisfy `predicate` (null counts as not satisfied), and whether
    they keep their row IDs: on a table with row tracking they come with its hidden columns
    (`rows_with_row_ids`), to be written by `write_kept_rows`."""
    keeps_ids = row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, files)
    rows = rows_with_row_ids(spark, snapshot, files) if keeps_ids else files_dataframe(spark, snapshot, files)
    return rows.filter(~F.coalesce(F.expr(predicate), F.lit(False))), keeps_ids


def write_kept_rows(txn: Any, plan: DeletePlan, table: str, partition_by: Sequence[str],
                     schema_json: dict[str, Any], configuration: dict[str, str], method: str,
                     store_partition_columns: bool) -> list[AddFile]:
    """The files of the rows a copy-on-write delete keeps (`plan.keep`), each row keeping its row ID
    and commit version in the hidden columns where the table tracks them."""
    keeps_ids = plan.keeps_ids
    if keeps_ids:
        schema_json = row_tracking.with_materialized_fields(schema_json, configuration)
    adds = txn.stage(write_files(plan.keep, table, partition_by, schema_json, configuration, method=method,
                                 store_partition_columns=store_partition_columns, store=txn.store))
    if keeps_ids:
        adds = [replace(a, stats=row_tracking.without_hidden_stats(a.stats, configuration)) for a in adds]
        txn.rows_keep_ids = True
    return adds


def deleted_rows_changes(spark: SparkSession, snapshot: Any, removed: pa.Table, predicate: str,
                          method: str, inserted: Sequence[AddFile] = (), metadata: Metadata | None = None) -> list:
    """With the change data feed on, a commit that rewrites files records the rows it deleted (the
    removed files' rows matching `predicate`) and, for replace_where, the rows it inserted (read back
    from the files it wrote, so a query is never run twice): `cdc` actions, or none."""
    metadata = metadata or snapshot.metadata
    if not change_data.is_enabled(metadata.configuration):
        return []
    changes = [change_rows(files_dataframe(spark, snapshot, removed).filter(F.coalesce(F.expr(predicate), F.lit(False))),
                           metadata.schema_json, change_data.DELETE)]
    if inserted:
        files = files_table([a.to_dict() for a in inserted])
        changes.append(change_rows(files_dataframe(spark, snapshot.with_metadata(metadata), files), metadata.schema_json, change_data.INSERT))
    return write_change_data(changes, snapshot.store, metadata.partition_columns, metadata.schema_json,
                             dict(metadata.configuration), method=method)


def delete_plan(spark: SparkSession, txn: Any, predicate: str | None) -> DeletePlan:
    """What deleting the rows matching `predicate` takes: files to remove whole, files to rewrite, the
    DataFrame of rows to keep from them, and counts. Records what was read in the transaction."""
    snapshot = txn.snapshot
    text = (predicate or "").strip()
    candidates = files_for(txn, text)
    if selects_every_row(text):
        return DeletePlan.whole(candidates, record_count(candidates), whole_table=True)
    by_partition = partition_rows_matching(spark, snapshot, candidates, text)
    if by_partition is not None:
        whole = take_rows(candidates, by_partition)
        return DeletePlan.whole(whole, record_count(whole))
    if marks_enabled(txn):
        marked = mark_matching_rows(spark, snapshot, candidates, text)
        txn.stage([marked.dv_file])
        touched = {a.path for a in marked.removes}
        hit = pc.is_in(candidates.column("path"), pa.array(sorted(touched), pa.string()))
        none = candidates.slice(0, 0)
        return DeletePlan(remove=none, rewrite=none, deleted=marked.rows, marked=marked,
                          marked_files=candidates.filter(hit))
    whole, partial, matched = split_files_by_predicate(spark, snapshot, candidates, text)
    keep, keeps_ids = _remaining_rows(spark, snapshot, partial, text) if partial.num_rows else (None, False)
    return DeletePlan(remove=whole, rewrite=partial, deleted=matched, keep=keep, keeps_ids=keeps_ids)


@reruns_after_conflict(rearranged_only)
def delete(spark: SparkSession, table: DeltaTable | str, predicate: str | None = None,
           user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
           method: str = "native") -> int | None:
    """DELETE FROM table WHERE predicate (None/'true': every row), copy-on-write, in one commit.
    Returns None when no row matched (nothing is committed)."""
    table = as_table(table)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to delete from.")
    txn = table.transaction()
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    started = time.time()
    with txn.staging():
        return _delete(spark, txn, predicate, method, started, user_metadata, extra_commit_info)


def _delete(spark: SparkSession, txn: Any, predicate: str | None, method: str, started: float,
            user_metadata: str | None, extra_commit_info: dict[str, Any] | None) -> int | None:
    plan = delete_plan(spark, txn, predicate)
    snapshot = txn.snapshot
    if plan.marked is not None:
        return _commit_marked_delete(spark, txn, plan, predicate, method, started, user_metadata,
                                     extra_commit_info)
    removed = plan.removed
    if removed.num_rows == 0:
        return None
    adds: list[AddFile] = []
    cdc = []
    if plan.keep is not None:
        materialize = bool(txn.protocol and txn.protocol.stores_partition_columns)
        adds = write_kept_rows(txn, plan, snapshot.table_uri, snapshot.partition_columns, snapshot.schema_json,
                               snapshot.configuration, method, materialize)
        cdc = txn.stage(deleted_rows_changes(spark, snapshot, removed, predicate, method))
    txn.add_actions([*removes_of(removed), *adds, *cdc])
    metrics = {
        "numRemovedFiles": removed.num_rows, "numAddedFiles": len(adds),
        "numRemovedBytes": byte_count(removed), "numAddedBytes": sum(a.size for a in adds),
        "numCopiedRows": sum_records(adds), "executionTimeMs": int((time.time() - started) * 1000),
    }
    if plan.deleted is not None:
        metrics["numDeletedRows"] = plan.deleted
    pred = (predicate or "").strip()
    return txn.commit(operation="DELETE", parameters={"predicate": json.dumps([pred] if pred else [])},
                      metrics=metrics, user_metadata=user_metadata, extra_commit_info=extra_commit_info)


def _commit_marked_delete(spark: SparkSession, txn: Any, plan: DeletePlan, predicate: str | None, method: str,
                          started: float, user_metadata: str | None,
                          extra_commit_info: dict[str, Any] | None) -> int | None:
    """The commit of a merge-on-read DELETE: each touched file is removed as it was and added again
    with its new deletion vector (or only removed when no row is left)."""
    marked = plan.marked
    if not marked.removes:
        return None
    snapshot = txn.snapshot
    cdc = txn.stage(deleted_rows_changes(spark, snapshot, plan.marked_files, predicate, method))
    txn.add_actions([*marked.removes, *marked.adds, *cdc])
    metrics = {
        "numRemovedFiles": marked.files_emptied, "numAddedFiles": 0, "numCopiedRows": 0,
        "numDeletionVectorsAdded": len(marked.adds), "numDeletionVectorsRemoved":
            sum(1 for r in marked.removes if r.deletion_vector), "numDeletedRows": marked.rows,
        "executionTimeMs": int((time.time() - started) * 1000),
    }
    pred = (predicate or "").strip()
    return txn.commit(operation="DELETE", parameters={"predicate": json.dumps([pred] if pred else [])},
                      metrics=metrics, user_metadata=user_metadata, extra_commit_info=extra_commit_info)
