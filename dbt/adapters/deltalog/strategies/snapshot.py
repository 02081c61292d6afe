"""dbt snapshots on the merge engine: changed and deleted rows closed, new versions inserted, in one
commit with the columns the snapshot gains."""
from __future__ import annotations

from typing import Any, List, Optional

from deltalog.lazy_imports import load
from dbt.adapters.deltalog.declared_columns import filled_in_columns
from dbt.adapters.deltalog.model_config import config_value, quote_name
from dbt.adapters.deltalog.runtime.session import RUNTIME
from dbt.adapters.deltalog.schema_change import new_fields


def snapshot_merge(adapter: Any, target: Any, staging: Any, columns: Any, model: Any,
                   add_columns: Optional[List[Any]]) -> Optional[int]:
    """The staging view reads the snapshot's own table: the merge commits against the version it read,
    so a snapshot run landing in between is a named conflict, not a second set of rows computed from
    the same old state. The snapshot's definition is committed first, and undone if the merge fails."""
    from dbt.adapters.deltalog.strategies.incremental import definition_applied

    with definition_applied(adapter, target, model):
        return _merge(adapter, target, staging, columns, model, add_columns)


def _merge(adapter: Any, target: Any, staging: Any, columns: Any, model: Any,
           add_columns: Optional[List[Any]]) -> Optional[int]:
    load("spark")
    from pyspark.sql.types import StructType

    from deltalog.spark import operations

    q = quote_name
    spark = adapter.spark
    # The staging view resolves the target's session view when it is read: register it at the latest
    # version (our own alteration included) and commit against that version.
    views = RUNTIME.views(spark)
    views.ensure(adapter.warehouse_of(target), target.schema, target.identifier)
    read_version = views.table_version(adapter.warehouse_of(target), target.schema, target.identifier)
    source = spark.table(staging.render())
    scd_id = config_value(columns, "dbt_scd_id") or "dbt_scd_id"
    valid_to = config_value(columns, "dbt_valid_to") or "dbt_valid_to"
    current = config_value(config_value(model, "config") or {}, "dbt_valid_to_current")
    table = StructType.fromJson(adapter._snapshot(target).schema_json)
    added = new_fields(table, add_columns or [])
    table_schema = StructType(list(table.fields) + added).jsonValue() if added else None
    target_cols = [f.name for f in table.fields] + [f.name for f in added]
    is_current = f"DBT_INTERNAL_DEST.{q(valid_to)} is null"
    if current:
        is_current = f"({is_current} or DBT_INTERNAL_DEST.{q(valid_to)} = {current})"
    src_cols = {c.lower(): c for c in source.columns}
    # identity, generated and default columns the snapshot's query leaves out: the merge fills them in
    filled = {c.lower() for c in filled_in_columns(adapter._snapshot(target).schema_json)}
    insert = {
        c: (f"DBT_INTERNAL_SOURCE.{q(src_cols[c.lower()])}" if c.lower() in src_cols else "null")
        for c in target_cols if c.lower() in src_cols or c.lower() not in filled
    }
    return operations.merge(
        spark, adapter.table(target), source,
        on=f"DBT_INTERNAL_SOURCE.{q(scd_id)} = DBT_INTERNAL_DEST.{q(scd_id)}",
        when_matched_update={valid_to: f"DBT_INTERNAL_SOURCE.{q(valid_to)}"},
        when_matched_condition=f"{is_current} and DBT_INTERNAL_SOURCE.dbt_change_type in ('update', 'delete')",
        when_not_matched_insert=insert,
        when_not_matched_condition="DBT_INTERNAL_SOURCE.dbt_change_type = 'insert'",
        extra_commit_info=adapter._commit_info(model), table_schema=table_schema, read_version=read_version,
    )
