"""A project's own incremental strategy (its `get_incremental_<name>_sql` macro, as dbt documents them):
the INSERT / DELETE / UPDATE statements of its SQL on the target land in ONE commit, or none does; its
other statements run as they come. The commit appends when the statements only insert; otherwise it
replaces the rows of the version they read (a copy-on-write of the table)."""
from __future__ import annotations

from typing import Any, Optional

from dbt_common.exceptions import DbtRuntimeError

from deltalog.errors import DeltaError
from dbt.adapters.deltalog.model_config import config_value
from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs


def run_custom_strategy(adapter: Any, relation: Any, script: str, strategy: str, model: Any) -> Optional[int]:
    """The commit's version, or None when no statement touched the target."""
    from deltalog.spark import operations
    from deltalog.spark.reader import snapshot_dataframe
    from dbt.adapters.deltalog.dml import TargetRows, parse_dml
    from dbt.adapters.deltalog.sql_gateway import statements, strip_leading_comments

    spark = adapter.spark
    table = adapter.table(relation)
    snap = adapter._snapshot(relation)
    view = f"`{relation.schema}.{relation.identifier}`"
    # exactly the version committed against
    rows = TargetRows(spark, view, snapshot_dataframe(spark, snap), snap.schema_json)
    touched = False
    try:
        for statement in statements(script):
            sql = quote_warehouse_refs(strip_leading_comments(statement), adapter.warehouse)
            if sql.lstrip()[:5].upper() == "MERGE":
                raise ValueError(
                    f"the SQL of get_incremental_{strategy.replace('+', '_')}_sql (the project's macro) holds a "
                    f"MERGE statement; a strategy's SQL may insert, delete and update (INSERT, DELETE, UPDATE), "
                    f"all in one commit. Write the merge as those statements, or remove the macro to use the "
                    f"built-in {strategy!r} strategy")
            dml = parse_dml(sql)
            if dml and (dml.schema.lower(), dml.name.lower()) == (
                    relation.schema.lower(), relation.identifier.lower()):
                rows.apply(dml)
                touched = True
            else:
                adapter.execute(sql)
        if not touched:
            return None
        write = dict(operation="WRITE", operation_parameters={"strategy": strategy},
                     extra_commit_info=adapter._commit_info(model), read_version=snap.version,
                     app_transactions=adapter.take_app_transactions(relation))
        if rows.rewrites:
            # (the table's rows keep their identity values; a script's inserts were refused any)
            return operations.write_dataframe(rows.rows, table, mode="overwrite", own_rows=True, **write)
        return operations.write_dataframe(rows.inserted, table, mode="append", **write)
    except (ValueError, DeltaError) as exc:
        raise DbtRuntimeError(f"Model {config_value(model, 'unique_id')}: incremental strategy {strategy!r}: "
                              f"{exc}. Nothing was committed to {relation}.") from exc
    finally:
        rows.close()
