"""OPTIMIZE: bin-packing compaction of small files, or clustering (ZORDER BY / Hilbert) of the files
of the selected partitions. One commit whose adds and removes all carry dataChange=false. Files with
many rows deleted by deletion vectors are rewritten without them; REORG ... APPLY (PURGE) (`purge`)
rewrites every file with deleted rows.

Clustered files carry tags (`ZCUBE_ZORDER_BY`, `ZCUBE_ZORDER_CURVE`, `ZCUBE_ID`), as Databricks names
them, so a re-run knows which files are already clustered on the same columns: with nothing new it
commits nothing; with new files small next to the clustered ones (and few clustered sets so far) only
the new files are clustered, into a set of their own; otherwise the partition is clustered anew.
"""
from __future__ import annotations

import json
import math
import uuid
from dataclasses import replace
from functools import reduce
from typing import Any, Callable

import pyarrow as pa
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, SparkSession

from ..actions import now_ms
from ..clustering import CLUSTERING_CURVE, CLUSTERING_PROVIDER, clustering_columns
from .. import row_tracking
from ..errors import InvalidTableError
from ..expressions import ALWAYS, as_expr, bind_to, prune_snapshot, resolve_column
from ..paths import absolute_file_path
from ..stats import indexed_columns
from ..table import DeltaTable, as_table
from ..transaction import reruns_after_conflict, row_level
from . import zorder
from .dml.rows import rows_with_row_ids
from .reader import snapshot_dataframe
from .writer import dictionary_free_columns, target_file_size, write_files

TAG_ZORDER_BY = "ZCUBE_ZORDER_BY"
TAG_CURVE = "ZCUBE_ZORDER_CURVE"
TAG_CUBE_ID = "ZCUBE_ID"
# Cluster only the new files (as a set of their own) while they are at most this share of the bytes
# already clustered and the partition holds fewer than MAX_CUBES sets; else re-cluster the partition.
INCREMENTAL_RATIO = 0.5
MAX_CUBES = 8
# Up to this many touched partitions are laid out one by one (no file straddles two partitions);
# beyond, one range partitioning over (partition columns, curve key) serves them all.
MAX_SEPARATE_PARTITIONS = 64
# A file whose deletion vector deletes more than this share of its rows is rewritten by OPTIMIZE
# whatever its size (Delta's spark.databricks.delta.optimize.maxDeletedRowsRatio).
MAX_DELETED_ROWS_RATIO = 0.05
_STATS_TYPES = ("byte", "short", "integer", "long", "float", "double", "string", "date", "timestamp",
                "timestamp_ntz")


def _partition_key(values: Any) -> tuple:
    return tuple(sorted((k, v) for k, v in (values or [])))


def _subset(snapshot: Any, files: pa.Table) -> Any:
    """The snapshot restricted to some of its files (for reading just those with Spark)."""
    return snapshot.restricted_to(files)


def normalize_zorder_by(zorder_by: Any) -> list[str]:
    """A list of column names from a list or a comma-separated string."""
    if zorder_by is None:
        return []
    if isinstance(zorder_by, str):
        items = [c.strip() for c in zorder_by.split(",")]
    elif isinstance(zorder_by, (list, tuple)):
        items = [str(c).strip() for c in zorder_by]
    else:
        raise InvalidTableError(
            f"zorder_by must be a column name, a comma-separated string or a list of column names, "
            f"not {type(zorder_by).__name__} {zorder_by!r}")
    return [c.strip("`") for c in items if c]


