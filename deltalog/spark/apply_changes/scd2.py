"""SCD type 2: one row per version of each key, `__START_AT` the sequence of the change that opened it,
`__END_AT` that of the change that closed it (NULL: the current version).

A batch rebuilds the history of the keys it touches from every change known for them: the versions in
the table (each an upsert at its start; an end no version starts at is a delete), the deletes in the state
(a delete of a key with no version yet, kept so that a late upsert before it gets its end), and the
batch's own changes. Sorted by sequence (a delete before an upsert of the same sequence), an upsert opens
a new version when its tracked columns differ from the version before it (or after a delete); otherwise
it updates that version in place. Only the rows that differ from the table's are changed: one MERGE
against the version read deletes the old ones and inserts the new.

A late change landing inside a version that was updated in place (untracked columns) splits it at the
version's start: the in-place updates before it are not kept apart.
"""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, Window, functions as F  # noqa: E402

from ...sql_text import quote_identifier  # noqa: E402
from .events import OP, SEQ  # noqa: E402
from .spec import END_AT, START_AT  # noqa: E402

ACTION = "__deltalog_changes_action"  # 'd': a version to delete, 'i': one to insert
PRIORITY = "__deltalog_changes_priority"  # which copy of a change known twice is kept: the batch's


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
    state = applier.state_rows(touched)
    if state is not None:
        known.append(state.select(*[q(k) for k in keys], SEQ).withColumn(OP, F.lit("d"))
                     .withColumn(PRIORITY, F.lit(0)))
    try:
        changes = known[0]
        for more in known[1:]:
            changes = changes.unionByName(more, allowMissingColumns=True)
        new = versions(changes, applier).persist(StorageLevel.MEMORY_AND_DISK)
        applier.commit_state(batch.filter(F.col(OP) == "d").select(*[q(k) for k in keys], SEQ)
                             .withColumn("__deltalog_changes_deleted", F.lit(True)), merge_on_keys=False)
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
        if old is not None:
            old.unpersist()
        if "new" in locals():
            new.unpersist()


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


def versions(changes: DataFrame, applier: Any) -> DataFrame:
    """The versions every key's changes make (columns: output, __START_AT, __END_AT)."""
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
    changes = changes.withColumn("__group", F.sum(opens.cast("int")).over(running))
    latest = F.struct(F.col(SEQ), rank)
    groups = changes.groupBy(*by_key, "__group").agg(
        F.min_by(F.col(OP), latest).alias("__first"), F.min(F.col(SEQ)).alias(START_AT),
        *[F.max_by(F.col(q(c)), latest).alias(c) for c in values])
    next_start = F.lead(F.col(q(START_AT))).over(Window.partitionBy(*by_key).orderBy("__group"))
    return groups.withColumn(END_AT, next_start).filter(F.col("__first") == "u") \
        .select(*[q(c) for c in applier.output], q(START_AT), q(END_AT))
