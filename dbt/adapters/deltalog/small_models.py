"""A small `table` model built in this process: DuckDB computes its rows and the engine's Arrow writer
commits them, without a Spark job.

On a dev loop's tables a mart's Spark job (planning, scheduling, a Parquet write over a few kilobytes)
takes 0.5-1.5 s; DuckDB computes the same rows in milliseconds. The table must be the one Spark's path
commits, so this is done only when every part of it is known to be the same:
- the rows: the query passes the model rules of driver_queries.py (what a data test may use, plus sums,
  CASE WHEN, COALESCE and + - * on whole numbers and doubles, and division by a nonzero whole-number literal)
  over warehouse tables and dbt views of at most `driver_queries.MAX_BYTES` of Parquet, in Spark's ANSI
  mode, the default;
- the schema: the columns and types Spark's analysis of the model's SQL gives, worked out here by Spark's
  typing of what the rules allow (spark_analysis.py), else by Spark's analysis (no job runs); each of
  DuckDB's columns must convert to its type exactly (a sum past a bigint's range goes to Spark, which
  fails it as it would);
- the commit: a `table` model (not incremental, not Python), with only the settings the Arrow writer
  commits as Spark's writer does (arrow_seeds.writer_refusal), onto no table or a plain one of ours.
Anything else, and any doubt, goes to Spark; `dbt --debug` says which way each model went and why.
A double sum's last digits depend on the order rows are added in, in Spark as here."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.deltalog.model_config import config_value as _get

logger = AdapterLogger("deltalog")


class NotHere(Exception):
    """The model is built by Spark; the message says why."""


# the commitInfo field of a table built here: the fingerprint of what Spark's analysis of its SQL depended on
MODEL_FINGERPRINT = "dbtModelAnalysis"


def build(adapter: Any, relation: Any, sql: str, model: Any, existed: bool) -> Tuple[Optional[int], Any]:
    """(the committed version, None) when the model was built here; else (None, the model's DataFrame when
    Spark's analysis was made, for Spark's write)."""
    analysis = _Analysis(adapter, relation, sql)
    try:
        analysis.snapshot = _refusal(adapter, relation, model, existed)
        version = _write(adapter, relation, sql, model, existed, analysis)
    except NotHere as why:
        logger.debug(f"{relation}: built by Spark, not in this process: {why}")
        return None, analysis.dataframe
    return version, None


class _Analysis:
    """The Delta schema Spark's analysis gives the model's result. The same SQL over relations of the same
    shape, with the same settings, analyses the same: a table built here records the fingerprint of what
    the analysis depended on (view_check.py) in its commit, and while its last commit is that one, the
    table's schema is the analysis, with no work at all."""

    def __init__(self, adapter: Any, relation: Any, sql: str) -> None:
        self.adapter, self.relation, self.sql = adapter, relation, sql
        self.dataframe = None
        self.snapshot = None  # the existing table's
        self.fingerprint: Optional[str] = None

    def schema(self, query: Any) -> dict:
        """The kept analysis, else the one worked out here (spark_analysis.py), else Spark's."""
        from dbt.adapters.deltalog import driver_queries, spark_settings, view_check
        from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs
        from deltalog.errors import DeltaError
        from deltalog.history import commit_info
        from deltalog.schema import check_column_names

        adapter, relation = self.adapter, self.relation
        self.fingerprint = view_check.fingerprint(adapter.warehouse, quote_warehouse_refs(self.sql, adapter.warehouse),
                                                  adapter.config.credentials.check_settings())
        if self.snapshot is not None and self.fingerprint is not None:
            try:
                info = commit_info(self.snapshot.store, self.snapshot.version) or {}
            except (DeltaError, OSError):
                info = {}
            if info.get(MODEL_FINGERPRINT) == self.fingerprint:
                return self.snapshot.schema_json
        if adapter.config.credentials.switched_on(spark_settings.ANALYSIS_HERE):
            try:
                schema_json = query.delta_schema()
                check_column_names(schema_json, f"{relation.schema}.{relation.identifier}")
                return schema_json
            except (driver_queries.NotHere, DeltaError) as why:
                logger.debug(f"{relation}: Spark analyses it: {why}")
        from deltalog.spark.dml.write import dataframe_schema  # pyspark: only when Spark analyses

        self.dataframe = adapter._dataframe(self.sql)
        _ansi(adapter.spark)
        try:
            return dataframe_schema(self.dataframe, f"{relation.schema}.{relation.identifier}")
        except DeltaError as exc:  # Spark's write says what is wrong
            raise NotHere(str(exc)) from None


