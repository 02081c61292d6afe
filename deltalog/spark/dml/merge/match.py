"""MERGE, phase 2: the matched pairs, each with the action its clauses give it (at most one source row per
target row), and the files they are in. On the driver where `on` is key equality and the source small
(`match_on_driver`: pyarrow reads the candidates' keys), else by a Spark join of the candidate files'
rows with the source; then the target rows no source row matched, for a by-source clause.
Reads phase 1's fields; sets `src`, `file_keys`, `touched`, the counts, `late_update`, `on_driver`,
`driver_marks`, `each_source_row_once`, `keep_ids`, `hidden`, `matched_rows`, `acting`, `hit_rows`."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from .... import row_tracking, sql  # noqa: E402
from ....schema import quote_identifier  # noqa: E402
from ...reader import ROW_INDEX_COLUMN, files_dataframe, has_deletion_vectors, widened_columns  # noqa: E402
from ..files import add_files_of, record_count, take_rows  # noqa: E402
from ..rows import (ACTION_COLUMN, FileKeys, ROW_ID_COLUMN, actions_per_file,  # noqa: E402
                    with_default_row_ids)
from .plan import (BY_SOURCE_NEW, NEW, OLD, SOURCE_ID, assigned, duplicate_source_error,  # noqa: E402
                   matched_action, resolves, source_only, stored_value)
from .run import MergeRun  # noqa: E402


def match_rows(run: MergeRun) -> None:
    spark, snapshot, plan = run.spark, run.snapshot, run.plan
    candidates, keys, source = run.candidates, run.keys, run.source
    target_schema, target_columns, stored = run.target_schema, run.target_columns, run.stored
    update, by_source_update, feed, carry = plan.update, plan.by_source_update, plan.feed, plan.carry
    S, T = quote_identifier(run.source_alias), quote_identifier(run.target_alias)
    # Only the columns the condition and clauses use are read from the target (Parquet pruning), and a
    # small source is broadcast, so the target's rows are not shuffled. Every matched pair is kept
    # (action null when no clause applies): their source ids rule out inserts.
    touched = candidates.slice(0, 0)
    src = run.src = source.alias(run.source_alias)
    file_keys = run.file_keys = FileKeys(spark, snapshot, snapshot.files if plan.by_source else candidates)
    file_key = file_keys.column
    # Merge-on-read sets the update's values from the source alone (SET * and the like) after the
    # match, on the source rows of updated pairs: the matching join then carries row positions, not
    # new rows, and broadcasts only the source columns `on` and the conditions use.
    late_update = source_only(src, update) if carry and update else set()
    # Copy-on-write matches on the driver too when the updated rows are the source's own (SET * and
    # the like): the touched files are then copied with the matched rows left out as inline deletion
    # vectors (no join of every row), and the updated rows come from the source, as merge-on-read's.
    copy_from_driver = (not plan.marking and not plan.by_source and update is not None
                        and source_only(src, update) == set(target_columns)
                        and not row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, candidates))
    # Clause conditions the source alone decides (change capture's `s.op = 'd'`, every column qualified by
    # the source's alias) are evaluated with the source's keys; one that reads the target needs Spark's join. A key column the update leaves out
    # keeps its value, which the driver's match (equality, one type both sides) makes the source key's.
    conditions = [c for c in (plan.delete_condition, plan.update_condition) if c]
    same_keys = {t: f"{S}.{quote_identifier(s)}" for s, t in keys if update is not None and t not in update}
    on_driver = None
    if (candidates.num_rows and (carry or copy_from_driver) and not feed and run.small_source
            and run.num_source <= _DRIVER_MATCH_SOURCE_ROWS
            and (copy_from_driver or late_update | set(same_keys) == set(target_columns))
            and all(sql.qualified_only_by(c, run.source_alias) for c in conditions)
            and (not conditions or resolves(src, *conditions))):
        on_driver = match_on_driver(spark, snapshot, candidates, src, plan.on, keys, target_schema,
                                    matched_action(plan))
        if on_driver is not None:
            update = {**update, **same_keys}
            late_update = set(target_columns)
    run.update = update
    keep_ids, hidden = False, []
    if on_driver is not None:
        matched, touched, run.driver_marks, run.each_source_row_once = on_driver
        keep_ids = ROW_ID_COLUMN in matched.column_names
        if not (run.each_source_row_once and not keep_ids):  # else the source rows are the new rows
            run.matched_rows = spark.createDataFrame(matched)
        if keep_ids:
            hidden = [f["name"] for f in row_tracking.materialized_fields(snapshot.configuration)]
        actions = matched.column(ACTION_COLUMN)
        run.n_updated = pc.sum(pc.equal(actions, "update")).as_py() or 0
        run.n_deleted = pc.sum(pc.equal(actions, "delete")).as_py() or 0
        run.phases.done("match (on the driver)")
    elif candidates.num_rows and (plan.by_row or plan.insert is not None):
        # Rows deleted by DVs are filtered out after the join, on the few rows it keeps (a file's
        # key and row index are then at hand anyway), rather than on every row scanned.
        late = file_keys.deleted_rows(candidates) if plan.by_row and has_deletion_vectors(candidates) else None
        # row tracking: the updated rows' new versions keep their row IDs (merge-on-read), read from
        # the hidden column where OPTIMIZE materialized them, else baseRowId + the row's position
        keep_ids = carry and plan.by_row and row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration,
                                                                        candidates)
        target_keys = file_keys
        if keep_ids:
            fields = row_tracking.materialized_fields(snapshot.configuration)
            hidden = [f["name"] for f in fields]
            target_keys = FileKeys(spark, snapshot.with_extra_columns(fields[:1]), candidates)
        target = (target_keys.dataframe(candidates, with_deleted=late is not None) if plan.by_row else
                  files_dataframe(spark, snapshot, candidates)).alias(run.target_alias)
        joined = target.join(F.broadcast(src) if run.small_source else src, F.expr(plan.on), "inner")
        if late is not None:
            joined = joined.filter(~late)
        if plan.by_row:
            action = matched_action(plan)
            new_values = [assigned(joined, update[c], target_schema[c].dataType).alias(NEW + str(i))
                          for i, c in enumerate(target_columns)
                          if update and c in update and c not in late_update]
            key_cols = [F.col(f"{S}.{quote_identifier(s)}").alias(f"__deltalog_key{i}")
                        for i, (s, _) in enumerate(keys)]
            new_values += [F.lit(None).cast(target_schema[c].dataType).alias(BY_SOURCE_NEW + str(i))
                           for i, c in enumerate(target_columns) if by_source_update and c in by_source_update]
            if carry:
                new_values += [stored_value(f"{T}.{quote_identifier(c)}", stored.get(c.lower()),
                                            target_schema[c].dataType).alias(OLD + str(i))
                               for i, c in enumerate(target_columns) if feed or not (update and c in update)]
            if keep_ids:
                new_values.append(F.col(f"{T}.{quote_identifier(hidden[0])}").alias(ROW_ID_COLUMN))
            matched_rows = joined.select(F.col(f"{T}.{file_key}").alias(file_key),
                                         F.col(f"{T}.{ROW_INDEX_COLUMN}").alias(ROW_INDEX_COLUMN),
                                         action.alias(ACTION_COLUMN), *new_values, *key_cols,
                                         F.col(f"{S}.{SOURCE_ID}").alias(SOURCE_ID))
            if keep_ids:
                matched_rows = with_default_row_ids(spark, snapshot, candidates, file_keys, matched_rows)
        else:
            matched_rows = joined.select(F.col(f"{S}.{SOURCE_ID}").alias(SOURCE_ID))
        run.matched_rows = matched_rows.persist(StorageLevel.MEMORY_AND_DISK)
    run.late_update, run.on_driver, run.keep_ids, run.hidden = late_update, on_driver, keep_ids, hidden
    acting = None
    if plan.by_row and run.matched_rows is not None:
        acting = run.matched_rows.filter(F.col(ACTION_COLUMN).isNotNull())
    if plan.by_source and snapshot.files.num_rows:
        acting = _with_unmatched_target_rows(run, acting)
        candidates = run.candidates = snapshot.files  # the files touched are looked up among all of them
    run.acting = acting
    if on_driver is not None:
        run.touched = touched  # the driver's match gave the rows and files already
        return
    if acting is not None and plan.marking:
        # merge-on-read needs the changed rows' positions on the driver anyway (for the DVs)
        run.hit_rows = acting.select(file_key, ROW_INDEX_COLUMN, ACTION_COLUMN).toArrow()
        run.phases.done("match")
        per_file = actions_per_file(run.hit_rows, file_key)
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
    if acting is not None:
        dup = [r for r in per_file if r["max_n"] > 1]
        if dup:
            sample = (acting.filter(F.col(file_key) == dup[0][file_key])
                      .groupBy(file_key, ROW_INDEX_COLUMN).agg(F.count(F.lit(1)).alias("n"),
                                                                  *[F.first(f"__deltalog_key{i}").alias(s)
                                                                    for i, (s, _) in enumerate(keys)])
                      .filter("n > 1").limit(1).collect())
            raise duplicate_source_error(run.name, keys, sample[0] if sample else None,
                                         sample[0]["n"] if sample else ">1")
        row_of = file_keys.rows_of(candidates)
        rows = []
        for r in per_file:
            rows.append(row_of(r[file_key]))
            run.n_updated += int(r["u"])
            run.n_deleted += int(r["d"])
            run.n_by_source_updated += int(r["bu"])
            run.n_by_source_deleted += int(r["bd"])
        touched = take_rows(candidates, rows)
    run.touched = touched


def _with_unmatched_target_rows(run: MergeRun, acting: Any) -> Any:
    """`acting` and the target rows (in any file) no source row matched, with the action the by-source
    clause gives them."""
    plan, snapshot, file_keys = run.plan, run.snapshot, run.file_keys
    target_schema, target_columns = run.target_schema, run.target_columns
    update, by_source_update = plan.update, plan.by_source_update
    file_key = file_keys.column
    everything = file_keys.dataframe(snapshot.files)
    if run.matched_rows is not None:
        seen_rows = run.matched_rows.select(file_key, ROW_INDEX_COLUMN).distinct()
        everything = everything.join(seen_rows, [file_key, ROW_INDEX_COLUMN], "left_anti")
    unmatched_target = everything.alias(run.target_alias)
    if plan.by_source_condition:
        unmatched_target = unmatched_target.filter(F.coalesce(F.expr(plan.by_source_condition), F.lit(False)))
    kind = "by_source_delete" if plan.by_source_delete else "by_source_update"
    cols = [F.col(file_key), F.col(ROW_INDEX_COLUMN), F.lit(kind).alias(ACTION_COLUMN)]
    cols += [F.lit(None).cast(target_schema[c].dataType).alias(NEW + str(i))
             for i, c in enumerate(target_columns) if update and c in update]
    cols += [assigned(unmatched_target, by_source_update[c], target_schema[c].dataType).alias(BY_SOURCE_NEW + str(i))
             for i, c in enumerate(target_columns) if by_source_update and c in by_source_update]
    cols += [F.lit(None).alias(f"__deltalog_key{i}") for i, _ in enumerate(run.keys)]
    cols += [F.lit(None).cast("long").alias(SOURCE_ID)]
    by_source_rows = unmatched_target.select(*cols)
    if acting is None:
        return by_source_rows
    # the same columns and types as the matched rows' actions
    by_source_rows = by_source_rows.select(*[F.col(c).cast(acting.schema[c].dataType).alias(c)
                                             for c in acting.columns])
    return acting.unionByName(by_source_rows)


# A merge-on-read MERGE whose source has at most this many rows (and fits a broadcast) may match on the
# driver (`match_on_driver`), reading at most this many target rows' keys there.
_DRIVER_MATCH_SOURCE_ROWS = 1_000_000


_DRIVER_MATCH_TARGET_ROWS = 20_000_000


# key types whose equality Arrow and Spark agree on (not floats: Spark's NaN = NaN and -0.0 = 0.0)
_DRIVER_MATCH_TYPES = ("byte", "short", "integer", "long", "string", "date", "timestamp", "timestamp_ntz",
                       "boolean", "binary")


def match_on_driver(spark: SparkSession, snapshot: Any, candidates: pa.Table, source: DataFrame, on: str,
                     keys: list[tuple[str, str]], target_schema: StructType, action: Any) -> Any:
    """A merge's matched pairs found on the driver (`row_match`: the candidate files' key columns read
    with pyarrow, joined with the source's keys in Arrow) where `on` is equality of key columns alone,
    of one type on both sides: (the matched rows, as an Arrow table with the columns the Spark match
    gives them: ACTION_COLUMN and SOURCE_ID, and ROW_ID_COLUMN under row tracking; the files touched;
    their (add, row indexes) to mark, of the pairs with an action; whether every source row matched
    exactly one target row and updates it). `action`: the action of a pair, over the (aliased) source's
    columns alone (`matched_action`). None where that does not apply, or the table
    is too big for it: then Spark matches. Spark's scan and join of the table cost seconds of fixed
    overhead that dwarf a small source (a 10M-row target's ids: 0.5 s here, 2-3 s by Spark)."""
    from ....row_match import FILE, ROW_INDEX, matching_rows

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
                                F.col(SOURCE_ID), action.alias(ACTION_COLUMN)).toArrow()
    pairs = matching_rows(snapshot, candidates, source_keys, columns)
    if pairs.num_rows > _DRIVER_MATCH_SOURCE_ROWS:
        return None  # many target rows per source row: Spark carries them
    # a pair no clause acts on changes nothing (as Spark's match, it only rules out an insert)
    acting = pairs.filter(pc.is_valid(pairs.column(ACTION_COLUMN)))
    per_row = acting.group_by([FILE, ROW_INDEX]).aggregate([([], "count_all")])
    repeated = per_row.filter(pc.greater(per_row.column("count_all"), 1))
    if repeated.num_rows:
        first = repeated.slice(0, 1).to_pylist()[0]
        sid = acting.filter(pc.and_(pc.equal(acting.column(FILE), first[FILE]),
                                    pc.equal(acting.column(ROW_INDEX), first[ROW_INDEX]))).column(SOURCE_ID)[0]
        row = source_keys.filter(pc.equal(source_keys.column(SOURCE_ID), sid)).slice(0, 1).to_pylist()[0]
        raise duplicate_source_error(snapshot.table_uri, keys, row, first["count_all"])
    grouped = acting.group_by(FILE).aggregate([(ROW_INDEX, "list")]).sort_by(FILE)
    touched = take_rows(candidates, grouped.column(FILE).to_pylist())  # in the same (sorted) order
    marks = [(add, np.asarray(rows.values, dtype=np.uint64))
             for add, rows in zip(add_files_of(touched), grouped.column(f"{ROW_INDEX}_list"))]
    matched = pa.table({ACTION_COLUMN: pairs.column(ACTION_COLUMN).cast(pa.string()),
                        SOURCE_ID: pairs.column(SOURCE_ID).cast(pa.int64())})
    if row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, candidates):
        matched = matched.append_column(ROW_ID_COLUMN, matched_row_ids(snapshot, candidates, pairs))
    updates = pc.sum(pc.equal(pairs.column(ACTION_COLUMN), "update")).as_py() or 0
    each_source_row_once = (pairs.num_rows == source_keys.num_rows == updates
                            and pc.count_distinct(pairs.column(SOURCE_ID)).as_py() == pairs.num_rows)
    return matched, touched, marks, each_source_row_once


def matched_row_ids(snapshot: Any, candidates: pa.Table, pairs: pa.Table) -> pa.Array:
    """The row ID of each matched target row (`pairs`: FILE, ROW_INDEX): its file's materialized value
    where the file has the hidden column (an OPTIMIZE wrote it), else baseRowId + its position."""
    from ....row_match import FILE, ROW_INDEX

    files = pairs.column(FILE).to_numpy()
    positions = pairs.column(ROW_INDEX).to_numpy().astype(np.int64)
    out = np.empty(len(positions), dtype=np.int64)
    for i in np.unique(files):
        row = candidates.slice(int(i), 1)
        add = replace(add_files_of(row)[0], base_row_id=row.column("base_row_id")[0].as_py())
        here = files == i
        out[here] = row_tracking.file_row_ids(snapshot.store, add, snapshot.configuration)[positions[here]]
    return pa.array(out, pa.int64())
