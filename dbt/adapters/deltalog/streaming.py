"""Streaming tables: `materialized='streaming_table'`, a model whose SQL reads a stream (files landing in
a folder, `{{ stream_files(...) }}`; a Kafka topic, `{{ stream_kafka(...) }}`; one of our tables,
`{{ stream(ref(...)) }}`), run by `dbt run` with Structured Streaming's `availableNow`
trigger: everything new since the last run, each micro-batch one commit carrying `txn(app id, batch id)`
(`deltalog.spark.streaming.batch_writer`), then the model finishes.

The streaming checkpoint (offsets, sources) lives beside the table's data in `_dbt_streaming/`, a folder
Delta readers never read and VACUUM (ours and delta-spark's) leaves alone: the table and the position in
its stream move together. The app id is made once per checkpoint and kept in it: `--full-refresh` starts
a new checkpoint and a new app id, and the first batch replaces the table (a new version, history kept).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from deltalog.storage import files as fs
from deltalog.lazy_imports import load

CHECKPOINT_DIR = "_dbt_streaming"
APP_ID_FILE = "app_id"
STREAM_CHECKPOINT = "checkpoint"  # Spark's, in CHECKPOINT_DIR
# In CHECKPOINT_DIR from the start of a `--full-refresh` until the table is replaced (see _start_over)
REFRESH_PENDING = "full_refresh_pending"
FORMATS = ("json", "csv", "parquet", "text", "orc")


class StreamingConfigError(ValueError):
    """A streaming model's config or source cannot run: names the model and what is allowed."""


def file_stream_view(spark: Any, path: str, fmt: str, schema: Optional[str], options: Optional[Dict[str, Any]],
                     project_root: Optional[str]) -> str:
    """A temporary view over Spark's file stream source on `path` (relative to the project folder, or a
    URI), for the model's SQL to select from; its name."""
    fmt = str(fmt or "").lower()
    if fmt not in FORMATS:
        raise StreamingConfigError(f"stream_files('{path}'): format {fmt!r} is not one of {', '.join(FORMATS)}.")
    if fmt != "parquet" and not schema:
        raise StreamingConfigError(
            f"stream_files('{path}', format='{fmt}'): a file stream needs the rows' schema (Spark does not infer "
            f"it for a stream), e.g. schema='order_id bigint, amount double'.")
    if "://" not in str(path) and not os.path.isabs(os.path.expanduser(str(path))):
        path = os.path.abspath(os.path.join(project_root or ".", os.path.expanduser(str(path))))
    reader = spark.readStream.format(fmt).options(**{str(k): str(v) for k, v in (options or {}).items()})
    if schema:
        reader = reader.schema(schema)
    name = "deltalog_stream_" + hashlib.sha1(f"{path}|{fmt}|{schema}|{sorted((options or {}).items())}"
                                             .encode()).hexdigest()[:16]
    reader.load(str(path)).createOrReplaceTempView(name)
    return name