def validate_zorder_columns(snapshot: Any, zorder_by: Any) -> list[str]:
    """The clustering columns as the schema spells them. Each must exist, not be a partition column
    and have min/max statistics (a leaf that the table's stats settings index, of a type with min/max)."""
    table = snapshot.table_uri
    columns = normalize_zorder_by(zorder_by)
    schema = snapshot.schema_json
    partitions = {c.lower() for c in snapshot.partition_columns}
    indexed = {tuple(p.lower() for p in path) for path, _ in
               indexed_columns(schema, snapshot.partition_columns, snapshot.configuration)}
    data_columns = [f["name"] for f in schema.get("fields", []) if f["name"].lower() not in partitions]
    out: list[str] = []
    for name in columns:
        resolved = resolve_column(schema, name)
        if resolved is None:
            raise InvalidTableError(
                f"{table}: ZORDER BY column '{name}' does not exist in the table. Allowed: its non-partition "
                f"columns with statistics: {', '.join(data_columns) or '(none)'}.")
        path, delta_type = resolved
        if len(path) != 1:
            raise InvalidTableError(
                f"{table}: ZORDER BY column '{name}' is nested; cluster on top-level columns "
                f"({', '.join(data_columns)}).")
        if path[0].lower() in partitions:
            raise InvalidTableError(
                f"{table}: ZORDER BY column '{name}' is a partition column ({', '.join(snapshot.partition_columns)}); "
                f"partition columns already separate files. Cluster on non-partition columns: "
                f"{', '.join(data_columns) or '(none)'}.")
        base = "decimal" if isinstance(delta_type, str) and delta_type.startswith("decimal") else delta_type
        if base not in _STATS_TYPES:
            raise InvalidTableError(
                f"{table}: ZORDER BY column '{name}' has type {json.dumps(delta_type)}, which has no min/max "
                f"statistics, so clustering on it cannot skip files. Allowed types: numbers, decimal, "
                f"string, date, timestamp.")
        if tuple(p.lower() for p in path) not in indexed:
            raise InvalidTableError(
                f"{table}: ZORDER BY column '{name}' has no statistics: the table collects them only for the "
                f"first delta.dataSkippingNumIndexedCols columns (or delta.dataSkippingStatsColumns). Move the "
                f"column earlier, or set delta.dataSkippingStatsColumns to include it.")
        if path[0] in out:
            raise InvalidTableError(f"{table}: ZORDER BY lists column '{path[0]}' twice.")
        out.append(path[0])
    return out


def _select_files(snapshot: Any, where: Any) -> tuple[pa.Table, Any]:
    """Files of the partitions `where` selects (a predicate on partition columns only)."""
    expr = as_expr(where)
    if expr is ALWAYS:
        if where is not None and str(where).strip() and str(where).strip().lower() != "true":
            raise InvalidTableError(
                f"{snapshot.table_uri}: OPTIMIZE WHERE {where!r} is not a predicate this engine can apply to "
                f"partitions. Use comparisons (=, <, <=, >, >=, IN, IS NULL) of partition columns "
                f"({', '.join(snapshot.partition_columns) or 'the table has none'}) with literals, joined "
                f"by AND/OR.")
        return snapshot.files, None
    partitions = {c.lower() for c in snapshot.partition_columns}
    bad = sorted(c for c in expr.columns() if c.lower() not in partitions)
    if bad:
        raise InvalidTableError(
            f"{snapshot.table_uri}: OPTIMIZE WHERE may only use partition columns "
            f"({', '.join(snapshot.partition_columns) or 'the table has none'}); {', '.join(bad)} "
            f"{'is not one' if len(bad) == 1 else 'are not'}.")
    return snapshot.files.filter(prune_snapshot(snapshot, expr)), expr


def _size_metrics(sizes: list[int], prefix: str = "") -> dict[str, Any]:
    if not sizes:
        return {}
    s = sorted(sizes)

    def pct(p: float) -> int:
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]
    return {f"{prefix}minFileSize": s[0], f"{prefix}p25FileSize": pct(0.25), f"{prefix}p50FileSize": pct(0.5),
            f"{prefix}p75FileSize": pct(0.75), f"{prefix}maxFileSize": s[-1]}


def _num_records(files: pa.Table) -> int | None:
    """Live rows in the files from their stats, less the rows their DVs delete (None when a file has
    no row count: then Spark counts)."""
    total = 0
    for text in files.column("stats").to_pylist():
        if not text:
            return None
        n = json.loads(text).get("numRecords")
        if n is None:
            return None
        total += int(n)
    return total - sum(_deleted_rows(files))


