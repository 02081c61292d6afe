"""MERGE INTO: candidate files from min/max stats of the join keys, then a join on the files' rows to find
the files that really hold matched rows; only those are rewritten (copy-on-write) or have their rows
marked in deletion vectors, with only the new versions of the rows written (merge-on-read). One commit.

Just over 800 lines: `MergePlan` (the clauses and the flags derived from them), `merge` (its phases —
source, candidates, matching, the new rows, marks or rewrites, change feed, commit — share the cached
source and the matched rows), and the helpers only a merge uses (matching on the driver, unique keys)."""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, functions as F
from pyspark.sql.types import StructType

from ...actions import now_ms
from ...errors import InvalidTableError, NotATableError, SchemaMismatchError
from ... import sql
from ...schema import find_field, quote_identifier, schema_string
from ...skipping import ALWAYS, bind, files_matching, parse_sql_predicate
from ...schema_evolution import checked_table_schema
from ...table import DeltaTable
from ...transaction import rearranged_only, reruns_after_conflict
from ... import change_data, deletion_vectors, row_tracking
from ..change_data import change_rows, write_change_data
from ..cluster import is_local_master
from ..connect import default_parallelism
from ..reader import ROW_INDEX_COLUMN, files_dataframe, has_deletion_vectors, widened_columns
from ..writer import cast_by_name, target_file_size, write_files
from .files import (
    add_files_of, byte_count, record_count, record_only, removes_of, set_transactions, sum_records, take_rows,
)
from .rows import (
    ACTION_COLUMN, FileKeys, ROW_ID_COLUMN, actions_per_file, marked_rows_by_file, marks_enabled,
    rows_with_row_ids, with_default_row_ids,
)
from ...write_plan import mapped_if_dropping

log = logging.getLogger(__name__)


_NEW = "__deltalog_new_"


_SOURCE_ID = "__deltalog_source_id"


_OLD = "__deltalog_old_"  # a matched target row's value, carried from the matching join (merge-on-read)


_BY_SOURCE_NEW = "__deltalog_by_source_value_"  # not a prefix of _NEW's names, nor _NEW of its


_BROADCAST_SOURCE_BYTES = 64 << 20


def _assignments(spec: Any, target_columns: list[str], source_columns: list[str], source_alias: str,
                 target_alias: str, table: str, what: str) -> dict[str, str]:
    """target column -> SQL expression, for '*' or a dict (keys matched to target columns ignoring case)."""
    if spec == "*":
        src = {c.lower(): c for c in source_columns}
        out = {}
        for c in target_columns:
            s = src.get(c.lower())
            # UPDATE SET * keeps a column the source lacks; INSERT * fills it with null
            out[c] = (f"{quote_identifier(source_alias)}.{quote_identifier(s)}" if s is not None else
                      (f"{quote_identifier(target_alias)}.{quote_identifier(c)}" if what == "update" else "null"))
        return out
    if not isinstance(spec, dict):
        raise ValueError(f"{table}: {what} must be '*' or a dict of target column -> SQL expression.")
    by_lower = {c.lower(): c for c in target_columns}
    out = {}
    for k, v in spec.items():
        c = by_lower.get(str(k).strip("`").lower())
        if c is None:
            raise SchemaMismatchError(
                f"{table}: merge {what} sets column '{k}', which the table does not have; columns are "
                f"{', '.join(target_columns)}.")
        out[c] = str(v)
    return out


def _assigned(df: DataFrame, expr: str, wanted: Any) -> Column:
    """A MERGE clause's value `expr`, over `df`, as the target column's type `wanted`. Struct fields are
    assigned by name, as Delta's MERGE assigns them; Spark's cast would match them by position."""
    from pyspark.sql.types import ArrayType, MapType

    column = F.expr(expr)
    if not isinstance(wanted, (StructType, ArrayType, MapType)):
        return column.cast(wanted)
    return cast_by_name(column, df.select(column).schema.fields[0].dataType, wanted)


def _stored_value(column: str, stored: Any, wanted: Any) -> Column:
    """A target column's value as the table's (possibly evolved) type `wanted`: null for a column the
    files do not hold yet (`stored` None), upcast for one whose type this commit widens."""
    if stored is None:
        return F.lit(None).cast(wanted)
    return cast_by_name(F.col(column), stored, wanted)


