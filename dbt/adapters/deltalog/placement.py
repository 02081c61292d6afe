"""Where a model's relation is written: a table's folder (the warehouse's, or `location_root`) and its
create-or-replace commit, a view's SQL and docs; and what follows every build: the Hive Metastore
entry, the session views, dbt's response."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.contracts.relation import RelationType
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from deltalog.storage import files as fs
from dbt.adapters.deltalog.declared_columns import declared_columns, first_write_schema, refuse_on_a_view
from dbt.adapters.deltalog.docs_catalog import warn_missing_doc_columns
from dbt.adapters.deltalog.model_config import DeltaConfig, as_list as _as_list, config_value as _get, table_definition
from dbt.adapters.deltalog.runtime.session import RUNTIME
from dbt.adapters.deltalog import view_check
from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs


def replace_table(adapter: Any, relation: Any, df: Any, model: Any, operation: str,
                  commit_info: Optional[Dict[str, Any]] = None) -> Optional[int]:
    """Create the table (version 0), or replace its rows and schema in one overwrite commit; a dbt
    view of the same name gives way first. `commit_info`: more fields for the commit's commitInfo."""
    from deltalog.spark import operations

    config = _get(model, "config") or {}
    cfg = adapter._model_config(relation, model)
    definition = table_definition(cfg, model)
    warn_missing_doc_columns(model, definition.column_comments, df.columns)
    place_table(adapter.warehouse_of(relation), relation, cfg)
    warehouse = adapter.warehouse_of(relation)
    existed = warehouse.is_table(relation.schema, relation.identifier)
    if warehouse.is_view(relation.schema, relation.identifier):
        adapter.drop_relation(relation.incorporate(type=RelationType.View))
    warehouse.create_schema(relation.schema)
    # identity, generated and default columns: the first write's (and a rebuild's) schema declares them
    table_schema = first_write_schema(declared_columns(model), df)
    return operations.write_dataframe(
        df,
        adapter.table(relation),
        mode="overwrite" if existed else "error",
        partition_by=_as_list(_get(config, "partition_by")) or None,
        schema_mode="overwrite" if existed else None,
        operation=operation,
        extra_commit_info={**adapter._commit_info(model), **(commit_info or {})},
        app_transactions=adapter.take_app_transactions(relation, adapter._snapshot(relation) if existed else None),
        definition=definition,
        table_schema=table_schema,
    )


def place_table(wh: Any, relation: Any, cfg: DeltaConfig) -> None:
    """With location_root the table lives at `<location_root>/<identifier>` and the warehouse keeps
    a `.location` file naming it. A table is never moved silently between locations, and never
    written into a folder that holds other files (VACUUM would later delete them)."""
    schema, name = relation.schema, relation.identifier
    current = wh.location_of(schema, name) if wh.is_table(schema, name) else None
    wanted = None
    if cfg.location_root:
        root = str(cfg.location_root).rstrip("/")
        if not fs.is_object_store_uri(root):
            if "://" in root:
                raise CompilationError(
                    f"Model '{cfg.model}': location_root={cfg.location_root!r} is a URI this adapter cannot "
                    f"store tables in; allowed: a folder path, s3://, abfss:// / az://, gs://.")
            root = os.path.abspath(os.path.join(RUNTIME.project_root or ".", os.path.expanduser(root)))
        wanted = fs.join(root, name)
    here = current or (wh.folder_path(schema, name) if wh.is_table(schema, name) else None)
    if here is not None and not same_location(here, wanted or wh.folder_path(schema, name)):
        raise CompilationError(
            f"Model '{cfg.model}': its table {relation} is at {here}, but location_root puts it at "
            f"{wanted or wh.folder_path(schema, name)}. Tables are not moved silently: drop the old table "
            f"first (its data outside the warehouse folder is never deleted), or set location_root back.")
    if wanted is None and here is None and wh.location_of(schema, name) is not None:
        wh.set_location(schema, name, None)  # a location whose table was never written
    if wanted is None or current is not None:
        return
    if fs.list_files(wanted, recursive=False) and not fs.exists(fs.join(wanted, "_delta_log")):
        raise CompilationError(
            f"Model '{cfg.model}': location_root puts its table at {wanted}, a folder that holds files but no "
            f"Delta table. Choose an empty or new folder: table maintenance (VACUUM) would delete files it "
            f"does not know. Nothing was written.")
    wh.set_location(schema, name, wanted)