class Continuous:
    """Made by `python -m dbt.adapters.deltalog.stream` for the dbt run it makes (held as
    `RUNTIME.continuous`): each streaming table then starts its query with its `processing_time` trigger
    and returns (so that dbt starts downstream streams in DAG order, every one running at once in this
    process), and `watch` reports their batches until `stop` is set (SIGTERM / Ctrl-C) or one fails."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.queries: List[Tuple[str, Any, Callable[[str], None]]] = []

    def watch(self, poll: float = 0.5) -> int:
        """Report every running query's batches; on `stop`, end each after its batch under way (a batch is
        one commit: one cut short is replayed once, and its txn keeps it from landing twice). 0, or 1 when
        a query failed."""
        seen: Dict[int, int] = {}
        failed = False
        while not self.stop.is_set() and not failed:
            for i, (model, query, report) in enumerate(self.queries):
                progress = query.lastProgress
                if progress and progress_value(progress, "batchId", -1) > seen.get(i, -1):
                    seen[i] = progress_value(progress, "batchId", -1)
                    took = (progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000
                    report(f"{model}: batch {seen[i]}, {progress.get('numInputRows', 0)} row(s), {took:.1f} s")
                if not query.isActive:
                    report(f"{model}: the stream stopped: {query.exception() or 'no error'}")
                    failed = True
            self.stop.wait(poll)
        for model, query, report in self.queries:
            while query.isActive and (query.status or {}).get("isTriggerActive"):
                time.sleep(0.1)
            query.stop()
            report(f"{model}: stopped after batch {seen.get(self.queries.index((model, query, report)), -1)}")
        return 1 if failed else 0


_INTERVAL = re.compile(r"^\s*\d+(\.\d+)?\s*(millisecond|second|minute|hour)s?\s*$", re.I)


def kafka_stream_view(spark: Any, bootstrap_servers: str, topic: str, options: Optional[Dict[str, Any]]) -> str:
    """A temporary view over Spark's Kafka source (key, value, topic, partition, offset, timestamp,
    timestampType) on `topic`, from its earliest offset unless `options` say otherwise; its name."""
    if not bootstrap_servers or not topic:
        raise StreamingConfigError(f"stream_kafka({bootstrap_servers!r}, {topic!r}): both the bootstrap servers "
                                   f"(host:port, comma-separated) and a topic are needed.")
    options = {"startingOffsets": "earliest", **{str(k): str(v) for k, v in (options or {}).items()}}
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", str(bootstrap_servers))
              .option("subscribe", str(topic)).options(**options))
    try:
        df = reader.load()
    except Exception as exc:
        if "kafka" in str(exc).lower() and ("DATA_SOURCE_NOT_FOUND" in str(exc) or "Failed to find data source" in str(exc)):
            load("spark")
            import pyspark

            raise StreamingConfigError(
                f"stream_kafka('{topic}'): Spark's Kafka source is not on this session's class path. Add "
                f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__} to spark.jars.packages in the "
                f"profile's spark_conf (a cluster needs it too).") from None
        raise
    name = "deltalog_kafka_" + hashlib.sha1(f"{bootstrap_servers}|{topic}|{sorted(options.items())}"
                                            .encode()).hexdigest()[:16]
    df.createOrReplaceTempView(name)
    return name


def table_stream_view(spark: Any, table: Any, options: Optional[Dict[str, Any]], changes: bool) -> str:
    """A session view streaming the Delta table (a `DeltaTable`; deltalog/spark/table_stream.py): its rows
    commit by commit, or with `changes` its change feed. Its name is the same for the same table and options."""
    from deltalog.errors import DeltaError
    from deltalog.spark.table_stream import stream_table

    options = {**(options or {}), **({"readChangeFeed": True} if changes else {})}
    name = "deltalog_stream_" + hashlib.sha1(f"{table.uri}|{sorted(options.items())}".encode()).hexdigest()[:16]
    try:
        stream_table(spark, table, **options).createOrReplaceTempView(name)
    except DeltaError as exc:
        raise StreamingConfigError(str(exc)) from None
    return name


def write_streaming_table(adapter: Any, relation: Any, sql: str, model: Any, full_refresh: bool) -> Dict[str, Any]:
    """A streaming_table model run through `run_streaming_table`, its on_schema_change applied as an
    incremental model's: the first batch commits the schema change with its rows."""
    from dbt.adapters.events.logging import AdapterLogger

    from dbt.adapters.deltalog.model_config import as_list, config_value, table_definition

    config = config_value(model, "config") or {}
    name = config_value(model, "unique_id") or str(relation)
    trigger = trigger_of(config, name)
    _, on_schema_change = adapter.validate_incremental("append", model)
    definition = table_definition(adapter._model_config(relation, model), model)
    changes = apply_changes_of(config, name)
    df = adapter._model_dataframe(sql, model)
    table_schema = None
    columns = None
    table = adapter.table(relation)
    if not full_refresh and refresh_pending(table.uri):
        AdapterLogger("Deltalog").info(
            f"{name}: a --full-refresh of this streaming table stopped before it replaced the table; it runs "
            f"again (a plain run would take the whole input again on top of the old rows)")
        full_refresh = True
    exists = adapter.warehouse_of(relation).is_table(relation.schema, relation.identifier) and not full_refresh
    if changes is not None:
        from deltalog.spark.apply_changes import check_source

        check_source(df, changes, f"Model '{name}'")
        if exists:
            columns, table_schema = changes_schema_change(adapter, relation, df, changes, on_schema_change, model)
    elif exists:
        df, table_schema = adapter._apply_schema_change(relation, df, on_schema_change, model)
    from dbt.adapters.deltalog.declared_columns import declared_columns, first_write_schema

    # identity, generated and default columns: declared by the schema the table is created with
    declared_schema = None if exists else first_write_schema(declared_columns(model), df)
    adapter.warehouse_of(relation).create_schema(relation.schema)
    return run_streaming_table(
        adapter.spark, df, table, full_refresh=full_refresh, trigger=trigger,
        partition_by=as_list(config_value(config, "partition_by")), model=name, report=AdapterLogger("Deltalog").info,
        definition=definition, table_schema=table_schema, changes=changes, columns=columns,
        declared_schema=declared_schema)


