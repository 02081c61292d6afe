"""The dbt adapter: catalog from the warehouse folder, materializations as engine commits.

Jinja decides which operation a model needs; the @available methods here translate the model's
config into one engine call each (deltalog.spark.operations), so each materialization is one
atomic commit in the table's `_delta_log`.

Only dbt's methods (the `@available` ones the materializations call, and the relation, catalog and
freshness methods dbt's base class asks for), each handing over to the module that does the work:
`strategies/` (incremental runs, custom strategies, snapshots), `schema_change.py` (on_schema_change, on
the engine's rule set), `python_models.py`, `seeds.py`, `placement.py` (where a table or view is
written, publishing it), `docs_catalog.py` (`dbt docs generate`), `freshness.py`, `streaming.py`,
`materialized_view.py`, `maintenance.py`, model config in `model_config.py` / `model_config_keys.py`,
the warehouse catalog in `catalog.py` / `catalog_sql.py`."""

from __future__ import annotations

import functools
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

from dbt.adapters.base.impl import BaseAdapter, ConstraintSupport
from dbt.adapters.base.meta import available
from dbt.adapters.base.relation import BaseRelation, InformationSchema
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.contracts.relation import RelationType
from dbt.adapters.capability import Capability, CapabilityDict, CapabilitySupport, Support
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.contracts.constraints import ConstraintType
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from deltalog.storage import files as fs
from deltalog.errors import DeltaError
from deltalog.lazy_imports import load
from dbt.adapters.deltalog import placement, schema_change, spark_settings
from dbt.adapters.deltalog.warehouse import Warehouse
from dbt.adapters.deltalog.column import DeltalogColumn, column_of
from dbt.adapters.deltalog.connections import DeltalogConnectionManager
from dbt.adapters.deltalog.maintenance import MaintenanceMixin, expose_mixin_methods
from dbt.adapters.deltalog.model_config import (
    DeltaConfig, config_value as _get, quote_name as _q, table_definition,
)
from dbt.adapters.deltalog.model_config_keys import OWN_CONFIGS, DeltalogConfig, warn_unapplied_configs
from dbt.adapters.deltalog.strategies import incremental
from dbt.adapters.deltalog.relation import DeltalogRelation
from dbt.adapters.deltalog.runtime.session import RUNTIME
from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs

logger = AdapterLogger("Deltalog")


def _invocation_id() -> Optional[str]:
    try:
        from dbt_common.invocation import get_invocation_id

        return get_invocation_id()
    except Exception:
        return None


def _reported(method):
    """Errors of an adapter method that writes (Spark's, the engine's, the file system's) reach the
    user as one dbt error naming the relation, without a JVM stack trace."""

    @functools.wraps(method)
    def wrapper(self, relation, *args, **kwargs):
        try:
            return method(self, relation, *args, **kwargs)
        except DbtRuntimeError:
            raise
        except Exception as exc:
            from dbt.adapters.deltalog.connections import _short_error

            raise DbtRuntimeError(f"{relation}: {_short_error(exc, self.warehouse.root)}") from exc

    return wrapper


# dbt commands that open a connection: their Spark session starts as the adapter is made, before the parse
_COMMANDS_ON_SPARK = frozenset({"build", "run", "seed", "snapshot", "test", "run-operation", "show", "retry",
                                "clone", "generate"})


def _command_opens_spark() -> bool:
    try:
        from dbt.flags import get_flags

        return getattr(get_flags(), "WHICH", None) in _COMMANDS_ON_SPARK
    except Exception:  # noqa: BLE001 - not under dbt's command line: start when a connection opens
        return False