@dataclass(frozen=True)
class MergePlan:
    """A MERGE's clauses, resolved against the table's columns, and how it runs, decided once from the
    request and the table: every flag the run consults is derived here."""

    on: str
    update: dict[str, str] | None             # when matched: {target column: SQL}
    update_condition: str | None
    delete_condition: str | None              # when matched (checked before the update)
    insert: dict[str, str] | None             # when not matched: {target column: SQL}
    insert_condition: str | None
    by_source_delete: bool                    # when not matched by source
    by_source_update: dict[str, str] | None
    by_source_condition: str | None
    marking: bool                             # merge-on-read: changed rows are marked in deletion vectors
    feed: bool                                # the table records its change data feed

    @classmethod
    def of(cls, txn: Any, on: str, target_columns: list[str], source_columns: list[str], source_alias: str,
           target_alias: str, *, update: Any, update_condition: str | None, delete_condition: str | None,
           insert: Any, insert_condition: str | None, by_source_delete: bool, by_source_update: Any,
           by_source_condition: str | None) -> "MergePlan":
        name = txn.table_uri
        if by_source_delete and by_source_update is not None:
            raise ValueError(f"{name}: a merge deletes or updates the rows the source does not match, not both.")

        def assigned(spec: Any, columns: list[str], kind: str) -> dict[str, str] | None:
            return None if spec is None else _assignments(spec, target_columns, columns, source_alias, target_alias,
                                                           name, kind)

        return cls(on=on, update=assigned(update, source_columns, "update"), update_condition=update_condition,
                   delete_condition=delete_condition, insert=assigned(insert, source_columns, "insert"),
                   insert_condition=insert_condition, by_source_delete=bool(by_source_delete),
                   by_source_update=assigned(by_source_update, [], "update"), by_source_condition=by_source_condition,
                   marking=marks_enabled(txn), feed=change_data.is_enabled(txn.metadata.configuration))

    @property
    def has_matched(self) -> bool:
        """A clause acts on matched rows."""
        return self.update is not None or self.delete_condition is not None

    @property
    def by_source(self) -> bool:
        """A clause acts on the target rows no source row matches (it reads every row of the table)."""
        return self.by_source_delete or self.by_source_update is not None

    @property
    def by_row(self) -> bool:
        """The target rows of matched pairs are needed by row (file, row index)."""
        return self.has_matched or self.by_source

    @property
    def carry(self) -> bool:
        """Merge-on-read writes only the new versions of changed rows, built (with the change feed's
        pre-images) from target values carried through the matching join, so the touched files are not
        scanned a second time. Rows no source row matches come from a scan of their own instead."""
        return self.marking and not self.by_source

    def operation_parameters(self) -> dict[str, str]:
        """The commit's operationParameters, as delta-spark writes them for a MERGE."""
        def clause(action: str, predicate: str | None) -> dict[str, str]:
            return {"actionType": action, **({"predicate": predicate} if predicate else {})}

        matched = ([{"actionType": "delete", "predicate": self.delete_condition}]
                   if self.delete_condition is not None else []) + \
            ([clause("update", self.update_condition)] if self.update is not None else [])
        not_matched = [clause("insert", self.insert_condition)] if self.insert is not None else []
        by_source = [clause("delete" if self.by_source_delete else "update", self.by_source_condition)] \
            if self.by_source else []
        return {"predicate": json.dumps([self.on]), "matchedPredicates": json.dumps(matched),
                "notMatchedPredicates": json.dumps(not_matched),
                "notMatchedBySourcePredicates": json.dumps(by_source)}


class MergeDuplicateSourceError(InvalidTableError):
    """Several source rows matched one target row (Delta's DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE)."""