def _deleted_rows(files: pa.Table) -> list[int]:
    """Per file, the rows its deletion vector deletes (0 without one)."""
    return [int(dv["cardinality"]) if dv else 0 for dv in files.column("deletion_vector").to_pylist()]


def over_deleted(files: pa.Table, max_ratio: float) -> list[bool]:
    """Per file, whether its DV deletes more than `max_ratio` of its rows (a file without a row count
    counts as over when its DV deletes any)."""
    out = []
    for deleted, text in zip(_deleted_rows(files), files.column("stats").to_pylist()):
        n = json.loads(text).get("numRecords") if text else None
        out.append(deleted > 0 and (not n or deleted > max_ratio * int(n)))
    return out


def _bins(files: pa.Table, min_file_size: int, max_file_size: int,
          max_deleted_ratio: float = MAX_DELETED_ROWS_RATIO) -> list[list[int]]:
    """Row indexes of `files` grouped per partition into bins up to max_file_size of the small files
    and of the files with more than `max_deleted_ratio` of their rows deleted; a bin of one file is
    dropped (rewriting it alone gains nothing) unless that file has such deleted rows to purge."""
    sizes = files.column("size").to_pylist()
    pvs = files.column("partition_values").to_pylist()
    purge = over_deleted(files, max_deleted_ratio)
    by_partition: dict[tuple, list[int]] = {}
    for i, (size, pv) in enumerate(zip(sizes, pvs)):
        if size < min_file_size or purge[i]:
            by_partition.setdefault(_partition_key(pv), []).append(i)
    out: list[list[int]] = []
    for rows in by_partition.values():
        rows.sort(key=lambda i: sizes[i])
        current: list[int] = []
        current_size = 0
        for i in rows:
            if current and current_size + sizes[i] > max_file_size:
                out.append(current)
                current, current_size = [], 0
            current.append(i)
            current_size += sizes[i]
        if current:
            out.append(current)
    return [b for b in out if len(b) > 1 or purge[b[0]]]


def _cluster_plan(files: pa.Table, columns: list[str], curve: str, max_file_size: int,
                  incremental_ratio: float = INCREMENTAL_RATIO,
                  max_deleted_ratio: float = MAX_DELETED_ROWS_RATIO) -> list[tuple[list[int], int]]:
    """Per touched partition: (rows of `files` to rewrite, number of output files). A partition is
    touched when it holds files not clustered on these columns with this curve, or clustered files
    with more than `max_deleted_ratio` of their rows deleted."""
    want = json.dumps(columns)
    tags = files.column("tags").to_pylist() if "tags" in files.column_names else [None] * files.num_rows
    sizes = files.column("size").to_pylist()
    pvs = files.column("partition_values").to_pylist()
    purge = over_deleted(files, max_deleted_ratio)
    groups: dict[tuple, dict[str, Any]] = {}
    for i, (t, size, pv) in enumerate(zip(tags, sizes, pvs)):
        t = dict(t or [])
        g = groups.setdefault(_partition_key(pv), {"new": [], "old": [], "cubes": set(), "new_bytes": 0,
                                                   "old_bytes": 0})
        if t.get(TAG_ZORDER_BY) == want and t.get(TAG_CURVE, "zorder") == curve and not purge[i]:
            g["old"].append(i)
            g["old_bytes"] += size
            g["cubes"].add(t.get(TAG_CUBE_ID))
        else:
            g["new"].append(i)
            g["new_bytes"] += size
    plan = []
    for g in groups.values():
        if not g["new"]:
            continue
        incremental = (g["old"] and g["new_bytes"] <= incremental_ratio * g["old_bytes"]
                       and len(g["cubes"]) < MAX_CUBES)
        chosen = sorted(g["new"] if incremental else g["new"] + g["old"])
        plan.append((chosen, max(1, math.ceil(sum(sizes[i] for i in chosen) / max_file_size))))
    return plan