class DeltalogAdapter(MaintenanceMixin, SparkAdapter):
    Relation = DeltalogRelation  # type: ignore[assignment]
    Column = DeltalogColumn  # type: ignore[assignment]
    ConnectionManager = DeltalogConnectionManager  # type: ignore[assignment]
    AdapterSpecificConfigs = DeltalogConfig  # type: ignore[assignment]

    # Microbatch batches may run in parallel threads (concurrent_batches): each is one replace-where
    # commit on its own window, and commits on disjoint windows do not conflict.
    _capabilities = CapabilityDict({
        Capability.MicrobatchConcurrency: CapabilitySupport(support=Support.Full),
        # source freshness without a loaded_at_field: the newest commit of the table's log
        Capability.TableLastModifiedMetadata: CapabilitySupport(support=Support.Full),
        Capability.TableLastModifiedMetadataBatch: CapabilitySupport(support=Support.Full),
    })

    CONSTRAINT_SUPPORT = {
        ConstraintType.check: ConstraintSupport.ENFORCED,  # delta.constraints.<name>, checked on every write
        ConstraintType.not_null: ConstraintSupport.ENFORCED,  # a NOT NULL column
        ConstraintType.unique: ConstraintSupport.NOT_ENFORCED,
        ConstraintType.primary_key: ConstraintSupport.NOT_ENFORCED,
        ConstraintType.foreign_key: ConstraintSupport.NOT_ENFORCED,
    }

    def __init__(self, config, mp_context=None) -> None:
        if mp_context is None:
            super().__init__(config)  # type: ignore[call-arg]
        else:
            super().__init__(config, mp_context)
        creds = config.credentials
        # relative warehouses (the profile's and each attached catalog's) are the project folder's
        creds.resolve_warehouse(getattr(config, "project_root", None))
        for name, catalog in creds.warehouses().catalogs.items():
            if catalog.on_object_store:  # every table under it uses them
                fs.configure(catalog.root, creds.storage_options_of(name))
        if getattr(config, "project_root", None):
            RUNTIME.project_root = config.project_root
        RUNTIME.metastores = creds.metastores()
        RUNTIME.catalog_names = frozenset(creds.catalogs)
        if _command_opens_spark() and creds.switched_on(spark_settings.START_EARLY):
            RUNTIME.start_early(**creds.session_arguments())  # while dbt parses the project

    @classmethod
    def type(cls) -> str:
        return "deltalog"

    def pre_model_hook(self, config: Any) -> Any:
        """dbt calls this before every model, seed and snapshot, whatever its materialization: a config
        that would do nothing here (dbt-databricks' or dbt-spark's, or a misspelling of ours) is named in
        a warning, once per model; the model builds as it would without it."""
        warn_unapplied_configs(getattr(config, "model", None), OWN_CONFIGS, logger.warning)
        return super().pre_model_hook(config)

    # ---- session and warehouse -------------------------------------------------------------

    @property
    def warehouse(self) -> Warehouse:
        """The profile's warehouse, with its attached catalogs (`.of(database)`): made once, so that its
        tables' handles are too."""
        creds = self.config.credentials
        warehouse = self.__dict__.get("_warehouse")
        if warehouse is None:
            warehouse = self.__dict__.setdefault("_warehouse", creds.warehouses())
        for name, catalog in warehouse.catalogs.items():
            if catalog.on_object_store:  # also before any connection opens (dbt lists schemas first)
                from dbt.adapters.deltalog.connections import prepare_object_store

                try:
                    prepare_object_store(catalog.root, creds.storage_options_of(name))
                except DeltaError as exc:
                    raise DbtRuntimeError(str(exc)) from None
        return warehouse

    def warehouse_of(self, relation: BaseRelation) -> Warehouse:
        """The warehouse holding `relation`: its dbt `database` names the catalog (none: the profile's)."""
        return self.warehouse.of(relation.database)

    def metastore_of(self, relation: BaseRelation):
        """The Hive Metastore of the relation's catalog, or None."""
        return self.config.credentials.metastores().get(relation.database or None)

    @property
    def spark(self):
        conn = self.connections.get_thread_connection()
        conn = self.connections.open(conn)
        return conn.handle.spark

    def table_uri(self, relation: BaseRelation) -> str:
        if not relation.schema or not relation.identifier:
            raise DbtRuntimeError(f"{relation} names no schema.table: cannot locate its Delta table")
        return self.warehouse_of(relation).table_path(relation.schema, relation.identifier)

    def table(self, relation: BaseRelation):
        """The relation's table handle (`deltalog.DeltaTable`): what every engine call of the adapter takes."""
        if not relation.schema or not relation.identifier:
            raise DbtRuntimeError(f"{relation} names no schema.table: cannot locate its Delta table")
        return self.warehouse_of(relation).table(relation.schema, relation.identifier)

    def _commit_info(self, model: Any) -> Dict[str, Any]:
        info: Dict[str, Any] = {"dbtInvocationId": _invocation_id()}
        unique_id = _get(model, "unique_id")
        if unique_id:
            info["dbtUniqueId"] = unique_id
        return info

    def _dataframe(self, sql: str):
        """The model's SQL as a lazy DataFrame: the engine's write is the one execution."""
        spark = self.spark
        sql = quote_warehouse_refs(sql, self.warehouse)
        RUNTIME.views(spark).refresh_for_sql(self.warehouse, sql)
        try:
            return spark.sql(sql)
        except Exception as exc:
            from dbt.adapters.deltalog.connections import _short_error

            raise DbtRuntimeError(_short_error(exc)) from exc

    def _model_dataframe(self, code: str, model: Any):
        """The model's result as a lazy DataFrame: its SQL, or what its Python `model()` returns."""
        if _get(model, "language") == "python":
            from dbt.adapters.deltalog.python_models import python_dataframe

            return python_dataframe(self.spark, self.warehouse, code, model)
        return self._dataframe(code)

    @staticmethod
    def _model_config(relation: BaseRelation, model: Any) -> DeltaConfig:
        """The model's Delta configs, validated (bad values fail naming the model and the config)."""
        return DeltaConfig(_get(model, "name") or str(relation), relation, _get(model, "config") or {})

    def _definition(self, relation: BaseRelation, model: Any):
        """The table definition the model declares (properties, docs, constraints, clustering)."""
        return table_definition(self._model_config(relation, model), model)

    def _alter_to_definition(self, relation: BaseRelation, model: Any) -> Optional[int]:
        """Before an incremental write: the existing table takes the model's definition (new
        constraints are checked against its rows), so the write's rows are checked against it too."""
        from deltalog.spark import operations

        return operations.alter_table(self.spark, self.table(relation), self._definition(relation, model),
                                      extra_commit_info=self._commit_info(model))

    def _snapshot(self, relation: BaseRelation):
        return self.table(relation).snapshot()

    # ---- schemas ---------------------------------------------------------------------------

    def list_schemas(self, database: str) -> List[str]:
        return self.warehouse.of(database).list_schemas()

    @available.parse(lambda *a, **k: False)
    def check_schema_exists(self, database: str, schema: str) -> bool:
        return self.warehouse.of(database).schema_exists(schema)

    @available.parse_none
    def create_schema(self, relation: BaseRelation) -> None:
        creds = self.config.credentials
        if creds.method != "session" or not creds.master.startswith("local"):
            self.spark  # the session's checks of the warehouse (shared by a cluster's executors) come first
        warehouse = self.warehouse_of(relation)
        warehouse.create_schema(relation.schema)
        metastore = self.metastore_of(relation)
        if metastore is not None:
            metastore.ensure_database(relation.schema, warehouse.schema_path(relation.schema))

    @available.parse_none
    def drop_schema(self, relation: BaseRelation) -> None:
        schema = relation.schema
        spark = self.spark
        warehouse = self.warehouse_of(relation)
        for entry in warehouse.list_relations(schema):
            RUNTIME.views(spark).forget(warehouse.view_name(entry.schema, entry.name))
        warehouse.drop_schema(schema)
        metastore = self.metastore_of(relation)
        if metastore is not None:
            metastore.drop_database(schema)
        self.cache.drop_schema(relation.database, schema)

    # ---- relations -------------------------------------------------------------------------

    @available.parse_none
    def get_relation(self, database: Optional[str], schema: str, identifier: str) -> Optional[BaseRelation]:
        """As dbt finds it, where `database` is an attached catalog; none (or, as dbt-spark projects write
        it, the schema itself, or a node's missing `database`) is the profile's own warehouse."""
        if not isinstance(database, str) or not database or (
                database == schema and database not in RUNTIME.catalog_names):
            database = None
        return BaseAdapter.get_relation(self, database, schema, identifier)

    def list_relations_without_caching(self, schema_relation: BaseRelation) -> List[BaseRelation]:
        warehouse = self.warehouse_of(schema_relation)
        entries = warehouse.list_relations(schema_relation.schema) if schema_relation.schema else []
        entries += self._registered_by_others(schema_relation, {e.name for e in entries})
        return [self.Relation.create(database=schema_relation.database, schema=entry.schema, identifier=entry.name,
                                     type=RelationType.Table if entry.kind == "table" else RelationType.View,
                                     is_delta=entry.kind == "table")
                for entry in entries]

    def _registered_by_others(self, schema_relation: BaseRelation, listed: Set[str]) -> List[Any]:
        metastore, schema = self.metastore_of(schema_relation), schema_relation.schema
        if metastore is None or not schema:
            return []
        from dbt.adapters.deltalog.warehouse import registered_by_others

        return registered_by_others(metastore, self.warehouse_of(schema_relation), schema, listed)

    @available.parse_none
    def drop_relation(self, relation: BaseRelation) -> None:
        """Explicit drops only (a materialization change, `dbt` cleanup): a table's folder goes
        with its history. --full-refresh never comes here; it is an overwrite commit."""
        self.cache_dropped(relation)
        spark = self.spark
        warehouse = self.warehouse_of(relation)
        if relation.schema and relation.identifier:
            warehouse.drop_view(relation.schema, relation.identifier)
            if relation.type != RelationType.View:
                warehouse.drop_table(relation.schema, relation.identifier)
        RUNTIME.views(spark).forget(relation.view_name)
        if relation.identifier:
            spark.catalog.dropTempView(relation.identifier)
        metastore = self.metastore_of(relation)
        if metastore is not None and relation.schema and relation.identifier:
            metastore.drop(relation.schema, relation.identifier)

    @available.parse_none
    @_reported
    def truncate_relation(self, relation: BaseRelation) -> None:
        from deltalog.spark import operations

        operations.delete(self.spark, self.table(relation), "true")

    @available.parse_none
    def rename_relation(self, from_relation: BaseRelation, to_relation: BaseRelation) -> None:
        if (from_relation.database or None) != (to_relation.database or None):
            raise DbtRuntimeError(
                f"cannot rename {from_relation} to {to_relation}: they are in different catalogs (a rename "
                f"stays inside one warehouse). Nothing was changed.")
        self.cache_renamed(from_relation, to_relation)
        spark = self.spark
        self.warehouse_of(from_relation).rename(
            from_relation.schema, from_relation.identifier, to_relation.schema, to_relation.identifier
        )
        RUNTIME.views(spark).forget(from_relation.view_name)
        metastore = self.metastore_of(from_relation)
        if metastore is not None:
            metastore.drop(from_relation.schema, from_relation.identifier)
        self._publish(to_relation)

    def get_columns_in_relation(self, relation: BaseRelation) -> List[DeltalogColumn]:
        schema, name = relation.schema, relation.identifier
        warehouse = self.warehouse_of(relation)
        if schema and name and warehouse.is_table(schema, name):
            load("spark")
            from pyspark.sql.types import StructType

            snap = self._snapshot(relation)
            fields = StructType.fromJson(snap.schema_json).fields
            return [column_of(relation, i, f.name, f.dataType.simpleString()) for i, f in enumerate(fields)]
        spark = self.spark
        if schema and name:
            RUNTIME.views(spark).ensure(warehouse, schema, name)
        view = relation.view_name
        try:
            fields = spark.table(_q(view)).schema.fields
        except Exception:  # no such relation: dbt expects no columns, not an error
            return []
        return [column_of(relation, i, f.name, f.dataType.simpleString()) for i, f in enumerate(fields)]

    # ---- catalog for `dbt docs generate` ---------------------------------------------------

    # dbt-spark allows one database; ours are the profile's warehouse and its attached catalogs
    get_catalog = BaseAdapter.get_catalog

    def _get_one_catalog(self, information_schema: InformationSchema, schemas: Set[str], used_schemas):
        from dbt.adapters.deltalog.docs_catalog import catalog_table

        return catalog_table(self, information_schema, schemas)

    # ---- materializations ------------------------------------------------------------------

    @available
    def temp_view_suffix(self) -> str:
        """Unique per invocation and thread, so parallel models never share a temporary view."""
        inv = (_invocation_id() or "local").replace("-", "")[:12]
        return f"__dbt_tmp_{inv}_{threading.get_ident() % 1_000_000}"

    @available
    @_reported
    def write_table(self, relation: BaseRelation, sql: str, model: Any = None) -> AdapterResponse:
        """`table`, a first incremental build, and --full-refresh: create (version 0) or one
        overwrite commit that may change the schema. Never a drop: history is kept."""
        from dbt.adapters.deltalog import small_models

        existed = self.warehouse_of(relation).is_table(relation.schema, relation.identifier)
        version, df = small_models.build(self, relation, sql, model, existed)
        if version is not None:
            return self._refreshed(relation, "OVERWRITE" if existed else "CREATE", version)
        df = df if df is not None else self._model_dataframe(sql, model)
        config = _get(model, "config") or {}
        missing = incremental.missing_unique_key(model, df) if _get(config, "materialized") == "incremental" else []
        if missing:
            # dbt's contract (and its adapter test suite): a first build does not apply the key, so it
            # passes; say now what the next run will fail on.
            logger.warning(f"Model {_get(model, 'unique_id')}: unique_key column(s) {missing} are not columns of "
                           f"the model's result: the first build does not use the key; the next incremental "
                           f"run will fail on it.")
        version = self._replace_table(
            relation, df, model, "CREATE OR REPLACE TABLE AS SELECT" if existed else "CREATE TABLE AS SELECT")
        return self._refreshed(relation, "OVERWRITE" if existed else "CREATE", version)

    @available
    def stream_files(self, path: str, format: str = "json", schema: Optional[str] = None,
                     options: Optional[Dict[str, Any]] = None) -> str:
        """`{{ stream_files(...) }}`: a streaming view over files landing in `path`, for a streaming_table."""
        from dbt.adapters.deltalog.streaming import StreamingConfigError, file_stream_view

        try:
            return file_stream_view(self.spark, path, format, schema, options,
                                    getattr(self.config, "project_root", None) or RUNTIME.project_root)
        except StreamingConfigError as exc:
            raise CompilationError(str(exc)) from None

    @available
    @_reported
    def refresh_materialized_view(self, relation: BaseRelation, sql: str, model: Any = None,
                                  full_refresh: bool = False) -> AdapterResponse:
        """`materialized_view`: incremental where the query allows it, else a full recompute, nothing when
        no input committed (dbt/adapters/deltalog/materialized_view.py)."""
        from dbt.adapters.deltalog import materialized_view

        what, version = materialized_view.refresh(self, relation, sql, model, full_refresh)
        self._publish(relation)
        return AdapterResponse(_message=what if version is None else f"{what}: version {version}")

    @available
    def stream_kafka(self, bootstrap_servers: str, topic: str, options: Optional[Dict[str, Any]] = None) -> str:
        """`{{ stream_kafka(servers, topic) }}`: a streaming view over a Kafka topic, for a streaming_table."""
        from dbt.adapters.deltalog.streaming import StreamingConfigError, kafka_stream_view

        try:
            return kafka_stream_view(self.spark, bootstrap_servers, topic, options)
        except StreamingConfigError as exc:
            raise CompilationError(str(exc)) from None

    @available
    def debezium(self, relation: Any, schema: str, truncates: bool = False) -> str:
        """`{{ debezium(stream_kafka(...), schema='id bigint, ...') }}`: Debezium's JSON change events as rows
        (the row's columns, `_op`, `_source_ts_ms`, `_lsn`, `_binlog_seq`), a subquery (debezium.py)."""
        from dbt.adapters.deltalog.debezium import debezium_relation
        from dbt.adapters.deltalog.streaming import StreamingConfigError

        try:
            return debezium_relation(self.spark, relation, schema, truncates)
        except StreamingConfigError as exc:
            raise CompilationError(str(exc)) from None

    @available
    def stream_of(self, relation: BaseRelation, options: Optional[Dict[str, Any]] = None,
                  changes: bool = False) -> str:
        """`{{ stream(ref('x')) }}`: a streaming view over one of our tables (its rows commit by commit, or
        with `changes` its change feed), for a streaming_table's SQL (streaming.py)."""
        from dbt.adapters.deltalog.streaming import StreamingConfigError, table_stream_view

        if not self.warehouse_of(relation).is_table(relation.schema, relation.identifier):
            raise CompilationError(f"stream({relation}): there is no Delta table {relation} to read as a stream; "
                                   f"build it first (a stream reads a table, not a view).")
        try:
            return table_stream_view(self.spark, self.table(relation), options, changes)
        except StreamingConfigError as exc:
            raise CompilationError(f"stream({relation}): {exc}") from None

    @available
    @_reported
    def write_streaming_table(self, relation: BaseRelation, sql: str, model: Any = None,
                              full_refresh: bool = False) -> AdapterResponse:
        """`streaming_table`: the model's stream into the table until everything available is in, each
        micro-batch one commit, exactly once (streaming.py)."""
        from dbt.adapters.deltalog import streaming

        try:
            done = streaming.write_streaming_table(self, relation, sql, model, full_refresh)
        except streaming.StreamingConfigError as exc:
            raise CompilationError(str(exc)) from None
        self._publish(relation)
        if done.get("started"):
            return AdapterResponse(_message=f"STARTED (runs until stopped): version {done['version']}")
        return AdapterResponse(_message=f"STREAMED {done['batches']} batch(es), {done['rows']} row(s): version "
                                        f"{done['version']}", rows_affected=done["rows"])

    def _replace_table(self, relation: BaseRelation, df: Any, model: Any, operation: str,
                       commit_info: Optional[Dict[str, Any]] = None) -> Optional[int]:
        """Create the table, or replace its rows and schema in one overwrite commit (placement.py)."""
        return placement.replace_table(self, relation, df, model, operation, commit_info)

    def _publish(self, relation: BaseRelation) -> None:
        """The relation registered in the metastore and its session view marked changed (placement.py)."""
        placement.publish(self, relation)

    def _refreshed(self, relation: BaseRelation, what: str, version: Optional[int]) -> AdapterResponse:
        return placement.refreshed(self, relation, what, version)

    @available
    @_reported
    def create_view(self, relation: BaseRelation, sql: str, model: Any = None) -> AdapterResponse:
        """A dbt view: its SQL kept in the warehouse, a session view runs it (placement.py)."""
        placement.create_view(self, relation, sql, model)
        return AdapterResponse(_message="CREATE VIEW")

    @available
    @_reported
    def clone_table(self, relation: BaseRelation, source: BaseRelation) -> AdapterResponse:
        """`dbt clone`: a shallow clone of the deferred relation's table (its files by absolute path,
        no data copied), as version 0 or one overwrite commit of an existing table."""
        from deltalog.operations.clone import shallow_clone

        if not self.warehouse_of(source).is_table(source.schema, source.identifier):
            raise DbtRuntimeError(f"dbt clone: {source} is not a Delta table of the warehouse "
                                  f"{self.warehouse_of(source).root}; nothing was cloned.")
        if self.warehouse_of(relation).is_view(relation.schema, relation.identifier):
            self.drop_relation(relation.incorporate(type=RelationType.View))
        self.warehouse_of(relation).create_schema(relation.schema)
        version = shallow_clone(self.table(source), self.table(relation),
                                extra_commit_info={"dbtInvocationId": _invocation_id()})
        return self._refreshed(relation, "CLONE", version)

    @available
    def create_temp_view(self, relation: BaseRelation, sql: str) -> BaseRelation:
        spark = self.spark
        sql = quote_warehouse_refs(sql, self.warehouse)
        RUNTIME.views(spark).refresh_for_sql(self.warehouse, sql)
        spark.sql(f"create or replace temporary view {relation.render()} as\n{sql}")
        return relation

    @available
    @_reported
    def write_seed(self, relation: BaseRelation, agate_table: Any, model: Any = None,
                   full_refresh: bool = False) -> AdapterResponse:
        """Seeds: typed columns, one overwrite commit, none when the seed is as last loaded (seeds.py)."""
        from dbt.adapters.deltalog.seeds import write_seed

        return write_seed(self, relation, agate_table, model, full_refresh)

    @available
    def validate_incremental(self, strategy: Optional[str], model: Any = None,
                             custom_macro: bool = False) -> Tuple[str, str]:
        """The model's strategy and on_schema_change, checked on every run (strategies/incremental.py)."""
        return incremental.validate(strategy, model, custom_macro)

    @available
    @_reported
    def write_incremental(
        self, relation: BaseRelation, sql: str, strategy: str, model: Any = None
    ) -> AdapterResponse:
        """One incremental run on an existing table: exactly one commit for the strategy, holding the
        schema change too (strategies/incremental.py, the strategy itself a module of `strategies/`)."""
        version = incremental.write_incremental(self, relation, sql, strategy, model)
        return self._refreshed(relation, (strategy or "merge").upper(), version)

    @available
    def is_builtin_strategy(self, strategy: Optional[str]) -> bool:
        return incremental.is_builtin(strategy)

    def valid_incremental_strategies(self) -> List[str]:
        return list(incremental.INCREMENTAL_STRATEGIES)

    @available
    def overriding_strategy_macro(self, context: Any, strategy: Optional[str]) -> str:
        """The project's macro that overrides a built-in strategy's SQL, or "" (strategies/incremental.py)."""
        return incremental.overriding_macro(context, strategy)

    @available
    @_reported
    def run_custom_strategy(self, relation: BaseRelation, script: str, strategy: str, model: Any = None) -> AdapterResponse:
        """A project's own incremental strategy: its statements on the target in ONE commit, or none
        (strategies/custom.py)."""
        from dbt.adapters.deltalog.strategies.custom import run_custom_strategy

        version = run_custom_strategy(self, relation, script, strategy, model)
        return self._refreshed(relation, strategy.upper(), version)

    @available
    def declared_contract_sql(self, sql: str, model: Any = None) -> Optional[Dict[str, str]]:
        """For a model with an enforced contract declaring columns filled in for it (identity, generated,
        default): the SQL dbt's contract check compares and the SQL written (declared_columns.py); None
        for any other model."""
        from dbt.adapters.deltalog import declared_columns

        declared = declared_columns.declared_columns(model)
        if not declared:
            return None
        declared_columns.refuse_on_a_view(declared, model)
        return declared_columns.contract_sql(declared, sql, list(self._dataframe(sql).columns))

    @available
    def plain_contract_columns(self, columns: Dict[str, Any], model: Any = None) -> Dict[str, Dict[str, Any]]:
        """Contract columns with each data_type as its plain Spark type (declared_columns.py)."""
        from dbt.adapters.deltalog.declared_columns import plain_contract_columns

        return plain_contract_columns(str(_get(model, "name") or "?"), columns)

    def _apply_schema_change(self, relation, df, on_schema_change: str, model: Any):
        """(the rows aligned with the table, its new schema JSON or None): schema_change.py."""
        return schema_change.apply_schema_change(self, relation, df, on_schema_change, model)

    @available
    @_reported
    def add_columns(self, relation: BaseRelation, columns: List[Any], model: Any = None) -> None:
        """New columns (snapshot's dbt_is_deleted, alter ... add columns) as a metadata commit."""
        schema_change.add_columns(self, relation, columns, model)

    @available
    @_reported
    def snapshot_merge(
        self, target: BaseRelation, staging: BaseRelation, columns: Any, model: Any = None,
        add_columns: Optional[List[Any]] = None,
    ) -> AdapterResponse:
        """Snapshot update on the merge engine, the columns it gains in the same commit
        (strategies/snapshot.py)."""
        from dbt.adapters.deltalog.strategies.snapshot import snapshot_merge

        version = snapshot_merge(self, target, staging, columns, model, add_columns)
        return self._refreshed(target, "SNAPSHOT MERGE", version)

    def calculate_freshness_from_metadata_batch(self, sources: List[BaseRelation], macro_resolver: Any = None):
        """When each source table last changed, from its Delta log (freshness.py)."""
        from dbt.adapters.deltalog.freshness import freshness_of_many

        return freshness_of_many(self, sources)

    def calculate_freshness_from_metadata(self, source: BaseRelation, macro_resolver: Any = None):
        """One source's freshness from its Delta log; a source whose table is not in the warehouse fails
        naming it."""
        from dbt.adapters.deltalog.freshness import log_freshness

        return AdapterResponse(_message="freshness from the Delta log"), log_freshness(self, source)

    def debug_query(self) -> None:
        self.execute("select 1 as id")
        logger.info(f"  Spark server: {self.config.credentials.spark_server_status()}")
        for catalog, metastore in self.config.credentials.metastores().items():
            # reachable, or the MetastoreError naming its address fails the check
            logger.info(f"  Hive Metastore{f' of catalog {catalog}' if catalog else ''}: {metastore.uri}, "
                        f"{len(metastore.databases())} database(s)")
        for name, catalog in self.warehouse.catalogs.items():
            if name:
                logger.info(f"  catalog {name}: {catalog.root}")

    @classmethod
    def _get_adapter_specific_run_info(cls, config) -> Dict[str, Any]:
        return {"adapter_type": "deltalog", "table_format": "delta"}


expose_mixin_methods(DeltalogAdapter)