@reruns_after_conflict(rearranged_only)
def merge(spark: SparkSession, table_uri: str, source_df: DataFrame, on: str,
          when_matched_update: Any = None, when_matched_condition: str | None = None,
          when_matched_delete_condition: str | None = None, when_not_matched_insert: Any = None,
          when_not_matched_condition: str | None = None, source_alias: str = "DBT_INTERNAL_SOURCE",
          target_alias: str = "DBT_INTERNAL_DEST", operation: str = "MERGE",
          user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
          method: str = "native", unique_keys: dict[str, str] | None = None,
          unique_keys_where: str | None = None, table_schema: dict[str, Any] | None = None,
          when_not_matched_by_source_delete: bool = False, when_not_matched_by_source_update: Any = None,
          when_not_matched_by_source_condition: str | None = None,
          app_transactions: dict[str, int] | None = None, read_version: int | None = None) -> int | None:
    """MERGE INTO the table USING source ON `on` (SQL with the two aliases), copy-on-write, one commit.

    unique_keys: {source column: name to report} of the key columns (dbt's unique_key): they must hold
    no NULL — a NULL key never matches, so an upsert would insert that row again on every run — and no
    key may appear twice in the source (rows where `unique_keys_where` holds, when given), matched or
    not, or one run would leave duplicates.
    table_schema: the table's schema after this merge (columns added or dropped), committed with the data.

    Matched target rows: deleted when `when_matched_delete_condition` holds (checked first), else updated
    with `when_matched_update` ('*' or {target column: SQL expression}) when `when_matched_condition`
    (default true) holds. Unmatched source rows: inserted with `when_not_matched_insert` when
    `when_not_matched_condition` holds. Target rows no source row matches: deleted
    (`when_not_matched_by_source_delete`) or updated with `when_not_matched_by_source_update` ({target
    column: SQL over the target's columns}) when `when_not_matched_by_source_condition` (default true)
    holds; such a clause reads every row of the table. Returns the version, or None when nothing changed
    (and no `app_transactions`, {appId: version}, are to be recorded: see `write_dataframe`).
    read_version: the version of this table the source was computed from (it reads its own target):
    the merge runs against that version, so that a commit landed since is a conflict rather than
    overwritten by rows computed before it (a lost update).
    """
    table = DeltaTable(table_uri)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to merge into; create it first.")
    txn = table.transaction(read_version=read_version)
    if read_version is not None:
        txn.read_whole_table()  # the source read the table: what it read is not known file by file
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    name = table.uri
    snapshot = txn.snapshot
    schema_json = snapshot.schema_json
    if table_schema is not None:
        schema_json = checked_table_schema(name, snapshot.schema_json, table_schema, snapshot.partition_columns)
        if schema_json != snapshot.schema_json:
            conf = mapped_if_dropping(name, dict(snapshot.configuration), snapshot.schema_json, schema_json)
            txn.update_metadata(replace(snapshot.metadata, schema_string=schema_string(schema_json),
                                        configuration=conf))
    target_schema = StructType.fromJson(schema_json)
    target_columns = [f.name for f in target_schema.fields]
    # Columns the table gains in this commit are not in its files yet: old rows read them as null.
    stored = {f["name"].lower(): f["type"] for f in snapshot.schema_json["fields"]}
    started = time.time()
    S, T = quote_identifier(source_alias), quote_identifier(target_alias)

    plan = MergePlan.of(txn, on, target_columns, source_df.columns, source_alias, target_alias,
                        update=when_matched_update, update_condition=when_matched_condition,
                        delete_condition=when_matched_delete_condition, insert=when_not_matched_insert,
                        insert_condition=when_not_matched_condition,
                        by_source_delete=when_not_matched_by_source_delete,
                        by_source_update=when_not_matched_by_source_update,
                        by_source_condition=when_not_matched_by_source_condition)
    update, insert, by_source_update = plan.update, plan.insert, plan.by_source_update
    by_source, by_row = plan.by_source, plan.by_row
    marking, carry, feed = plan.marking, plan.carry, plan.feed

    # The source is read several times (bounds, join, inserts): compute it once, as delta-spark does.
    # Each row gets an id (stable: it is computed once, into the cache) so the inserts are the source
    # rows whose id the matching join did not see, without joining the target a second time.
    # On a local master its partitions are merged down to the cores first: caching many small
    # partitions costs more than computing them (a 100k-row source of 16 partitions: 0.53 s, of 2: 0.32 s).
    # (Not on a cluster, where the cores registered so far may be a few of those to come.)
    if is_local_master(spark):
        source_df = source_df.coalesce(default_parallelism(spark))
    source = source_df.withColumn(_SOURCE_ID, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    matched_rows = None
    phases = _Phases(f"{operation} {name}")
    try:
        with txn.staging():
            # 1. Candidate files: min/max of the source's equi-join keys (in the job that counts and caches
            # the source), and target-only conjuncts.
            keys = [(s, t) for s, t in sql.equi_keys(on, source_alias, target_alias)
                    if find_field(schema_json, t) is not None and s.lower() in {c.lower() for c in source.columns}]
            aggs = [F.count(F.lit(1)).alias("n")]
            src_types = {f.name.lower(): f.dataType.typeName() for f in source.schema.fields}
            for i, (s, _) in enumerate(keys):
                c = F.col(quote_identifier(s))
                if src_types[s.lower()] == "timestamp":
                    # as epoch micros: Python would read a collected timestamp in its own time zone
                    aggs += [F.unix_micros(F.min(c)).alias(f"mn{i}"), F.unix_micros(F.max(c)).alias(f"mx{i}")]
                else:
                    aggs += [F.min(c).alias(f"mn{i}"), F.max(c).alias(f"mx{i}")]
            bounds = source.agg(*aggs).collect()[0]
            phases.done("source")
            num_source = bounds["n"]
            if num_source == 0 and not by_source:
                return record_only(txn, app_transactions, operation, extra_commit_info)
            small_source = _fits_broadcast(source)
            if unique_keys:
                _check_unique_keys(source, unique_keys, unique_keys_where, name)
            exprs = []
            for i, (s, t) in enumerate(keys):
                lo, hi = bounds[f"mn{i}"], bounds[f"mx{i}"]
                if src_types[s.lower()] == "timestamp" and lo is not None:
                    lo, hi = _utc_from_micros(lo), _utc_from_micros(hi)
                if lo is None:  # every source key is null: equality matches nothing
                    exprs.append("false")
                else:
                    exprs.append(f"{quote_identifier(t)} >= {_sql_literal(lo)} and "
                                 f"{quote_identifier(t)} <= {_sql_literal(hi)}")
            exprs += [f"({c})" for c in sql.only_alias_conjuncts(on, target_alias, source_alias)]
            prune_text = " and ".join(f"({e})" for e in exprs)
            prune_expr = parse_sql_predicate(prune_text) if prune_text else ALWAYS
            candidates = files_matching(snapshot, prune_expr) if prune_expr is not ALWAYS else snapshot.files
            txn.read_files(candidates)
            # what the merge read: the rows within the source's key bounds (at WriteSerializable a concurrent
            # file whose min/max stats lie outside them cannot hold a row this merge would have matched)
            txn.read_predicate(bind(prune_expr, schema_json, snapshot.partition_columns, snapshot.configuration))
            if by_source:
                txn.read_whole_table()  # any row of the table may be one the source does not match

            # 2. Matched rows with the action each gets (at most one source row per target row). Every
            # matched pair is kept (action null when no clause applies): their source ids rule out inserts.
            # Only the columns the condition and clauses use are read from the target (Parquet pruning), and
            # a small source is broadcast, so the target's rows are not shuffled.
            touched = candidates.slice(0, 0)
            n_updated = n_deleted = 0
            src = source.alias(source_alias)
            file_keys = FileKeys(spark, snapshot, snapshot.files if by_source else candidates)
            file_key = file_keys.column
            # Merge-on-read sets the update's values from the source alone (SET * and the like) after the
            # match, on the source rows of updated pairs: the matching join then carries row positions, not
            # new rows, and broadcasts only the source columns `on` and the conditions use.
            late_update = _source_only(src, update) if carry and update else set()
            # Copy-on-write matches on the driver too when the updated rows are the source's own (SET * and
            # the like): the touched files are then copied with the matched rows left out as inline deletion
            # vectors (no join of every row), and the updated rows come from the source, as merge-on-read's.
            copy_from_driver = (not marking and not by_source and update is not None
                                and _source_only(src, update) == set(target_columns)
                                and not row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration,
                                                                   candidates))
            on_driver = None
            if (candidates.num_rows and (carry or copy_from_driver) and not feed and small_source
                    and num_source <= _DRIVER_MATCH_SOURCE_ROWS
                    and (copy_from_driver or late_update == set(target_columns)) and not when_matched_condition
                    and not when_matched_delete_condition):
                on_driver = _match_on_driver(spark, snapshot, candidates, source, on, keys, target_schema)
                if on_driver is not None and copy_from_driver:
                    late_update = set(target_columns)
            # (an upsert whose every row updates one target row: its new rows are the source's own rows)
            each_source_row_once = False
            # row tracking: updated rows keep their row IDs, written into the hidden columns (driver match)
            keep_ids, hidden = False, []
            if on_driver is not None:
                matched, touched, driver_marks, each_source_row_once = on_driver
                keep_ids = ROW_ID_COLUMN in matched.column_names
                if not (each_source_row_once and not keep_ids):  # else the source rows are the new rows
                    matched_rows = spark.createDataFrame(matched)
                if keep_ids:
                    hidden = [f["name"] for f in row_tracking.materialized_fields(snapshot.configuration)]
                n_updated = sum(len(rows) for _, rows in driver_marks)
                phases.done("match (on the driver)")
            elif candidates.num_rows and (by_row or insert is not None):
                # Rows deleted by DVs are filtered out after the join, on the few rows it keeps (a file's
                # key and row index are then at hand anyway), rather than on every row scanned.
                late = file_keys.deleted_rows(candidates) if by_row and has_deletion_vectors(candidates) else None
                # row tracking: the updated rows' new versions keep their row IDs (merge-on-read), read from
                # the hidden column where OPTIMIZE materialized them, else baseRowId + the row's position
                keep_ids = carry and by_row and row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration,
                                                                           candidates)
                target_keys = file_keys
                if keep_ids:
                    fields = row_tracking.materialized_fields(snapshot.configuration)
                    hidden = [f["name"] for f in fields]
                    target_keys = FileKeys(spark, snapshot.with_extra_columns(fields[:1]), candidates)
                target = (target_keys.dataframe(candidates, with_deleted=late is not None) if by_row else
                          files_dataframe(spark, snapshot, candidates)).alias(target_alias)
                joined = target.join(F.broadcast(src) if small_source else src, F.expr(on), "inner")
                if late is not None:
                    joined = joined.filter(~late)
                if by_row:
                    delete_cond = F.coalesce(F.expr(when_matched_delete_condition), F.lit(False)) \
                        if when_matched_delete_condition else F.lit(False)
                    update_cond = (F.coalesce(F.expr(when_matched_condition), F.lit(False))
                                   if when_matched_condition else F.lit(True)) if update is not None else F.lit(False)
                    action = F.when(delete_cond, F.lit("delete")).when(update_cond, F.lit("update"))
                    new_values = [_assigned(joined, update[c], target_schema[c].dataType).alias(_NEW + str(i))
                                  for i, c in enumerate(target_columns)
                                  if update and c in update and c not in late_update]
                    key_cols = [F.col(f"{S}.{quote_identifier(s)}").alias(f"__deltalog_key{i}")
                                for i, (s, _) in enumerate(keys)]
                    new_values += [F.lit(None).cast(target_schema[c].dataType).alias(_BY_SOURCE_NEW + str(i))
                                   for i, c in enumerate(target_columns) if by_source_update and c in by_source_update]
                    if carry:
                        new_values += [_stored_value(f"{T}.{quote_identifier(c)}", stored.get(c.lower()),
                                                     target_schema[c].dataType).alias(_OLD + str(i))
                                       for i, c in enumerate(target_columns) if feed or not (update and c in update)]
                    if keep_ids:
                        new_values.append(F.col(f"{T}.{quote_identifier(hidden[0])}").alias(ROW_ID_COLUMN))
                    matched_rows = joined.select(F.col(f"{T}.{file_key}").alias(file_key),
                                                 F.col(f"{T}.{ROW_INDEX_COLUMN}").alias(ROW_INDEX_COLUMN),
                                                 action.alias(ACTION_COLUMN), *new_values, *key_cols,
                                                 F.col(f"{S}.{_SOURCE_ID}").alias(_SOURCE_ID))
                    if keep_ids:
                        matched_rows = with_default_row_ids(spark, snapshot, candidates, file_keys, matched_rows)
                else:
                    matched_rows = joined.select(F.col(f"{S}.{_SOURCE_ID}").alias(_SOURCE_ID))
                matched_rows = matched_rows.persist(StorageLevel.MEMORY_AND_DISK)
            n_by_source_updated = n_by_source_deleted = 0
            acting = None
            if by_row and matched_rows is not None:
                acting = matched_rows.filter(F.col(ACTION_COLUMN).isNotNull())
            if by_source and snapshot.files.num_rows:
                # 2b. Target rows no source row matched (in any file), with the action the clause gives them.
                everything = file_keys.dataframe(snapshot.files)
                if matched_rows is not None:
                    seen_rows = matched_rows.select(file_key, ROW_INDEX_COLUMN).distinct()
                    everything = everything.join(seen_rows, [file_key, ROW_INDEX_COLUMN], "left_anti")
                unmatched_target = everything.alias(target_alias)
                if when_not_matched_by_source_condition:
                    unmatched_target = unmatched_target.filter(
                        F.coalesce(F.expr(when_not_matched_by_source_condition), F.lit(False)))
                kind = "by_source_delete" if when_not_matched_by_source_delete else "by_source_update"
                cols = [F.col(file_key), F.col(ROW_INDEX_COLUMN), F.lit(kind).alias(ACTION_COLUMN)]
                cols += [F.lit(None).cast(target_schema[c].dataType).alias(_NEW + str(i))
                         for i, c in enumerate(target_columns) if update and c in update]
                cols += [_assigned(unmatched_target, by_source_update[c], target_schema[c].dataType).alias(_BY_SOURCE_NEW + str(i))
                         for i, c in enumerate(target_columns) if by_source_update and c in by_source_update]
                cols += [F.lit(None).alias(f"__deltalog_key{i}") for i, _ in enumerate(keys)]
                cols += [F.lit(None).cast("long").alias(_SOURCE_ID)]
                by_source_rows = unmatched_target.select(*cols)
                if acting is not None:  # the same columns and types as the matched rows' actions
                    by_source_rows = by_source_rows.select(*[F.col(c).cast(acting.schema[c].dataType).alias(c)
                                                             for c in acting.columns])
                    acting = acting.unionByName(by_source_rows)
                else:
                    acting = by_source_rows
                candidates = snapshot.files  # the files touched are looked up among all of them
            hit_rows = None
            if on_driver is not None:
                pass  # the driver's match gave the rows and files already
            elif acting is not None and marking:
                # merge-on-read needs the changed rows' positions on the driver anyway (for the DVs)
                hit_rows = acting.select(file_key, ROW_INDEX_COLUMN, ACTION_COLUMN).toArrow()
                phases.done("match")
                per_file = actions_per_file(hit_rows, file_key)
            elif acting is not None:
                per_file = (acting.groupBy(file_key, ROW_INDEX_COLUMN)
                            .agg(F.count(F.lit(1)).alias("n"), F.max(ACTION_COLUMN).alias("a"))
                            .groupBy(file_key)
                            .agg(F.max("n").alias("max_n"),
                                 F.sum(F.when(F.col("a") == "update", 1).otherwise(0)).alias("u"),
                                 F.sum(F.when(F.col("a") == "delete", 1).otherwise(0)).alias("d"),
                                 F.sum(F.when(F.col("a") == "by_source_update", 1).otherwise(0)).alias("bu"),
                                 F.sum(F.when(F.col("a") == "by_source_delete", 1).otherwise(0)).alias("bd"))
                            .collect())
            if acting is not None and on_driver is None:
                dup = [r for r in per_file if r["max_n"] > 1]
                if dup:
                    sample = (acting.filter(F.col(file_key) == dup[0][file_key])
                              .groupBy(file_key, ROW_INDEX_COLUMN).agg(F.count(F.lit(1)).alias("n"),
                                                                          *[F.first(f"__deltalog_key{i}").alias(s)
                                                                            for i, (s, _) in enumerate(keys)])
                              .filter("n > 1").limit(1).collect())
                    raise _duplicate_source_error(name, keys, sample[0] if sample else None,
                                                  sample[0]["n"] if sample else ">1")
                row_of = file_keys.rows_of(candidates)
                rows = []
                for r in per_file:
                    rows.append(row_of(r[file_key]))
                    n_updated += int(r["u"])
                    n_deleted += int(r["d"])
                    n_by_source_updated += int(r["bu"])
                    n_by_source_deleted += int(r["bd"])
                touched = take_rows(candidates, rows)

            # 3. New content: the touched files' rows (updated, deleted or copied) plus the inserts. The
            # changes are few next to the touched rows: broadcast them rather than shuffle every row.
            parts: list[DataFrame] = []
            # merge-on-read: the changed rows are marked in deletion vectors and only their new versions
            # are written; copy-on-write rewrites every row of the touched files
            marked = None
            if touched.num_rows and (carry or on_driver is not None):
                if on_driver is not None and not marking:  # copy-on-write: the rows the merge did not change
                    kept = files_dataframe(spark, snapshot, _without_rows(snapshot, touched, driver_marks))
                    parts.append(kept.select(*[
                        _stored_value(quote_identifier(c), stored.get(c.lower()), target_schema[c].dataType).alias(c)
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
                        (pairs, F.broadcast(src) if small_source else src)
                    updated = rows.join(pairs, F.col(f"__deltalog_pair.{_SOURCE_ID}") == F.col(f"{S}.{_SOURCE_ID}"))
                old_cols = [F.col(_OLD + str(i)).alias(c) for i, c in enumerate(target_columns)] if feed else []
                # the new version keeps the row's ID (row tracking); its commit version is this commit's
                row_id = f"__deltalog_pair.{ROW_ID_COLUMN}" if late_update else ROW_ID_COLUMN
                if _atomic_types(target_schema) and not feed:  # SQL text: one JVM call; column objects cost 3 each
                    exprs = [(f"CAST(({update[c]}) AS {target_schema[c].dataType.simpleString()})" if c in late_update else
                              quote_identifier((_NEW if update and c in update else _OLD) + str(i)))
                             + f" AS {quote_identifier(c)}" for i, c in enumerate(target_columns)]
                    if keep_ids:
                        exprs += [f"{'.'.join(map(quote_identifier, row_id.split('.')))} AS {quote_identifier(hidden[0])}",
                                  f"CAST(NULL AS BIGINT) AS {quote_identifier(hidden[1])}"]
                    parts.append(updated.selectExpr(*exprs))
                else:  # (the change feed selects out_cols again; a nested type's simpleString() is no SQL)
                    out_cols = [(_assigned(updated, update[c], target_schema[c].dataType) if c in late_update else
                                 F.col((_NEW if update and c in update else _OLD) + str(i))).alias(c)
                                for i, c in enumerate(target_columns)]
                    if keep_ids:
                        out_cols += [F.col(row_id).alias(hidden[0]), F.lit(None).cast("long").alias(hidden[1])]
                    parts.append(updated.select(*out_cols))
            elif touched.num_rows:
                # row tracking: every row rewritten keeps its row ID, and copied rows their commit version
                keep_ids = row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, touched)
                if keep_ids:
                    hidden = [f["name"] for f in row_tracking.materialized_fields(snapshot.configuration)]
                    old = rows_with_row_ids(spark, snapshot, touched, like=file_keys)
                else:
                    old = file_keys.dataframe(touched)
                changes = acting.select(file_key, ROW_INDEX_COLUMN, ACTION_COLUMN,
                                        *[c for c in acting.columns if c.startswith((_NEW, _BY_SOURCE_NEW))])
                broadcast_changes = small_source and not by_source  # by-source changes may be many rows
                with_actions = old.join(F.broadcast(changes) if broadcast_changes else changes,
                                        [file_key, ROW_INDEX_COLUMN], "inner" if marking else "left")
                j = with_actions.filter(F.col(ACTION_COLUMN).isNull() | ~F.col(ACTION_COLUMN).isin("delete", "by_source_delete"))
                out_cols, old_cols = [], []
                for i, c in enumerate(target_columns):
                    current = _stored_value(quote_identifier(c), stored.get(c.lower()), target_schema[c].dataType)
                    old_cols.append(current.alias(c))
                    value = current
                    if by_source_update and c in by_source_update:
                        value = F.when(F.col(ACTION_COLUMN) == "by_source_update", F.col(_BY_SOURCE_NEW + str(i))).otherwise(value)
                    if update and c in update:
                        value = F.when(F.col(ACTION_COLUMN) == "update", F.col(_NEW + str(i))).otherwise(value)
                    out_cols.append(value.alias(c))
                if keep_ids:
                    rewritten = F.col(ACTION_COLUMN).isin("update", "by_source_update")
                    out_cols += [F.col(quote_identifier(hidden[0])).alias(hidden[0]),
                                 F.when(rewritten, F.lit(None).cast("long"))
                                 .otherwise(F.col(quote_identifier(hidden[1]))).alias(hidden[1])]
                parts.append(j.select(*out_cols))
                updated = with_actions.filter(F.col(ACTION_COLUMN).isin("update", "by_source_update"))
                deleted = with_actions.filter(F.col(ACTION_COLUMN).isin("delete", "by_source_delete"))
            n_insert_df = None
            if insert is not None and not each_source_row_once:
                if matched_rows is not None:
                    seen = matched_rows.select(_SOURCE_ID)
                    unmatched = src.join(F.broadcast(seen) if small_source else seen, _SOURCE_ID,
                                         "left_anti").alias(source_alias)
                else:
                    unmatched = src
                if when_not_matched_condition:
                    unmatched = unmatched.filter(F.coalesce(F.expr(when_not_matched_condition), F.lit(False)))
                # A source alias stays resolvable in the insert expressions.
                n_insert_df = unmatched.select(*[_assigned(unmatched, insert.get(c, "null"), target_schema[c].dataType).alias(c)
                                                 for c in target_columns],
                                               *[F.lit(None).cast("long").alias(h) for h in hidden])
                parts.append(n_insert_df)

            if not touched.num_rows and n_insert_df is None and not txn.metadata_changed:
                return record_only(txn, app_transactions, operation, extra_commit_info)
            out = parts[0]
            for p in parts[1:]:
                out = out.unionByName(p)
            if carry:
                out = _in_few_files(out, n_updated + num_source, snapshot)
            materialize = bool(txn.protocol and txn.protocol.stores_partition_columns)
            # the metadata this commit writes (with any new column's physical name under column mapping)
            write_schema = txn.metadata.schema_json
            if keep_ids:
                write_schema = row_tracking.with_materialized_fields(write_schema, txn.metadata.configuration)
            adds = txn.stage(write_files(out, name, snapshot.partition_columns, write_schema,
                                         dict(txn.metadata.configuration), method=method,
                                         store_partition_columns=materialize))
            if keep_ids:
                adds = [replace(a, stats=row_tracking.without_hidden_stats(a.stats, txn.metadata.configuration))
                        for a in adds]
                txn.rows_keep_ids = True
            written = sum_records(adds)
            phases.done("write")
            if marking and touched.num_rows:
                rows_by_file = driver_marks if on_driver else marked_rows_by_file(file_keys, touched, hit_rows)
                marked = deletion_vectors.mark_rows(snapshot.store, rows_by_file, now_ms())
                txn.stage([marked.dv_file])
                touched_rows = n_updated + n_deleted + n_by_source_updated + n_by_source_deleted
            else:
                touched_rows = record_count(touched) if touched.num_rows else 0
            if touched_rows is None:
                touched_rows = files_dataframe(spark, snapshot, touched).count()
            copied = touched_rows - n_updated - n_deleted - n_by_source_updated - n_by_source_deleted
            inserted = written - copied - n_updated - n_by_source_updated
            if not touched.num_rows and inserted == 0 and not txn.metadata_changed:
                txn.discard_uncommitted(adds)  # nothing to commit but what was consumed
                return record_only(txn, app_transactions, operation, extra_commit_info)
            adds_committed = adds if marked is None else [*adds, *marked.adds]
            removes = removes_of(touched) if marked is None else marked.removes
            cdc = []
            if touched.num_rows and feed:
                # the rows this merge changed, for the change data feed (copied rows are not changes)
                changed = [change_rows(updated.select(*old_cols), schema_json, change_data.UPDATE_PREIMAGE),
                           change_rows(updated.select(*out_cols), schema_json, change_data.UPDATE_POSTIMAGE),
                           change_rows(deleted.select(*old_cols), schema_json, change_data.DELETE)]
                if n_insert_df is not None:
                    changed.append(change_rows(n_insert_df, schema_json, change_data.INSERT))
                cdc = txn.stage(write_change_data(changed, name, snapshot.partition_columns, txn.metadata.schema_json,
                                                  dict(txn.metadata.configuration), method=method))
            txn.add_actions([*removes, *adds_committed, *cdc, *set_transactions(app_transactions)])
            params = plan.operation_parameters()
            metrics = {
                "numSourceRows": num_source, "numTargetRowsInserted": inserted,
                "numTargetRowsUpdated": n_updated + n_by_source_updated,
                "numTargetRowsDeleted": n_deleted + n_by_source_deleted, "numTargetRowsMatchedUpdated": n_updated,
                "numTargetRowsMatchedDeleted": n_deleted,
                "numTargetRowsNotMatchedBySourceUpdated": n_by_source_updated,
                "numTargetRowsNotMatchedBySourceDeleted": n_by_source_deleted, "numTargetRowsCopied": copied,
                "numOutputRows": written, "numTargetFilesAdded": len(adds),
                "numTargetFilesRemoved": touched.num_rows if marked is None else marked.files_emptied,
                "numTargetBytesAdded": sum(a.size for a in adds),
                "numTargetBytesRemoved": byte_count(touched) if marked is None else 0,
                "numTargetFilesScanned": candidates.num_rows,
                "executionTimeMs": int((time.time() - started) * 1000),
            }
            if marked is not None:
                metrics["numTargetDeletionVectorsAdded"] = len(marked.adds)
            version = txn.commit(operation=operation, parameters=params, metrics=metrics, user_metadata=user_metadata,
                                 extra_commit_info=extra_commit_info)
            phases.done("commit")
            return version
    finally:
        phases.log()
        source.unpersist()
        if matched_rows is not None:
            matched_rows.unpersist()


class _Phases:
    """Seconds spent in each phase of an operation, logged at debug level (where a slow merge goes)."""

    def __init__(self, what: str):
        self.what, self.last, self.spent = what, time.time(), []

    def done(self, phase: str) -> None:
        now = time.time()
        self.spent.append((phase, now - self.last))
        self.last = now

    def log(self) -> None:
        if self.spent:
            log.debug("%s: %s", self.what, ", ".join(f"{p} {s:.2f} s" for p, s in self.spent))


def _in_few_files(df: DataFrame, rows: int, snapshot: Any) -> DataFrame:
    """`df` in as few partitions as `rows` of the table's average row size fill files of its target size:
    merge-on-read writes only the changed rows, which would otherwise become one small file per
    partition of the source."""
    records = record_count(snapshot.files)
    if not records:
        return df
    row_bytes = byte_count(snapshot.files) / records
    return df.coalesce(max(1, math.ceil(rows * row_bytes / target_file_size(snapshot))))


# A merge-on-read MERGE whose source has at most this many rows (and fits a broadcast) may match on the
# driver (`_match_on_driver`), reading at most this many target rows' keys there.
_DRIVER_MATCH_SOURCE_ROWS = 1_000_000


_DRIVER_MATCH_TARGET_ROWS = 20_000_000


# key types whose equality Arrow and Spark agree on (not floats: Spark's NaN = NaN and -0.0 = 0.0)
_DRIVER_MATCH_TYPES = ("byte", "short", "integer", "long", "string", "date", "timestamp", "timestamp_ntz",
                       "boolean", "binary")


def _match_on_driver(spark: SparkSession, snapshot: Any, candidates: pa.Table, source: DataFrame, on: str,
                     keys: list[tuple[str, str]], target_schema: StructType) -> Any:
    """A merge's matched pairs found on the driver (`row_match`: the candidate files' key columns read
    with pyarrow, joined with the source's keys in Arrow) where `on` is equality of key columns alone,
    of one type on both sides: (the matched rows, as an Arrow table with the columns the Spark match
    gives them: ACTION_COLUMN and _SOURCE_ID, and ROW_ID_COLUMN under row tracking; the files touched, their (add, row indexes) to mark, whether every source row matched exactly one
    target row). None where that does not apply, or the table
    is too big for it: then Spark matches. Spark's scan and join of the table cost seconds of fixed
    overhead that dwarf a small source (a 10M-row target's ids: 0.5 s here, 2-3 s by Spark)."""
    from ...row_match import FILE, ROW_INDEX, matching_rows

    if not keys or len(sql.conjuncts(on)) != len(keys):
        return None  # other conditions than key equality
    by_lower = {f.name.lower(): f for f in target_schema.fields}
    source_types = {f.name.lower(): f.dataType for f in source.schema.fields}
    partitions = {c.lower() for c in snapshot.partition_columns}
    columns = []
    for s, t in keys:
        field = by_lower.get(t.lower())
        if field is None or t.lower() in partitions or source_types.get(s.lower()) is None:
            return None
        stype, ttype = source_types[s.lower()], field.dataType
        if stype.simpleString() != ttype.simpleString() or \
                not (ttype.typeName() in _DRIVER_MATCH_TYPES or ttype.typeName() == "decimal"):
            return None  # Spark would coerce the types, or Arrow's equality differs from Spark's
        columns.append(field.name)
    records = record_count(candidates)
    if records is None or records > _DRIVER_MATCH_TARGET_ROWS or widened_columns(snapshot.schema_json) & set(columns):
        return None
    source_keys = source.select(*[F.col(quote_identifier(s)).alias(s) for s, _ in keys],
                                F.col(_SOURCE_ID)).toArrow()
    pairs = matching_rows(snapshot, candidates, source_keys, columns)
    if pairs.num_rows > _DRIVER_MATCH_SOURCE_ROWS:
        return None  # many target rows per source row: Spark carries them
    per_row = pairs.group_by([FILE, ROW_INDEX]).aggregate([([], "count_all")])
    repeated = per_row.filter(pc.greater(per_row.column("count_all"), 1))
    if repeated.num_rows:
        first = repeated.slice(0, 1).to_pylist()[0]
        sid = pairs.filter(pc.and_(pc.equal(pairs.column(FILE), first[FILE]),
                                   pc.equal(pairs.column(ROW_INDEX), first[ROW_INDEX]))).column(_SOURCE_ID)[0]
        row = source_keys.filter(pc.equal(source_keys.column(_SOURCE_ID), sid)).slice(0, 1).to_pylist()[0]
        raise _duplicate_source_error(snapshot.table_uri, keys, row, first["count_all"])
    grouped = pairs.group_by(FILE).aggregate([(ROW_INDEX, "list")]).sort_by(FILE)
    touched = take_rows(candidates, grouped.column(FILE).to_pylist())  # in the same (sorted) order
    marks = [(add, np.asarray(rows.values, dtype=np.uint64))
             for add, rows in zip(add_files_of(touched), grouped.column(f"{ROW_INDEX}_list"))]
    matched = pa.table({ACTION_COLUMN: pa.array(["update"] * pairs.num_rows, pa.string()),
                        _SOURCE_ID: pairs.column(_SOURCE_ID).cast(pa.int64())})
    if row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, candidates):
        matched = matched.append_column(ROW_ID_COLUMN, _matched_row_ids(snapshot, candidates, pairs))
    each_source_row_once = (pairs.num_rows == source_keys.num_rows
                            and pc.count_distinct(pairs.column(_SOURCE_ID)).as_py() == pairs.num_rows)
    return matched, touched, marks, each_source_row_once


def _without_rows(snapshot: Any, touched: pa.Table, marks: list[tuple[Any, Any]]) -> pa.Table:
    """`touched` (rows of `snapshot.files`) with each file's `marks` (from `_match_on_driver`, in the same
    order) added to its deletion vector, inline: read through it, the files give the rows not marked.
    Nothing is written; the descriptors exist only for this read."""
    from pyroaring import BitMap64

    descriptors = []
    for (add, rows), stored in zip(marks, touched.column("deletion_vector").to_pylist()):
        old = deletion_vectors.read_deletion_vector(snapshot.store, stored) if stored else BitMap64()
        descriptors.append(deletion_vectors.inline_descriptor(old | BitMap64(np.asarray(rows, dtype=np.uint64))))
    at = touched.schema.get_field_index("deletion_vector")
    return touched.set_column(at, touched.schema.field(at), pa.array(descriptors, touched.schema.field(at).type))


def _matched_row_ids(snapshot: Any, candidates: pa.Table, pairs: pa.Table) -> pa.Array:
    """The row ID of each matched target row (`pairs`: FILE, ROW_INDEX): its file's materialized value
    where the file has the hidden column (an OPTIMIZE wrote it), else baseRowId + its position."""
    from ...row_match import FILE, ROW_INDEX

    files = pairs.column(FILE).to_numpy()
    positions = pairs.column(ROW_INDEX).to_numpy().astype(np.int64)
    out = np.empty(len(positions), dtype=np.int64)
    for i in np.unique(files):
        row = candidates.slice(int(i), 1)
        add = replace(add_files_of(row)[0], base_row_id=row.column("base_row_id")[0].as_py())
        here = files == i
        out[here] = row_tracking.file_row_ids(snapshot.store, add, snapshot.configuration)[positions[here]]
    return pa.array(out, pa.int64())


def _duplicate_source_error(table: str, keys: list[tuple[str, str]], row: Any, times: Any) -> Exception:
    """The error of a merge in which several source rows matched one target row; `row` holds the source
    key columns of one of them (None if unknown)."""
    key_text = ", ".join(f"{s}={row[s]!r}" for s, _ in keys) if row is not None and keys else "?"
    return MergeDuplicateSourceError(
        f"{table}: MERGE failed: several source rows matched the same target row and tried to change it "
        f"(e.g. {key_text}; the row appears {times} times in the source). Make the merge key unique in the "
        f"source (deduplicate it, or add columns to unique_key). Nothing was committed.")


def _source_only(source: DataFrame, assignments: dict[str, str]) -> set[str]:
    """The columns of `assignments` whose SQL Spark resolves against the (aliased) source alone:
    analysis only, no job."""
    from pyspark.errors import AnalysisException

    def resolves(*exprs: str) -> bool:
        try:
            source.select(*[F.expr(e) for e in exprs])
            return True
        except AnalysisException:
            return False

    if resolves(*assignments.values()):  # SET *: one call
        return set(assignments)
    return {c for c, e in assignments.items() if resolves(e)}


def _atomic_types(schema: StructType) -> bool:
    """Whether every column's type is atomic, so that its `simpleString()` is SQL Spark parses back
    (a struct's would not quote its field names)."""
    from pyspark.sql.types import ArrayType, MapType, NullType, StructType as Struct, UserDefinedType
    return not any(isinstance(f.dataType, (ArrayType, MapType, NullType, Struct, UserDefinedType))
                   for f in schema.fields)


def _fits_broadcast(df: DataFrame) -> bool:
    """Whether a (cached, counted) DataFrame is small enough to broadcast, by Spark's size estimate."""
    try:
        # a Scala BigInt, which Py4J hands over as a Python int
        size = int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # no estimate: let Spark choose the join
        return False
    return size <= _BROADCAST_SOURCE_BYTES


def _utc_from_micros(micros: int) -> Any:
    import datetime as dt
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)