def changes_schema_change(adapter: Any, relation: Any, df: Any, changes: Any, on_schema_change: str,
                          model: Any) -> Tuple[List[str], Optional[Dict[str, Any]]]:
    """A stream of changes whose columns differ from its table's: the columns the table keeps and its
    new schema (None: unchanged), by the model's on_schema_change, as for any incremental model."""
    from deltalog.spark.apply_changes import change_applier

    shaped = change_applier(adapter.table(relation), changes, "schema-check", df.columns).empty_rows(df)
    aligned, table_schema = adapter._apply_schema_change(relation, shaped, on_schema_change, model)
    return list(aligned.columns), table_schema


def apply_changes_of(config: Dict[str, Any], model: str) -> Any:
    """The model's `apply_changes` request (a streaming table applying a stream of changes), or None."""
    given = config.get("apply_changes")
    if given is None:
        return None
    from deltalog.spark.apply_changes import ApplyChanges, ApplyChangesError

    try:
        return ApplyChanges.of(given, f"Model '{model}'")
    except ApplyChangesError as exc:
        raise StreamingConfigError(str(exc)) from None


def trigger_of(config: Dict[str, Any], model: str) -> Dict[str, Any]:
    """The Structured Streaming trigger for a streaming table: `available_now` (the default: everything
    new, then the model finishes) in a `dbt run`, even for a model configured with
    `{'processing_time': '5 seconds'}`, which runs by that interval under the stream command."""
    trigger = config.get("trigger", "available_now")
    interval = trigger.get("processing_time") if isinstance(trigger, dict) and len(trigger) == 1 else None
    if not (trigger in ("available_now", {"available_now": True})
            or (isinstance(interval, str) and _INTERVAL.match(interval))):
        raise StreamingConfigError(
            f"Model '{model}': trigger={trigger!r} is not a streaming table's trigger: use 'available_now' (the "
            f"default) or {{'processing_time': '<n> seconds'}} (also milliseconds, minutes, hours), which `python -m "
            f"dbt.adapters.deltalog.stream` runs continuously (`dbt run` takes what is available and finishes).")
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    if RUNTIME.continuous is not None:
        return {"processingTime": interval or "0 seconds"}
    return {"availableNow": True}


