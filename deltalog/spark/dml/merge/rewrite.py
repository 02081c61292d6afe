"""MERGE, phase 3: the new content. Copy-on-write rewrites every row of the touched files (updated,
deleted or copied); merge-on-read writes only the changed rows' new versions (the old ones are marked in
deletion vectors at commit); then the inserts. The changes are few next to the touched rows: they are
broadcast rather than every row shuffled.
Reads phases 1-2's fields; sets `parts`, `updated`, `deleted`, `old_cols`, `out_cols`, `inserts`."""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import functions as F  # noqa: E402

from .... import deletion_vectors, identity, row_tracking  # noqa: E402
from ....sql import varies_between_runs  # noqa: E402
from ....schema import quote_identifier  # noqa: E402
from ...reader import ROW_INDEX_COLUMN, files_dataframe  # noqa: E402
from ...writer import number_identity_columns  # noqa: E402
from ..rows import ACTION_COLUMN, ROW_ID_COLUMN, rows_with_row_ids  # noqa: E402
from .plan import BY_SOURCE_NEW, NEW, OLD, SOURCE_ID, assigned, atomic_types, stored_value  # noqa: E402
from .run import MergeRun  # noqa: E402


def new_content(run: MergeRun) -> None:
    if run.touched.num_rows and (run.plan.carry or run.on_driver is not None):
        _changed_rows_only(run)
    elif run.touched.num_rows:
        _rewritten_files(run)
    if run.plan.insert is not None and not run.each_source_row_once:
        _inserts(run)


def _changed_rows_only(run: MergeRun) -> None:
    """The updated rows' new versions, built from the values the match carried (merge-on-read), or from
    the source rows of the updated pairs; copy-on-write matched on the driver adds the touched files'
    other rows."""
    spark, snapshot, plan = run.spark, run.snapshot, run.plan
    target_schema, target_columns, stored = run.target_schema, run.target_columns, run.stored
    update, acting, src, late_update, on_driver = run.update, run.acting, run.src, run.late_update, run.on_driver
    keep_ids, hidden = run.keep_ids, run.hidden
    S = quote_identifier(run.source_alias)
    if on_driver is not None and not plan.marking:  # copy-on-write: the rows the merge did not change
        kept = files_dataframe(spark, snapshot, without_rows(snapshot, run.touched, run.driver_marks))
        run.parts.append(kept.select(*[
            stored_value(quote_identifier(c), stored.get(c.lower()), target_schema[c].dataType).alias(c)
            for c in target_columns]))
    if acting is None:  # (matched on the driver) no join: each source row updates one target row
        updated, deleted = src, None
    else:
        updated = acting.filter(F.col(ACTION_COLUMN) == "update")
        deleted = acting.filter(F.col(ACTION_COLUMN) == "delete")
    if acting is not None and late_update:  # the source rows of the updated pairs, for the values they set
        pairs = updated.alias("__deltalog_pair")
        # the driver's pairs are at hand and narrow: broadcast them, not the source's rows
        pairs, rows = (F.broadcast(pairs), src) if on_driver else \
            (pairs, F.broadcast(src) if run.small_source else src)
        updated = rows.join(pairs, F.col(f"__deltalog_pair.{SOURCE_ID}") == F.col(f"{S}.{SOURCE_ID}"))
    run.updated, run.deleted = updated, deleted
    run.old_cols = [F.col(OLD + str(i)).alias(c) for i, c in enumerate(target_columns)] if plan.feed else []
    # the new version keeps the row's ID (row tracking); its commit version is this commit's
    row_id = f"__deltalog_pair.{ROW_ID_COLUMN}" if late_update else ROW_ID_COLUMN
    if atomic_types(target_schema) and not plan.feed:  # SQL text: one JVM call; column objects cost 3 each
        exprs = [(f"CAST(({update[c]}) AS {target_schema[c].dataType.simpleString()})" if c in late_update else
                  quote_identifier((NEW if update and c in update else OLD) + str(i)))
                 + f" AS {quote_identifier(c)}" for i, c in enumerate(target_columns)]
        if keep_ids:
            exprs += [f"{'.'.join(map(quote_identifier, row_id.split('.')))} AS {quote_identifier(hidden[0])}",
                      f"CAST(NULL AS BIGINT) AS {quote_identifier(hidden[1])}"]
        run.parts.append(updated.selectExpr(*exprs))
    else:  # (the change feed selects out_cols again; a nested type's simpleString() is no SQL)
        out_cols = [(assigned(updated, update[c], target_schema[c].dataType) if c in late_update else
                     F.col((NEW if update and c in update else OLD) + str(i))).alias(c)
                    for i, c in enumerate(target_columns)]
        if keep_ids:
            out_cols += [F.col(row_id).alias(hidden[0]), F.lit(None).cast("long").alias(hidden[1])]
        if plan.feed and any(varies_between_runs(update[c]) for c in late_update):
            # the data files and the feed's postimages are written by two jobs: the new values once
            names = list(target_columns) + (hidden if keep_ids else [])
            updated = computed_once(updated.select(
                *[F.col(OLD + str(i)) for i in range(len(target_columns))],
                *[c.alias(f"__deltalog_new_value{k}") for k, c in enumerate(out_cols)]))
            out_cols = [F.col(f"__deltalog_new_value{k}").alias(n) for k, n in enumerate(names)]
            run.updated = updated
        run.out_cols = out_cols
        run.parts.append(updated.select(*out_cols))


