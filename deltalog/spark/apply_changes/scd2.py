"""SCD type 2: one row per version of each key, `__START_AT` the sequence of the change that opened it,
`__END_AT` that of the change that closed it (NULL: the current version).

A batch rebuilds the history of the keys it touches from every change known for them: the versions in
the table (each an upsert at its start; an end no version starts at is a delete), the changes in the
state that the table's rows do not show (deletes, and upserts a version took in place), and the batch's
own changes. Sorted by sequence (a delete before an upsert of the same sequence), an upsert opens a new
version when its tracked columns differ from the version before it (or after a delete); otherwise the
version takes it in place. So a late change landing inside a version splits it exactly where it falls,
with the in-place changes on each side. Only the rows that differ from the table's are changed: one
MERGE against the version read deletes the old ones and inserts the new.
"""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, Window, functions as F  # noqa: E402

from ...sql_text import quote_identifier  # noqa: E402
from .events import DELETED, OP, SEQ  # noqa: E402
from .spec import END_AT, START_AT  # noqa: E402

ACTION = "__deltalog_changes_action"  # 'd': a version to delete, 'i': one to insert
PRIORITY = "__deltalog_changes_priority"  # which copy of a change known twice is kept: the batch's
GROUP = "__deltalog_changes_version"  # the version (of its key) a change belongs to
MEMBER = "__deltalog_changes_member"  # a change's place in its version: 1 opened it


def apply_scd2(applier: Any, events: DataFrame) -> int | None:
    from ..operations import merge, write_dataframe
    from ..reader import snapshot_dataframe

    q = quote_identifier
    keys = applier.keys
    table = applier.table
    columns = [*applier.output, START_AT, END_AT]
    batch = events.filter(F.col(OP) != "t").withColumn(PRIORITY, F.lit(1))
    touched = batch.select(*[q(k) for k in keys]).distinct()
    replacing = applier.replace or not table.exists()
    snapshot = None if replacing else table.snapshot()
    old = None
    known = [batch]
    if snapshot is not None:
        old = snapshot_dataframe(applier.spark, snapshot).join(F.broadcast(touched), keys, "left_semi")
        for c in applier.output:  # a column this batch adds to the table (on_schema_change): old versions lack it
            if c not in old.columns:
                old = old.withColumn(c, F.lit(None).cast(batch.schema[c].dataType))
        old = old.persist(StorageLevel.MEMORY_AND_DISK)
        known.append(changes_of_versions(old, applier.output, keys))
    values = [c for c in applier.output if c not in keys]
    state = applier.state_rows(touched)
    if state is not None:
        state = state.select(*[q(k) for k in keys], SEQ, DELETED,
                             *[F.col(q(c)) if c in state.columns else F.lit(None).cast(batch.schema[c].dataType)
                               .alias(c) for c in values])
        known.append(state.select(*[q(k) for k in keys], SEQ, F.when(F.col(DELETED), "d").otherwise("u").alias(OP),
                                  *[q(c) for c in values], F.lit(0).alias(PRIORITY)))
    grouped = None
    try:
        changes = known[0]
        for more in known[1:]:
            changes = changes.unionByName(more, allowMissingColumns=True)
        grouped = in_versions(changes, applier).persist(StorageLevel.MEMORY_AND_DISK)
        new = versions(grouped, applier).persist(StorageLevel.MEMORY_AND_DISK)
        # what the table's rows do not show: deletes, and upserts a version took in place (its start is
        # another change's) -- kept, so that a later batch rebuilding the key's history has every change
        unseen = grouped.filter((F.col(OP) == "d") | (F.col(MEMBER) > 1)).select(
            *[q(k) for k in keys], SEQ, (F.col(OP) == "d").alias(DELETED), *[q(c) for c in values])
        if state is not None:
            unseen = unseen.join(state, [*keys, SEQ, DELETED], "left_anti")
        applier.commit_state(unseen, merge_on_keys=False)
        if snapshot is None:
            options = {k: v for k, v in applier.write_options.items() if k in ("partition_by", "definition")}
            return write_dataframe(new.select(*[q(c) for c in columns]), table, mode="overwrite",
                                   schema_mode="overwrite" if table.exists() else None,
                                   configuration=applier.configuration(), txn_app_id=applier.app_id,
                                   txn_version=applier.batch_id, **options)
        stored = {f.name: f.dataType for f in old.schema.fields}
        new = new.select(*[F.col(q(c)).cast(stored[c]).alias(c) if c in stored else F.col(q(c)) for c in columns])
        old_rows = old.select(*[q(c) for c in columns])
        gone = old_rows.subtract(new).withColumn(ACTION, F.lit("d"))
        added = new.subtract(old_rows).withColumn(ACTION, F.lit("i"))
        on = (f"{applier.key_condition()} AND t.{q(START_AT)} <=> s.{q(START_AT)} AND s.{q(ACTION)} = 'd'")
        return merge(applier.spark, table, gone.unionByName(added), on,
                     when_matched_delete_condition="true",
                     when_not_matched_insert={c: f"s.{q(c)}" for c in columns},
                     when_not_matched_condition=f"s.{q(ACTION)} = 'i'",
                     table_schema=applier.write_options.get("table_schema"),
                     source_alias="s", target_alias="t", app_transactions=applier.txn,
                     read_version=snapshot.version,
                     extra_commit_info={"applyChanges": {"appId": applier.app_id, "batchId": applier.batch_id}})
    finally:
        for df in (old, grouped, locals().get("new")):
            if df is not None:
                df.unpersist()