@reruns_after_conflict(row_level)
def optimize(spark: SparkSession, table: DeltaTable | str, zorder_by: Any = None, where: Any = None,
             curve: str = "zorder", min_file_size: int | None = None, max_file_size: int | None = None,
             target_files: int | None = None, num_ranges: int = zorder.DEFAULT_NUM_RANGES,
             incremental_ratio: float = INCREMENTAL_RATIO, max_deleted_rows_ratio: float = MAX_DELETED_ROWS_RATIO,
             purge: bool = False, select: Callable[[Any], pa.Table] | None = None,
             auto: bool = False) -> int | None:
    """OPTIMIZE the table: compaction without `zorder_by`, clustering with it. `select` (auto-compaction)
    picks the candidate files from the snapshot the transaction reads, for compaction only; `auto` marks
    the commit as auto-compaction's (operation parameter `auto`, as Delta's). Files whose deletion
    vectors delete more than `max_deleted_rows_ratio` of their rows are rewritten without those rows.
    `purge` (REORG TABLE ... APPLY (PURGE)) rewrites every file with deleted rows and nothing else.
    Returns the committed version, or None when there was nothing to do (no commit)."""
    table = as_table(table)
    if purge and zorder_by:
        raise InvalidTableError(f"{table.uri}: purging deletion vectors rewrites the files that have them as "
                                f"they are; it does not cluster (run OPTIMIZE ZORDER BY separately).")
    if curve not in zorder.CURVES:
        raise InvalidTableError(f"{table.uri}: unknown clustering curve {curve!r}; allowed: "
                                f"{', '.join(zorder.CURVES)}.")
    txn = table.transaction()
    txn.may_carry_marks = not purge  # a purge that loses runs again, so that it leaves no deleted row behind
    snapshot = txn.snapshot
    if snapshot is None:
        raise InvalidTableError(f"{table.uri}: OPTIMIZE needs an existing Delta table; none is here.")
    name = snapshot.table_uri
    liquid = clustering_columns(snapshot)
    if liquid and zorder_by:
        raise InvalidTableError(f"{name}: the table is liquid clustered by {liquid}; OPTIMIZE clusters on those "
                                f"columns: run it without ZORDER BY (change them with the model's "
                                f"liquid_clustered_by, or clustering.set_clustering).")
    if liquid and not purge and select is None:
        zorder_by, curve = liquid, CLUSTERING_CURVE
    columns = validate_zorder_columns(snapshot, zorder_by)
    max_size = target_file_size(snapshot, max_file_size)
    if max_size <= 0:
        raise InvalidTableError(f"{name}: max_file_size must be positive, got {max_size}.")
    min_size = max_size if min_file_size is None else int(min_file_size)
    if purge:  # no file is small enough to join a bin for its size alone; any deleted row counts
        min_size, max_deleted_rows_ratio = 0, 0.0
    candidates, expr = (select(snapshot), None) if select is not None else _select_files(snapshot, where)
    if candidates.num_rows == 0:
        return None

    # On a table with row tracking, rows keep their row IDs and commit versions in its hidden columns.
    keep_ids = row_tracking.keeps_row_ids(snapshot.protocol, snapshot.configuration, candidates)
    write_schema = (row_tracking.with_materialized_fields(snapshot.schema_json, snapshot.configuration) if keep_ids
                    else snapshot.schema_json)

    def read(files: pa.Table) -> DataFrame:
        if keep_ids:
            return rows_with_row_ids(spark, snapshot, files)
        return snapshot_dataframe(spark, _subset(snapshot, files))

    if columns:
        plan = _cluster_plan(candidates, columns, curve, max_size, incremental_ratio, max_deleted_rows_ratio)
        if not plan:
            return None
        touched = len(plan)
        rows = sorted(i for chosen, _ in plan for i in chosen)
        rewrite = candidates.take(pa.array(rows, pa.int64()))
        if target_files is not None or len(plan) > MAX_SEPARATE_PARTITIONS:
            num_files = int(target_files) if target_files is not None else sum(n for _, n in plan)
            df = read(rewrite)
            out_df, model = zorder.cluster(df, columns, max(1, num_files), curve, snapshot.partition_columns,
                                           num_ranges, total_rows=_num_records(rewrite))
        else:
            parts = [(read(candidates.take(pa.array(chosen, pa.int64()))), n) for chosen, n in plan]
            out_df, model = zorder.cluster_parts(parts, columns, curve, snapshot.partition_columns, num_ranges,
                                                 total_rows=_num_records(rewrite))
        plain_columns = model.mostly_distinct()
        cube = str(uuid.uuid4())
        tags = {TAG_ZORDER_BY: json.dumps(columns), TAG_CURVE: curve, TAG_CUBE_ID: cube}
    else:
        bins = _bins(candidates, min_size, max_size, max_deleted_rows_ratio)
        if not bins:
            return None
        rows = sorted(i for b in bins for i in b)
        rewrite = candidates.take(pa.array(rows, pa.int64()))
        touched = len({_partition_key(pv) for pv in rewrite.column("partition_values").to_pylist()})
        # One Spark partition per bin (union keeps them apart), so each bin becomes one file.
        frames: list[DataFrame] = [read(candidates.take(pa.array(b, pa.int64()))).coalesce(1) for b in bins]
        out_df = reduce(DataFrame.union, frames)
        tags = None
        plain_columns = []

    if expr is not None:
        txn.read_predicate(bind_to(expr, snapshot))
    txn.read_files(rewrite)
    # Parquet-mr builds a dictionary for every column until it overflows; for mostly distinct values
    # (sampled clustering columns, and fixed-width columns whose dictionary did not pay off in the
    # files rewritten) that is pure cost: a third of the write time on 10M unique longs and strings.
    plain_columns = set(plain_columns) | set(dictionary_free_columns(
        [absolute_file_path(snapshot.table_uri, p) for p in rewrite.column("path").to_pylist()], txn.store.options))
    parquet_options = {f"parquet.enable.dictionary#{c}": "false" for c in sorted(plain_columns)
                       if "." not in c and "#" not in c}
    adds = write_files(out_df, name, snapshot.partition_columns, write_schema, snapshot.configuration,
                       parquet_options=parquet_options, store=txn.store)
    if keep_ids:
        adds = [replace(a, stats=row_tracking.without_hidden_stats(a.stats, snapshot.configuration)) for a in adds]
        txn.rows_keep_ids = True
    adds = [replace(a, data_change=False, tags=dict(tags) if tags else a.tags,
                    clustering_provider=CLUSTERING_PROVIDER if liquid and columns else None) for a in adds]
    ts = now_ms()
    removes = [a.remove(ts, data_change=False) for a in _subset(snapshot, rewrite).add_files()]
    txn.add_actions(removes)
    txn.add_actions(adds)
    removed_sizes = rewrite.column("size").to_pylist()
    added_sizes = [a.size for a in adds]
    metrics: dict[str, Any] = {
        "numRemovedFiles": len(removes), "numAddedFiles": len(adds),
        "numRemovedBytes": sum(removed_sizes), "numAddedBytes": sum(added_sizes),
        "partitionsOptimized": touched, "totalConsideredFiles": candidates.num_rows,
        "totalFilesSkipped": candidates.num_rows - rewrite.num_rows, "numBatches": 1,
        **_size_metrics(added_sizes),
    }
    parameters: dict[str, Any] = {
        "predicate": json.dumps([expr.to_sql()] if expr is not None else []),
        "zOrderBy": json.dumps(columns),
    }
    if columns and curve != "zorder":
        parameters["curve"] = curve
    if auto:
        parameters["auto"] = "true"
    metrics["numDeletionVectorsRemoved"] = sum(1 for n in _deleted_rows(rewrite) if n)
    operation = "OPTIMIZE"
    if purge:
        operation = "REORG"
        parameters = {"predicate": parameters["predicate"], "applyPurge": "true"}
    return txn.commit_or_discard(adds, operation=operation, parameters=parameters, metrics=metrics)
