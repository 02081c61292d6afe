"""Changes of a table's definition without its rows: `alter_table` (properties, CHECK constraints,
comments, columns), and the checks they make against the rows already there."""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import SparkSession, functions as F

from ...actions import Metadata
from ...errors import InvalidTableError, NotATableError
from ...schema import quote_identifier
from ...constraints import check_constraints
from ...definition import TableDefinition, added_checks, changed_properties, describe_change
from ...table import DeltaTable, as_table
from ..reader import files_dataframe



def metadata_differs(a: Metadata, b: Metadata) -> bool:
    return (a.schema_json != b.schema_json or list(a.partition_columns) != list(b.partition_columns)
            or a.configuration != b.configuration or a.description != b.description)


def check_existing_rows(spark: SparkSession, snapshot: Any, metadata: Metadata, txn: Any = None) -> None:
    """The table's current rows against the CHECK constraints and NOT NULL columns that `metadata`
    adds, as Delta checks ADD CONSTRAINT: the first violating row fails, naming the constraint."""
    added = added_checks(snapshot.metadata, metadata)
    if not added or not snapshot.files.num_rows:
        return
    if txn is not None:
        txn.read_whole_table()  # the check read every row: a concurrent write must conflict
    rows = files_dataframe(spark, snapshot, snapshot.files)
    checks = {c.name: c for c in check_constraints(metadata.configuration)}
    for name in added:
        if name.startswith("NOT NULL "):
            column = name[len("NOT NULL "):]
            bad, what = rows.filter(F.col(quote_identifier(column)).isNull()), f"NOT NULL on column {column}"
        else:
            c = checks[name]
            bad, what = rows.filter(~F.coalesce(F.expr(c.expression), F.lit(False))), c.describe()
        found = bad.limit(1).select(F.to_json(F.struct(*[F.col(quote_identifier(c)) for c in bad.columns]), {"ignoreNullFields": "false"})).collect()
        if found:
            raise InvalidTableError(
                f"{snapshot.table_uri}: cannot add {what}: the table's existing row {found[0][0]} violates it. "
                f"Nothing was committed; fix or delete such rows first (or rebuild the table).")


def alter_table(spark: SparkSession, table: DeltaTable | str, definition: TableDefinition,
                extra_commit_info: dict[str, Any] | None = None) -> int | None:
    """Apply a table definition to an existing table in one metadata commit (None when nothing
    changes). New CHECK constraints and NOT NULL columns are checked against the rows first."""
    table = as_table(table)
    if not table.exists():
        raise NotATableError(f"{table.uri}: no Delta table here to alter.")
    txn = table.transaction()
    snapshot = txn.snapshot
    metadata = definition.apply(snapshot.metadata, table.uri)
    changed = metadata_differs(metadata, snapshot.metadata)
    if changed:
        check_existing_rows(spark, snapshot, metadata, txn)
        txn.update_metadata(metadata)
    if definition.apply_clustering(txn) and not changed:
        from ...clustering import clustering_columns
        return txn.commit(operation="CLUSTER BY", parameters={
            "oldClusteringColumns": ",".join(clustering_columns(snapshot)),
            "newClusteringColumns": ",".join(definition.clustering or ())}, extra_commit_info=extra_commit_info)
    if not changed:
        return None
    return txn.commit(operation=describe_change(snapshot.metadata, metadata),
                      parameters={"properties": changed_properties(snapshot.metadata, metadata)},
                      extra_commit_info=extra_commit_info)


def undo_alter(table: DeltaTable | str, version: int, extra_commit_info: dict[str, Any] | None = None) -> int | None:
    """Undo `alter_table`'s commit `version` when the write it came before failed: the table's metadata
    and clustering columns as they were before it, in one commit (None: nothing to undo). Only while
    `version` is still the latest: a later writer's commit, which read the new definition, stays. The
    alteration changed no rows, so none are restored; a protocol it raised stays raised (Delta never
    lowers one), unused."""
    from ...clustering import clustering_columns, set_clustering
    from ...snapshot import Snapshot

    table = as_table(table)
    txn = table.transaction()
    current = txn.snapshot
    if current is None or current.version != version:
        return None
    before = Snapshot.load(table.uri, version=version - 1, store=txn.store)
    changed = metadata_differs(before.metadata, current.metadata)
    if changed:
        txn.update_metadata(before.metadata)
    reclustered = clustering_columns(before) != clustering_columns(current) \
        and set_clustering(txn, clustering_columns(before))
    if not changed and not reclustered:
        return None
    return txn.commit(operation=describe_change(current.metadata, before.metadata) if changed else "CLUSTER BY",
                      parameters={"properties": changed_properties(current.metadata, before.metadata)},
                      extra_commit_info={**(extra_commit_info or {}), "undoes": version})