def run_streaming_table(spark: Any, df: Any, table: Any, *, full_refresh: bool, trigger: Dict[str, Any],
                        partition_by: Optional[list], model: str,
                        report: Optional[Callable[[str], None]] = None, definition: Any = None,
                        table_schema: Optional[Dict[str, Any]] = None, changes: Any = None,
                        columns: Optional[List[str]] = None,
                        declared_schema: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Run the model's streaming DataFrame into the table until everything available is in; what it
    did: batches, rows and the table's (a `DeltaTable`) last version. `changes` (an `ApplyChanges`): the
    stream's rows are changes, applied by key (deltalog/spark/apply_changes/) instead of appended.
    `declared_schema`: the schema a new (or fully refreshed) table is created with, declaring identity,
    generated and default columns (declared_columns.py); the table is created before the first batch."""
    from deltalog.spark.operations import write_dataframe
    from deltalog.spark.connect import is_connect
    from deltalog.spark.streaming import batch_writer

    if not df.isStreaming:
        raise StreamingConfigError(
            f"Model '{model}': a streaming_table reads a stream — select from {{{{ stream_files(...) }}}} (or return "
            f"a streaming DataFrame from a Python model); this model's query reads no stream. Use "
            f"materialized='table' or 'incremental' for a batch query.")
    table_uri = table.uri
    checkpoint_root = fs.join(table_uri, CHECKPOINT_DIR)
    if fs.is_object_store_uri(table_uri):
        from deltalog.spark.hadoop import connector

        found, why = connector(spark, table_uri)
        if found is None:  # Spark writes the streaming checkpoint through its own Hadoop file system
            raise StreamingConfigError(
                f"Model '{model}': its streaming checkpoint goes beside the table at {checkpoint_root}, which "
                f"Spark writes through its Hadoop connector: {why}. Add the connector (spark.jars.packages), "
                f"or keep streaming tables on a local warehouse.")
    if full_refresh:
        _start_over(checkpoint_root)
    app_id = _app_id(checkpoint_root)
    # the model's table properties (auto_compact, ...), comments and constraints go with every batch
    write = batch_writer(table, app_id, partition_by=partition_by or None, definition=definition,
                         table_schema=table_schema)
    stats = {"batches": 0, "rows": 0}
    replaced = {"done": not full_refresh}

    def table_replaced() -> None:
        if not replaced["done"]:
            replaced["done"] = True
            fs.delete_file(fs.join(checkpoint_root, REFRESH_PENDING))  # (only a full refresh starts not done)
    applier = None
    if changes is not None:
        from deltalog.spark.apply_changes import change_applier

        applier = change_applier(table, changes, app_id, df.columns, replace=full_refresh, where=f"Model '{model}'",
                                 columns=columns, partition_by=partition_by or None, definition=definition,
                                 table_schema=table_schema)
    empty_rows = applier.empty_rows(df) if applier is not None else spark.createDataFrame([], df.schema)
    if declared_schema is not None and applier is None:
        # created empty with its declarations, so every batch (the first too) appends under them
        write_dataframe(empty_rows, table, mode="overwrite", schema_mode="overwrite" if table.exists() else None,
                        partition_by=partition_by or None, definition=definition, table_schema=declared_schema)
        table_replaced()

    def sink(batch: Any, batch_id: int) -> None:
        if applier is not None:  # (a full refresh: its first batch replaces the table and its state)
            applier(batch, batch_id)
            table_replaced()
        elif not replaced["done"]:  # --full-refresh: the first batch replaces the table
            write_dataframe(batch, table, mode="overwrite", schema_mode="overwrite", txn_app_id=app_id,
                            txn_version=int(batch_id), partition_by=partition_by or None, definition=definition)
            table_replaced()
        else:
            write(batch, batch_id)
        stats["batches"] += 1

    checkpoint = fs.join(checkpoint_root, STREAM_CHECKPOINT)
    if "availableNow" not in trigger:  # the stream command: start, and leave it running
        if not table.exists():  # downstream streams read this table from its start: it exists first
            write_dataframe(empty_rows, table, mode="overwrite", partition_by=partition_by or None,
                            definition=definition, configuration=applier and applier.configuration())
        if applier is not None:
            applier.warm_up(df)
        query = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(**trigger).start()
        from dbt.adapters.deltalog.runtime.session import RUNTIME

        RUNTIME.continuous.queries.append((model, query, report or (lambda message: None)))
        return {"batches": 0, "rows": 0, "version": table.version(), "started": True}
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(**trigger).start()
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise query.exception()
    exists = table.exists()
    if not exists or not replaced["done"]:
        # no data yet (or none since a full refresh): the table exists, empty, with the stream's columns
        write_dataframe(empty_rows, table, mode="overwrite", schema_mode="overwrite" if exists else None,
                        partition_by=partition_by or None, definition=definition,
                        configuration=applier and applier.configuration())
        if applier is not None:  # the table starts again: so does what it remembered of its changes
            fs.delete_tree(applier.state.uri)
        table_replaced()
    snapshot = table.snapshot()
    progress = list(query.recentProgress or [])
    stats["rows"] = sum(progress_value(p, "numInputRows", 0) for p in progress)
    if is_connect(spark):  # the sink ran in the server's Python, counting there: one report per batch
        stats["batches"] = sum(1 for p in progress if progress_value(p, "numInputRows", 0) > 0)
    stats["version"] = snapshot.version
    return stats


def progress_value(progress: Any, key: str, default: int) -> int:
    """A number of a streaming query's progress report: an attribute of Spark's StreamingQueryProgress
    (a Spark Connect client's dict view of it lacks some keys), a key of an older pyspark's dict."""
    value = getattr(progress, key, None)
    if value is None and hasattr(progress, "get"):
        value = progress.get(key)
    return default if value is None else int(value)


def refresh_pending(table_uri: str) -> bool:
    """A `--full-refresh` of the streaming table at `table_uri` began and has not replaced the table yet."""
    return fs.exists(fs.join(table_uri, CHECKPOINT_DIR, REFRESH_PENDING))


def _start_over(checkpoint_root: str) -> None:
    """`--full-refresh`: the stream's checkpoint and app id forgotten, the refresh marked first. Until the
    table is replaced it still holds the rows the old checkpoint took; a run that stops before (a crash, a
    failed first batch) leaves the mark, and the next run refreshes again instead of taking the whole
    input once more on top of those rows."""
    fs.write_bytes(fs.join(checkpoint_root, REFRESH_PENDING), b"")
    fs.delete_tree(fs.join(checkpoint_root, STREAM_CHECKPOINT))
    fs.delete_file(fs.join(checkpoint_root, APP_ID_FILE))


def _app_id(checkpoint_root: str) -> str:
    """The app id of this streaming checkpoint: made when the checkpoint is, kept in it."""
    where = fs.join(checkpoint_root, APP_ID_FILE)
    if fs.exists(where):
        return fs.read_bytes(where).decode().strip()
    app_id = f"dbt-streaming-{uuid.uuid4()}"
    fs.write_bytes(where, app_id.encode())  # (a local folder is made on the way)
    return app_id