def _rewritten_files(run: MergeRun) -> None:
    """Every row of the touched files, with its action applied (copy-on-write; merge-on-read with a
    by-source clause keeps only the changed rows)."""
    spark, snapshot, plan, file_keys = run.spark, run.snapshot, run.plan, run.file_keys
    target_schema, target_columns, stored = run.target_schema, run.target_columns, run.stored
    update, by_source_update, acting, touched = plan.update, plan.by_source_update, run.acting, run.touched
    file_key = file_keys.column
    # row tracking: every row rewritten keeps its row ID, and copied rows their commit version
    run.keep_ids = keep_ids = row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, touched)
    if keep_ids:
        run.hidden = hidden = [f["name"] for f in row_tracking.materialized_fields(snapshot.configuration)]
        old = rows_with_row_ids(spark, snapshot, touched, like=file_keys)
    else:
        old = file_keys.dataframe(touched)
    changes = acting.select(file_key, ROW_INDEX_COLUMN, ACTION_COLUMN,
                            *[c for c in acting.columns if c.startswith((NEW, BY_SOURCE_NEW))])
    broadcast_changes = run.small_source and not plan.by_source  # by-source changes may be many rows
    with_actions = old.join(F.broadcast(changes) if broadcast_changes else changes,
                            [file_key, ROW_INDEX_COLUMN], "inner" if plan.marking else "left")
    kept = with_actions.filter(F.col(ACTION_COLUMN).isNull()
                               | ~F.col(ACTION_COLUMN).isin("delete", "by_source_delete"))
    out_cols, old_cols = [], []
    for i, c in enumerate(target_columns):
        current = stored_value(quote_identifier(c), stored.get(c.lower()), target_schema[c].dataType)
        old_cols.append(current.alias(c))
        value = current
        if by_source_update and c in by_source_update:
            value = F.when(F.col(ACTION_COLUMN) == "by_source_update", F.col(BY_SOURCE_NEW + str(i))).otherwise(value)
        if update and c in update:
            value = F.when(F.col(ACTION_COLUMN) == "update", F.col(NEW + str(i))).otherwise(value)
        out_cols.append(value.alias(c))
    if keep_ids:
        rewritten = F.col(ACTION_COLUMN).isin("update", "by_source_update")
        out_cols += [F.col(quote_identifier(hidden[0])).alias(hidden[0]),
                     F.when(rewritten, F.lit(None).cast("long"))
                     .otherwise(F.col(quote_identifier(hidden[1]))).alias(hidden[1])]
    run.parts.append(kept.select(*out_cols))
    run.old_cols, run.out_cols = old_cols, out_cols
    run.updated = with_actions.filter(F.col(ACTION_COLUMN).isin("update", "by_source_update"))
    run.deleted = with_actions.filter(F.col(ACTION_COLUMN).isin("delete", "by_source_delete"))


def _inserts(run: MergeRun) -> None:
    """The source rows no target row matched, where the insert's condition holds."""
    plan, src, target_schema = run.plan, run.src, run.target_schema
    if run.matched_rows is not None:
        seen = run.matched_rows.select(SOURCE_ID)
        unmatched = src.join(F.broadcast(seen) if run.small_source else seen, SOURCE_ID,
                             "left_anti").alias(run.source_alias)
    else:
        unmatched = src
    if plan.insert_condition:
        unmatched = unmatched.filter(F.coalesce(F.expr(plan.insert_condition), F.lit(False)))
    # A source alias stays resolvable in the insert expressions.
    inserts = unmatched.select(*[assigned(unmatched, plan.insert.get(c, "null"), target_schema[c].dataType).alias(c)
                                 for c in run.target_columns],
                               *[F.lit(None).cast("long").alias(h) for h in run.hidden])
    # identity columns the insert leaves out (or fills with null) are numbered past the mark
    left_out = [c for c in run.target_columns if plan.insert.get(c, "null").strip().lower() == "null"]
    if run.small_source and identity.declares_identity(run.txn.metadata.schema_json):
        inserts = inserts.coalesce(1)  # few rows: numbered in one task, so densely
    run.inserts, run.identity = number_identity_columns(inserts, run.txn.metadata.schema_json, run.name, left_out)
    if run.writes_feed_files and (
            run.identity is not None or any(varies_between_runs(v) for v in plan.insert.values())):
        # the data files and the feed's insert rows are written by two jobs: their values computed once
        run.inserts = computed_once(run.inserts)
    run.parts.append(run.inserts)


def computed_once(df: Any) -> Any:
    """`df` computed now, by one job, and kept: the jobs that read it after all see the same values
    (a lazy checkpoint would lose the rows an Observation on `df` counts)."""
    return df.localCheckpoint(eager=True)


def without_rows(snapshot: Any, touched: pa.Table, marks: list[tuple[Any, Any]]) -> pa.Table:
    """`touched` (rows of `snapshot.files`) with each file's `marks` (from `match_on_driver`, in the same
    order) added to its deletion vector, inline: read through it, the files give the rows not marked.
    Nothing is written; the descriptors exist only for this read."""
    from pyroaring import BitMap64

    descriptors = []
    for (add, rows), stored in zip(marks, touched.column("deletion_vector").to_pylist()):
        old = deletion_vectors.read_deletion_vector(snapshot.store, stored) if stored else BitMap64()
        descriptors.append(deletion_vectors.inline_descriptor(old | BitMap64(np.asarray(rows, dtype=np.uint64))))
    at = touched.schema.get_field_index("deletion_vector")
    return touched.set_column(at, touched.schema.field(at), pa.array(descriptors, touched.schema.field(at).type))