def same_location(a: str, b: str) -> bool:
    if fs.is_object_store_uri(a) or fs.is_object_store_uri(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)


def publish(adapter: Any, relation: Any) -> None:
    """The relation as the warehouse now holds it, registered in the metastore (`catalog` in the
    profile; its entry dropped when the relation is gone). The Spark session's view of it is made
    again by the next statement that names it (SessionViews.ensure), not here: the tables at the
    end of a DAG, and those only data tests read in this process, never need one."""
    warehouse = adapter.warehouse_of(relation)
    RUNTIME.changed(warehouse.view_name(relation.schema, relation.identifier))
    metastore = adapter.metastore_of(relation)
    if metastore is not None:
        RUNTIME.views(adapter.spark).ensure(warehouse, relation.schema, relation.identifier)
        from dbt.adapters.deltalog.metastore import MetastoreError, publish as register

        try:
            register(metastore, warehouse, adapter.spark, relation.schema, relation.identifier)
        except MetastoreError as exc:
            raise DbtRuntimeError(
                f"{relation}: what was built is committed, but its entry in the Hive Metastore is not "
                f"up to date: {exc} The next run registers it again.") from None


def refreshed(adapter: Any, relation: Any, what: str, version: Optional[int]) -> AdapterResponse:
    """The relation published, and dbt's response naming the commit (or that there was none)."""
    publish(adapter, relation)
    if version is None:
        return AdapterResponse(_message=f"{what}: nothing to commit")
    return AdapterResponse(_message=f"{what} version {version}")


def create_view(adapter: Any, relation: Any, sql: str, model: Any) -> None:
    """A dbt view: its SQL is kept in the warehouse, and a session view runs it; persist_docs
    keeps its description and column comments next to it."""
    refuse_on_a_view(declared_columns(model), model)
    warehouse = adapter.warehouse_of(relation)
    sql = quote_warehouse_refs(sql, adapter.warehouse)
    # the same SQL over relations of the same shape compiles as it did last time: no Spark needed
    print_ = view_check.fingerprint(adapter.warehouse, sql, adapter.config.credentials.check_settings())
    columns = view_check.checked_columns(warehouse, relation.schema, relation.identifier, sql, print_)
    if columns is not None:
        AdapterLogger("deltalog").debug(f"{relation}: its SQL and what it reads are as when Spark last checked "
                                        f"it: saved as it was, without a Spark job")
    else:
        columns = view_check.columns_here(adapter, sql)
        if columns is not None:
            AdapterLogger("deltalog").debug(f"{relation}: its SQL is within the model rules: its columns "
                                            f"{columns} found without Spark")
        else:
            spark = adapter.spark
            RUNTIME.views(spark).refresh_for_sql(adapter.warehouse, sql)
            # check it compiles before it is saved
            try:
                columns = spark.sql(sql).columns
            except Exception as exc:
                from dbt.adapters.deltalog.connections import _short_error

                raise DbtRuntimeError(_short_error(exc)) from exc
        if warehouse.is_table(relation.schema, relation.identifier):
            adapter.drop_relation(relation.incorporate(type=RelationType.Table))
        warehouse.write_view_check(relation.schema, relation.identifier, None)  # never one of another SQL
        warehouse.write_view_sql(relation.schema, relation.identifier, sql)
        view_check.record(warehouse, relation.schema, relation.identifier, print_, columns)
    docs = None
    if model is not None:
        definition = adapter._definition(relation, model)
        warn_missing_doc_columns(model, definition.column_comments, columns)
        docs = {"description": definition.description,
                "columns": {c: definition.column_comments.get(c) or None for c in columns
                            if definition.column_comments.get(c)}}
        if not docs["description"] and not docs["columns"]:
            docs = None
    warehouse.write_view_docs(relation.schema, relation.identifier, docs)
    publish(adapter, relation)