def changes_of_versions(old: DataFrame, output: list[str], keys: list[str]) -> DataFrame:
    """The changes the table's versions record: each version an upsert at its start, and each end that
    no version of the key starts at, a delete."""
    q = quote_identifier
    upserts = old.select(*[q(c) for c in output], F.col(q(START_AT)).alias(SEQ), F.lit("u").alias(OP),
                         F.lit(0).alias(PRIORITY))
    starts = old.select(*[q(k) for k in keys], F.col(q(START_AT)).alias(SEQ))
    ends = old.filter(F.col(q(END_AT)).isNotNull()).select(*[q(k) for k in keys], F.col(q(END_AT)).alias(SEQ))
    deletes = ends.join(starts, [*keys, SEQ], "left_anti").withColumn(OP, F.lit("d")).withColumn(PRIORITY, F.lit(0))
    return upserts.unionByName(deletes, allowMissingColumns=True)


def in_versions(changes: DataFrame, applier: Any) -> DataFrame:
    """Every key's changes, each known once, in sequence order, each with the version it belongs to
    (GROUP: a delete is a group of its own) and its place in it (MEMBER: 1 opens the version)."""
    q = quote_identifier
    keys = applier.keys
    values = [c for c in applier.output if c not in keys]
    tracked = applier.spec.tracked_columns(applier.output, applier.table.uri)
    by_key = [q(k) for k in keys]
    # a change known twice (the table's copy and the batch's, a replay, a duplicate delivery): once
    changes = changes.groupBy(*by_key, SEQ, OP).agg(
        F.max_by(F.struct(*[F.col(q(c)) for c in values]) if values else F.lit(None), F.col(PRIORITY)).alias("__v")) \
        .select(*by_key, SEQ, OP, *([F.col(f"__v.{q(c)}").alias(c) for c in values] if values else []))
    rank = F.when(F.col(OP) == "d", 0).otherwise(1)
    ordered = Window.partitionBy(*by_key).orderBy(F.col(SEQ), rank)
    if applier.spec.ignore_null_updates and values:
        segment = Window.partitionBy(*by_key).orderBy(F.col(SEQ), rank).rowsBetween(Window.unboundedPreceding, 0)
        changes = changes.withColumn("__segment", F.sum(F.when(F.col(OP) == "d", 1).otherwise(0)).over(segment))
        filled = Window.partitionBy(*by_key, "__segment").orderBy(F.col(SEQ), rank) \
            .rowsBetween(Window.unboundedPreceding, 0)
        changes = changes.select(*by_key, SEQ, OP, *[F.last(F.col(q(c)), ignorenulls=True).over(filled).alias(c)
                                                     for c in values])
    tracked_values = F.struct(*[F.col(q(c)) for c in tracked]) if tracked else F.lit(0)
    changes = changes.withColumn("__tracked", tracked_values)
    opens = ((F.col(OP) == "d") | F.lag(F.col(OP)).over(ordered).isNull() | (F.lag(F.col(OP)).over(ordered) == "d")
             | ~F.col("__tracked").eqNullSafe(F.lag(F.col("__tracked")).over(ordered)))
    running = ordered.rowsBetween(Window.unboundedPreceding, 0)
    changes = changes.withColumn(GROUP, F.sum(opens.cast("int")).over(running))
    return changes.withColumn(MEMBER, F.row_number().over(Window.partitionBy(*by_key, GROUP).orderBy(F.col(SEQ), rank)))


def versions(changes: DataFrame, applier: Any) -> DataFrame:
    """The versions the changes (`in_versions`) make (columns: output, __START_AT, __END_AT)."""
    q = quote_identifier
    keys = applier.keys
    values = [c for c in applier.output if c not in keys]
    by_key = [q(k) for k in keys]
    rank = F.when(F.col(OP) == "d", 0).otherwise(1)
    latest = F.struct(F.col(SEQ), rank)
    groups = changes.groupBy(*by_key, GROUP).agg(
        F.min_by(F.col(OP), latest).alias("__first"), F.min(F.col(SEQ)).alias(START_AT),
        *[F.max_by(F.col(q(c)), latest).alias(c) for c in values])
    next_start = F.lead(F.col(q(START_AT))).over(Window.partitionBy(*by_key).orderBy(GROUP))
    return groups.withColumn(END_AT, next_start).filter(F.col("__first") == "u") \
        .select(*[q(c) for c in applier.output], q(START_AT), q(END_AT))