def _refusal(adapter: Any, relation: Any, model: Any, existed: bool) -> Any:
    """NotHere says why Spark builds the model; else the existing table's snapshot (None: a new table)."""
    from dbt.adapters.deltalog import arrow_seeds, spark_settings
    from deltalog.errors import DeltaError

    creds = adapter.config.credentials
    if not creds.small_models_here:
        raise NotHere("small_models_here: false")
    config = _get(model, "config") or {}
    if _get(config, "materialized") != "table" or _get(model, "language") == "python":
        raise NotHere("not a SQL table model")
    if _get(config, "sql_header"):
        raise NotHere("sql_header")
    why = spark_settings.settings_refusal(creds.spark_conf)
    if why:
        raise NotHere(why)
    warehouse = adapter.warehouse_of(relation)
    if warehouse.is_view(relation.schema, relation.identifier):
        raise NotHere("a dbt view of the same name gives way first")
    cfg = adapter._model_config(relation, model)
    why = arrow_seeds.writer_refusal(adapter, relation, model, cfg, adapter._definition(relation, model))
    if why:
        raise NotHere(why)
    if existed:
        try:
            snapshot = adapter.table(relation).snapshot()
        except (DeltaError, OSError) as exc:
            raise NotHere(f"the table is not read here: {exc}") from None
        wanted = adapter._definition(relation, model).properties
        if dict(snapshot.configuration) != dict(wanted):
            raise NotHere(f"the table's properties {dict(snapshot.configuration)} are not the model's {dict(wanted)}")
        if snapshot.partition_columns:
            raise NotHere("the table is partitioned")
        if any(f.get("metadata") for f in snapshot.schema_json["fields"]):
            raise NotHere("the table's columns carry metadata (identity, generated, defaults, comments)")
        if snapshot.configuration.get("delta.enableChangeDataFeed") == "true" \
                or snapshot.configuration.get("delta.enableRowTracking") == "true":
            raise NotHere("the table records its changes or row ids")
        return snapshot
    return None


def _write(adapter: Any, relation: Any, sql: str, model: Any, existed: bool, analysis: _Analysis) -> int:
    from deltalog.column_mapping import names_needing_mapping
    from deltalog.schema import to_arrow_schema
    from deltalog.write import write_deltalake

    from dbt.adapters.deltalog import driver_queries
    from dbt.adapters.deltalog.placement import place_table
    from dbt.adapters.deltalog.runtime.session import RUNTIME
    from dbt.adapters.deltalog.sql_gateway import read_statement, relations_of_sql

    statement = read_statement(None, adapter.warehouse, sql)
    if statement.head not in ("SELECT", "WITH"):
        raise NotHere("not a SELECT")
    if any((schema, name) == (relation.schema, relation.identifier) for _, schema, name in statement.relations):
        raise NotHere("it reads its own table (Spark's path commits against the version it read)")
    try:  # the rules first: a model they refuse costs no more than its parse
        query = driver_queries.model_query(adapter.warehouse, statement.text, statement.relations, relations_of_sql)
    except driver_queries.NotHere as why:
        raise NotHere(str(why)) from None
    if RUNTIME.spark is not None:  # a session this command opened may have been SET otherwise (a hook)
        _ansi(RUNTIME.spark)
    schema_json = analysis.schema(query)
    if names_needing_mapping(schema_json):
        raise NotHere("column names that need column mapping")
    try:
        rows, read = query.run()
    except driver_queries.NotHere as why:
        raise NotHere(str(why)) from None
    data = _as_spark_types(rows, to_arrow_schema(schema_json))
    warehouse = adapter.warehouse_of(relation)
    place_table(warehouse, relation, adapter._model_config(relation, model))
    warehouse.create_schema(relation.schema)
    version = write_deltalake(
        adapter.table(relation).uri, data, mode="overwrite" if existed else "error",
        schema_mode="overwrite" if existed else None,
        configuration=adapter._definition(relation, model).properties,
        extra_commit_info={**adapter._commit_info(model),
                           **({MODEL_FINGERPRINT: analysis.fingerprint} if analysis.fingerprint else {})},
        operation="CREATE OR REPLACE TABLE AS SELECT" if existed else "CREATE TABLE AS SELECT")
    logger.debug(f"{relation}: built in this process by DuckDB over {', '.join(read) or 'no table'}")
    return version


def _ansi(spark: Any) -> None:
    from dbt.adapters.deltalog.spark_settings import settings_refusal

    why = settings_refusal(None, spark)
    if why:
        raise NotHere(why)


def _as_spark_types(rows: Any, target: Any) -> Any:
    """DuckDB's result in the column names and types of Spark's analysis; only conversions that keep
    every value (whole numbers checked against the narrower type's range, decimals against its precision
    and scale)."""
    import pyarrow as pa

    if rows.num_columns != len(target):
        raise NotHere(f"DuckDB gave {rows.num_columns} columns, Spark's analysis {len(target)}")
    columns = []
    for column, field in zip(rows.columns, target):
        have, want = column.type, field.type
        if have == want or (pa.types.is_string(want) and pa.types.is_large_string(have)):
            columns.append(column.cast(want))
        elif (pa.types.is_integer(want) and (pa.types.is_integer(have) or (
                pa.types.is_decimal(have) and have.scale == 0))) or (
                pa.types.is_decimal(want) and pa.types.is_decimal(have)):
            try:
                columns.append(column.cast(want, safe=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise NotHere(f"{field.name}: {exc}") from None
        else:
            raise NotHere(f"{field.name}: DuckDB's {have} against Spark's {want}")
    return pa.Table.from_arrays(columns, schema=target)