def _sql_literal(value: Any) -> str:
    """A Python value (from a Spark row) as a SQL literal the skipping parser understands."""
    import datetime as dt
    from decimal import Decimal
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return f"timestamp '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"date '{value.isoformat()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _check_unique_keys(source: DataFrame, keys: dict[str, str], where: str | None, table: str) -> None:
    """No NULL in the key columns, and no key twice among the source rows (where `where` holds)."""
    rows = source.filter(F.expr(where)) if where else source
    counts = rows.agg(*[F.sum(F.col(quote_identifier(c)).isNull().cast("long")).alias(f"n{i}")
                        for i, c in enumerate(keys)]).collect()[0]
    bad = {shown: counts[f"n{i}"] for i, shown in enumerate(keys.values()) if counts[f"n{i}"]}
    if bad:
        which = ", ".join(f"{c} ({n} rows)" for c, n in bad.items())
        raise InvalidTableError(
            f"{table}: MERGE refused: the source has NULL in its unique key column(s) {which}. A NULL key "
            f"never matches, so those rows would be inserted again on every run. Filter them out or "
            f"coalesce the key in the model. Nothing was committed.")
    cols = [F.col(quote_identifier(c)).alias(f"k{i}") for i, c in enumerate(keys)]
    dup = rows.groupBy(*cols).count().filter("count > 1").limit(1).collect()
    if dup:
        key_text = ", ".join(f"{shown}={dup[0][f'k{i}']!r}" for i, shown in enumerate(keys.values()))
        raise MergeDuplicateSourceError(
            f"{table}: MERGE refused: the unique key ({key_text}) appears {dup[0]['count']} times in the "
            f"source; one run would leave that many rows with one key. Deduplicate the model's rows, or add "
            f"columns to unique_key. Nothing was committed.")
