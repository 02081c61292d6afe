"""MERGE, phase 4: the new content written, the changed rows marked in deletion vectors (merge-on-read)
or their files removed (copy-on-write), the change data feed, the metrics delta-spark reports, and the
one commit. Reads every phase's fields."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame  # noqa: E402

from .... import change_data, deletion_vectors, row_tracking  # noqa: E402
from ....actions import now_ms  # noqa: E402
from ...change_data import change_rows, write_change_data  # noqa: E402
from ...reader import files_dataframe  # noqa: E402
from ...writer import target_file_size, write_files  # noqa: E402
from ..files import byte_count, record_count, removes_of, set_transactions, sum_records  # noqa: E402
from ..rows import marked_rows_by_file  # noqa: E402
from .run import MergeRun  # noqa: E402

NOTHING = object()  # no row changed: nothing to commit but what the run consumed


def write_and_commit(run: MergeRun, app_transactions: dict[str, int] | None, operation: str,
                     user_metadata: str | None, extra_commit_info: dict[str, Any] | None) -> Any:
    """The version committed, or NOTHING."""
    txn, snapshot, plan, touched = run.txn, run.snapshot, run.plan, run.touched
    if not touched.num_rows and run.inserts is None and not txn.metadata_changed:
        return NOTHING
    out = run.parts[0]
    for p in run.parts[1:]:
        out = out.unionByName(p)
    if plan.carry:
        out = in_few_files(out, run.n_updated + run.num_source, snapshot)
    materialize = bool(txn.protocol and txn.protocol.stores_partition_columns)
    # the metadata this commit writes (with any new column's physical name under column mapping)
    write_schema = txn.metadata.schema_json
    if run.keep_ids:
        write_schema = row_tracking.with_materialized_fields(write_schema, txn.metadata.configuration)
    adds = txn.stage(write_files(out, run.name, snapshot.partition_columns, write_schema,
                                 dict(txn.metadata.configuration), method=run.method,
                                 store_partition_columns=materialize, store=txn.store))
    if run.identity is not None:  # inserted rows share files with kept ones: a moved mark is a conflict
        txn.record_identity(run.identity.generated((), rebasable=False))
    if run.keep_ids:
        adds = [replace(a, stats=row_tracking.without_hidden_stats(a.stats, txn.metadata.configuration))
                for a in adds]
        txn.rows_keep_ids = True
    written = sum_records(adds)
    run.phases.done("write")
    changed = run.n_updated + run.n_deleted + run.n_by_source_updated + run.n_by_source_deleted
    marked = None
    if plan.marking and touched.num_rows:
        rows_by_file = run.driver_marks if run.on_driver else marked_rows_by_file(run.file_keys, touched,
                                                                                   run.hit_rows)
        marked = deletion_vectors.mark_rows(snapshot.store, rows_by_file, now_ms())
        txn.stage([marked.dv_file])
        touched_rows = changed
    else:
        touched_rows = record_count(touched) if touched.num_rows else 0
    if touched_rows is None:
        touched_rows = files_dataframe(run.spark, snapshot, touched).count()
    copied = touched_rows - changed
    inserted = written - copied - run.n_updated - run.n_by_source_updated
    if not touched.num_rows and inserted == 0 and not txn.metadata_changed:
        txn.discard_uncommitted(adds)  # nothing to commit but what was consumed
        return NOTHING
    adds_committed = adds if marked is None else [*adds, *marked.adds]
    removes = removes_of(touched) if marked is None else marked.removes
    cdc = []
    if run.writes_feed_files:
        # the rows this merge changed, for the change data feed (copied rows are not changes)
        schema_json = run.schema_json
        frames = [change_rows(run.updated.select(*run.old_cols), schema_json, change_data.UPDATE_PREIMAGE),
                  change_rows(run.updated.select(*run.out_cols), schema_json, change_data.UPDATE_POSTIMAGE),
                  change_rows(run.deleted.select(*run.old_cols), schema_json, change_data.DELETE)]
        if run.inserts is not None:
            frames.append(change_rows(run.inserts, schema_json, change_data.INSERT))
        cdc = txn.stage(write_change_data(frames, txn.store, snapshot.partition_columns, txn.metadata.schema_json,
                                          dict(txn.metadata.configuration), method=run.method))
    txn.add_actions([*removes, *adds_committed, *cdc, *set_transactions(app_transactions)])
    metrics = {
        "numSourceRows": run.num_source, "numTargetRowsInserted": inserted,
        "numTargetRowsUpdated": run.n_updated + run.n_by_source_updated,
        "numTargetRowsDeleted": run.n_deleted + run.n_by_source_deleted,
        "numTargetRowsMatchedUpdated": run.n_updated, "numTargetRowsMatchedDeleted": run.n_deleted,
        "numTargetRowsNotMatchedBySourceUpdated": run.n_by_source_updated,
        "numTargetRowsNotMatchedBySourceDeleted": run.n_by_source_deleted, "numTargetRowsCopied": copied,
        "numOutputRows": written, "numTargetFilesAdded": len(adds),
        "numTargetFilesRemoved": touched.num_rows if marked is None else marked.files_emptied,
        "numTargetBytesAdded": sum(a.size for a in adds),
        "numTargetBytesRemoved": byte_count(touched) if marked is None else 0,
        "numTargetFilesScanned": run.candidates.num_rows,
        "executionTimeMs": int((time.time() - run.started) * 1000),
    }
    if marked is not None:
        metrics["numTargetDeletionVectorsAdded"] = len(marked.adds)
    version = txn.commit(operation=operation, parameters=plan.operation_parameters(), metrics=metrics,
                         user_metadata=user_metadata, extra_commit_info=extra_commit_info)
    run.phases.done("commit")
    return version


def in_few_files(df: DataFrame, rows: int, snapshot: Any) -> DataFrame:
    """`df` in as few partitions as `rows` of the table's average row size fill files of its target size:
    merge-on-read writes only the changed rows, which would otherwise become one small file per
    partition of the source."""
    records = record_count(snapshot.files)
    if not records:
        return df
    row_bytes = byte_count(snapshot.files) / records
    return df.coalesce(max(1, math.ceil(rows * row_bytes / target_file_size(snapshot))))
