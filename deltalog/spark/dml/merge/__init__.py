"""MERGE INTO, in phases, one commit: the plan (plan.py: the clauses and every flag derived from them),
the candidate files from min/max stats of the source's join keys (candidates.py), the matched rows and
the files that really hold them (match.py), the new content -- copy-on-write rewrites the touched files,
merge-on-read writes only the changed rows' new versions (rewrite.py) -- and the write, the deletion
vectors, the change feed and the commit (commit.py). The phases hand each other a `MergeRun` (run.py)."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from ....errors import NotATableError  # noqa: E402
from ....schema import schema_string  # noqa: E402
from ....schema_evolution import checked_table_schema  # noqa: E402
from ....table import DeltaTable, as_table  # noqa: E402
from ....transaction import renumbered, reruns_after_conflict  # noqa: E402
from ....write_plan import mapped_if_dropping  # noqa: E402
from ...cluster import is_local_master  # noqa: E402
from ...connect import default_parallelism  # noqa: E402
from ..files import record_only  # noqa: E402
from .candidates import find_candidates  # noqa: E402
from .commit import NOTHING, write_and_commit  # noqa: E402
from .match import match_rows  # noqa: E402
from .plan import SOURCE_ID, MergeDuplicateSourceError, MergePlan, Phases  # noqa: E402
from .rewrite import new_content  # noqa: E402
from .run import MergeRun  # noqa: E402

__all__ = ["MergeDuplicateSourceError", "MergePlan", "merge"]


@reruns_after_conflict(renumbered)
def merge(spark: SparkSession, table: DeltaTable | str, source_df: DataFrame, on: str,
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
    """MERGE INTO the table USING source ON `on` (SQL with the two aliases), one commit.

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
    table = as_table(table)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to merge into; create it first.")
    txn = table.transaction(read_version=read_version)
    if read_version is not None:
        txn.read_whole_table()  # the source read the table: what it read is not known file by file
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    snapshot = txn.snapshot
    schema_json = snapshot.schema_json
    if table_schema is not None:
        schema_json = checked_table_schema(table.uri, snapshot.schema_json, table_schema, snapshot.partition_columns)
        if schema_json != snapshot.schema_json:
            conf = mapped_if_dropping(table.uri, dict(snapshot.configuration), snapshot.schema_json, schema_json)
            txn.update_metadata(replace(snapshot.metadata, schema_string=schema_string(schema_json),
                                        configuration=conf))
    target_schema = StructType.fromJson(schema_json)
    plan = MergePlan.of(txn, on, [f.name for f in target_schema.fields], source_df.columns, source_alias,
                        target_alias, update=when_matched_update, update_condition=when_matched_condition,
                        delete_condition=when_matched_delete_condition, insert=when_not_matched_insert,
                        insert_condition=when_not_matched_condition,
                        by_source_delete=when_not_matched_by_source_delete,
                        by_source_update=when_not_matched_by_source_update,
                        by_source_condition=when_not_matched_by_source_condition)
    # The source is read several times (bounds, join, inserts): compute it once, as delta-spark does.
    # Each row gets an id (stable: it is computed once, into the cache) so the inserts are the source
    # rows whose id the matching join did not see, without joining the target a second time.
    # On a local master its partitions are merged down to the cores first: caching many small
    # partitions costs more than computing them (a 100k-row source of 16 partitions: 0.53 s, of 2: 0.32 s).
    # (Not on a cluster, where the cores registered so far may be a few of those to come.)
    if is_local_master(spark):
        source_df = source_df.coalesce(default_parallelism(spark))
    source = source_df.withColumn(SOURCE_ID, F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
    run = MergeRun(spark=spark, txn=txn, plan=plan, name=table.uri, source_alias=source_alias,
                   target_alias=target_alias, schema_json=schema_json, target_schema=target_schema,
                   # columns the table gains in this commit are not in its files yet: old rows read them as null
                   stored={f["name"].lower(): f["type"] for f in snapshot.schema_json["fields"]},
                   source=source, phases=Phases(f"{operation} {table.uri}"), started=time.time(), method=method,
                   unique_keys=unique_keys, unique_keys_where=unique_keys_where)
    try:
        with txn.staging():
            find_candidates(run)
            if run.num_source == 0 and not plan.by_source:
                return record_only(txn, app_transactions, operation, extra_commit_info)
            match_rows(run)
            new_content(run)
            version = write_and_commit(run, app_transactions, operation, user_metadata, extra_commit_info)
            if version is NOTHING:
                return record_only(txn, app_transactions, operation, extra_commit_info)
            return version
    finally:
        run.phases.log()
        source.unpersist()
        if run.matched_rows is not None:
            run.matched_rows.unpersist()
