"""SCD type 1: one row per key, holding its latest change; a delete removes the row.

A batch's changes are reduced to one per key (the highest sequence; on a tie the upsert), then weighed
against the state: an upsert applies when its sequence is at least the key's last applied one (so a
replayed batch applies again, to the same rows), a delete when it is higher, or equal to a delete's (its
own tombstone). The winners go to the state (MERGE on the keys), then to the table: one MERGE that
deletes, updates and inserts. A truncate deletes every row (the MERGE deletes what the batch does not
match) and changes sequenced before it are ignored from then on.
"""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, Window, functions as F  # noqa: E402

from ...sql_text import quote_identifier  # noqa: E402
from .events import DELETED, OP, SEQ, after_truncate  # noqa: E402

HAD_DELETE = "__deltalog_changes_had_delete"  # the key was deleted earlier in the batch: no value carries over
STATE_SEQ, STATE_DELETED = "__state_sequence", "__state_deleted"


def apply_scd1(applier: Any, events: DataFrame, truncate_at: str | None) -> int | None:
    from ..operations import merge, write_dataframe

    q = quote_identifier
    keys, values = applier.keys, [c for c in applier.output if c not in applier.keys]
    latest = latest_per_key(after_truncate(events, truncate_at or applier.truncated_at()), keys, values,
                            applier.spec.ignore_null_updates)
    truncating = truncate_at is not None
    if not truncating:
        state = applier.state_rows(latest.select(*[q(k) for k in keys]))
        if state is not None:
            state = state.select(*[q(k) for k in keys], F.col(SEQ).alias(STATE_SEQ),
                                 F.col(DELETED).alias(STATE_DELETED))
            latest = latest.join(state, keys, "left").filter(
                F.col(STATE_SEQ).isNull()
                | ((F.col(OP) == "u") & (F.col(SEQ) >= F.col(STATE_SEQ)))
                | ((F.col(OP) == "d") & ((F.col(SEQ) > F.col(STATE_SEQ))
                                         | ((F.col(SEQ) == F.col(STATE_SEQ)) & F.col(STATE_DELETED)))))
    winners = latest.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        applier.commit_state(winners.select(*[q(k) for k in keys], SEQ, (F.col(OP) == "d").alias(DELETED)),
                             merge_on_keys=True, truncate_at=truncate_at)
        table = applier.table
        if applier.replace or not table.exists():
            rows = winners.filter(F.col(OP) == "u").select(*[q(c) for c in applier.output])
            options = {k: v for k, v in applier.write_options.items() if k in ("partition_by", "definition")}
            return write_dataframe(rows, table, mode="overwrite", schema_mode="overwrite" if table.exists() else None,
                                   configuration=applier.configuration(), txn_app_id=applier.app_id,
                                   txn_version=applier.batch_id, **options)
        update = {c: (f"CASE WHEN s.{q(HAD_DELETE)} THEN s.{q(c)} ELSE coalesce(s.{q(c)}, t.{q(c)}) END"
                      if applier.spec.ignore_null_updates else f"s.{q(c)}") for c in values}
        return merge(applier.spark, table, winners, applier.key_condition(),
                     when_matched_delete_condition=f"s.{q(OP)} = 'd'",
                     when_matched_update=update or {keys[0]: f"s.{q(keys[0])}"},
                     when_matched_condition=f"s.{q(OP)} = 'u'",
                     when_not_matched_insert={c: f"s.{q(c)}" for c in applier.output},
                     when_not_matched_condition=f"s.{q(OP)} = 'u'",
                     when_not_matched_by_source_delete=truncating,
                     table_schema=applier.write_options.get("table_schema"),
                     source_alias="s", target_alias="t", app_transactions=applier.txn,
                     extra_commit_info={"applyChanges": {"appId": applier.app_id, "batchId": applier.batch_id}})
    finally:
        winners.unpersist()


def latest_per_key(events: DataFrame, keys: list[str], values: list[str], ignore_null_updates: bool) -> DataFrame:
    """One change per key: the one with the highest sequence (an upsert before a delete of the same
    sequence). With `ignore_null_updates`, a column the latest upsert leaves NULL takes the latest
    non-NULL value given since the key's last delete in this batch (HAD_DELETE tells the merge that the
    row's stored values are gone)."""
    q = quote_identifier
    order = F.struct(F.col(SEQ), (F.col(OP) == "u").alias("upsert"))
    if not ignore_null_updates:
        row = F.max_by(F.struct(*[F.col(q(c)) for c in values], F.col(SEQ), F.col(OP)), order).alias("r")
        return events.groupBy(*[q(k) for k in keys]).agg(row).select(*[q(k) for k in keys], "r.*") \
            .withColumn(HAD_DELETE, F.lit(False))
    last_delete = F.max(F.when(F.col(OP) == "d", F.col(SEQ))).over(Window.partitionBy(*[q(k) for k in keys]))
    events = events.withColumn("__last_delete", last_delete)
    since_delete = F.col("__last_delete").isNull() | (F.col(SEQ) > F.col("__last_delete"))
    aggregates = [F.max_by(F.col(q(c)), F.when(F.col(q(c)).isNotNull() & since_delete & (F.col(OP) == "u"),
                                              F.col(SEQ))).alias(c) for c in values]
    aggregates += [F.max_by(F.struct(F.col(SEQ), F.col(OP)), order).alias("__last"),
                   F.max(F.col("__last_delete").isNotNull()).alias(HAD_DELETE)]
    return events.groupBy(*[q(k) for k in keys]).agg(*aggregates).select(
        *[q(k) for k in keys], *[q(c) for c in values], "__last.*", HAD_DELETE)

