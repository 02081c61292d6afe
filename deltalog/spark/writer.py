"""DataFrame -> Parquet data files of a Delta table, plus their `add` actions (with stats).

Executors write the data files; the driver only collects small descriptions of them and writes the log.
Two ways, same result:

- `native` (default): Spark's own Parquet writer into a staging folder inside the table, then each file's
  statistics come from its Parquet footer (no data is read again) and the file is moved to its final
  `col=value/` folder. This costs the same as `df.write.parquet` plus a footer read per file. On an
  object store (no rename there), where Spark has the scheme's Hadoop connector, the jar's
  DirectCommitProtocol has each task write its files at their final keys and name them to the driver,
  which reads exactly those footers; without a connector, the arrow way below.
- `arrow`: `mapInArrow` on the executors, writing with pyarrow and accumulating the statistics from the
  record batches as they stream past. Works without a shared staging rename, but pays for Spark's
  row-to-Arrow conversion (about 1.2x the native write).

`bench/spark_write.py` measures both against `df.write.parquet`.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Sequence
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, Observation, functions as F
from pyspark.sql.types import StructType

from .. import identity
from ..actions import AddFile
from ..column_mapping import (is_mapped, mode_of, physical_names, physical_schema, physical_stats_configuration,
                              with_arrow_field_ids)
from ..column_defaults import column_defaults
from ..constraints import table_constraints
from ..generated_columns import generated_columns
from ..errors import DeltaError, IncompleteWriteError, InvalidTableError, SchemaMismatchError
from ..storage.files import (arrow_filesystem, delete_file, is_object_store_uri, join, parquet_metadata, table_path_from_uri,
                          task_storage_options)
from ..paths import (
    decode_path, encode_path, new_data_file_path, parse_partition_folder, parse_partition_value, partition_folder,
    serialize_partition_value,
)
from ..schema import partition_column_types, uses_type, without_columns
from ..sql_text import quote_identifier
from ..stats import StatsCollector
from . import hadoop, session_settings
from .embedded import jar_class

log = logging.getLogger(__name__)

def target_file_size(snapshot: Any, max_file_size: int | None = None) -> int:
    """The size files are written up to (OPTIMIZE compacts toward it; merge-on-read fills files of it):
    `max_file_size` when given, else the table's (TableConfiguration.target_file_size)."""
    if max_file_size is not None:
        return int(max_file_size)
    return snapshot.table_configuration.target_file_size


STAGING_DIR = "_delta_staging"
DIRECT_WRITE_OPTION = "deltalog.direct.write.id"  # DirectCommitProtocol.WRITE_ID
_FOOTER_THREADS = 8
# A dictionary that saves less than this share of a fixed-width column's plain size is not worth
# building: for 8-byte values, about half of them distinct.
DICTIONARY_MIN_SAVING = 0.25
_FIXED_WIDTHS = {"INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8, "INT96": 12}


def dictionary_free_columns(paths: Sequence[str], storage_options: Any = None, max_files: int = 8) -> list[str]:
    """Top-level fixed-width columns (numbers, dates, timestamps) whose dictionary, in these Parquet
    files, saved less than DICTIONARY_MIN_SAVING of their plain size: mostly distinct values. Spark's
    Parquet writer builds a dictionary for every column and gives up only once it outgrows a page, so
    rewriting such columns (OPTIMIZE) is faster without one and no bigger. Reads up to `max_files`
    footers, spread over `paths`; names as the files spell them."""
    if not paths:
        return []
    step = max(1, len(paths) // max_files)
    sizes: dict[str, list[int]] = {}  # column -> [stored bytes, plain bytes]
    for path in list(paths)[::step][:max_files]:
        try:
            meta = parquet_metadata(path, storage_options)
        except (OSError, pa.ArrowException):
            continue  # only a hint: the read of the file itself reports what is wrong with it
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for i in range(group.num_columns):
                chunk = group.column(i)
                width = _FIXED_WIDTHS.get(chunk.physical_type)
                if chunk.physical_type == "FIXED_LEN_BYTE_ARRAY":
                    width = meta.schema.column(i).length
                if not width or "." in chunk.path_in_schema:
                    continue
                stats = chunk.statistics
                nulls = stats.null_count if stats is not None and stats.has_null_count else 0
                entry = sizes.setdefault(chunk.path_in_schema, [0, 0])
                entry[0] += chunk.total_uncompressed_size
                entry[1] += (chunk.num_values - nulls) * width
    return [c for c, (stored, plain) in sizes.items() if plain and stored >= (1 - DICTIONARY_MIN_SAVING) * plain]


def spark_schema(schema_json: dict[str, Any]) -> StructType:
    """The Spark StructType of a Delta schema (the same JSON)."""
    return StructType.fromJson(schema_json)


def cast_by_name(value: Any, stored: Any, wanted: Any) -> Any:
    """`value`, a column of type `stored`, as type `wanted`, struct fields matched by name ignoring case
    at any depth (inside arrays and maps too): fields `stored` lacks are NULL, and a NULL struct stays
    NULL. Spark's own cast matches struct fields by position, which would put one field's values into
    another when the data spells its fields in another order."""
    from pyspark.sql.types import ArrayType, DataType, MapType

    if isinstance(stored, dict) or isinstance(stored, str):
        stored = StructType.fromJson({"type": "struct", "fields": [
            {"name": "x", "type": stored, "nullable": True, "metadata": {}}]}).fields[0].dataType
    if isinstance(wanted, dict) or isinstance(wanted, str):
        wanted = StructType.fromJson({"type": "struct", "fields": [
            {"name": "x", "type": wanted, "nullable": True, "metadata": {}}]}).fields[0].dataType
    assert isinstance(stored, DataType) and isinstance(wanted, DataType)
    if stored == wanted:
        return value
    if isinstance(stored, StructType) and isinstance(wanted, StructType):
        old = {f.name.lower(): f for f in stored.fields}
        parts = [cast_by_name(value.getField(old[f.name.lower()].name), old[f.name.lower()].dataType,
                              f.dataType).alias(f.name)
                 if f.name.lower() in old else F.lit(None).cast(f.dataType).alias(f.name)
                 for f in wanted.fields]
        return F.when(value.isNull(), F.lit(None).cast(wanted)).otherwise(F.struct(*parts))
    if isinstance(stored, ArrayType) and isinstance(wanted, ArrayType):
        return F.transform(value, lambda x: cast_by_name(x, stored.elementType, wanted.elementType))
    if isinstance(stored, MapType) and isinstance(wanted, MapType):
        if stored.keyType != wanted.keyType:
            value = F.transform_keys(value, lambda k, _: cast_by_name(k, stored.keyType, wanted.keyType))
        return F.transform_values(value, lambda _, v: cast_by_name(v, stored.valueType, wanted.valueType))
    return value.cast(wanted)


def conform_dataframe(df: DataFrame, schema_json: dict[str, Any], table: str) -> DataFrame:
    """The DataFrame with exactly the table's columns, in its order and with its types (casts where the
    types differ); a missing column is an error naming it, an extra one too."""
    target = spark_schema(schema_json)
    by_lower = {f.name.lower(): f for f in df.schema.fields}
    missing = [f.name for f in target.fields if f.name.lower() not in by_lower]
    wanted = {f.name.lower() for f in target.fields}
    extra = [f.name for f in df.schema.fields if f.name.lower() not in wanted]
    if missing or extra:
        raise SchemaMismatchError(
            f"{table}: the data's columns do not match the table schema"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; not in the table: {', '.join(extra)}" if extra else "")
            + ". Select the table's columns, or write with schema_mode='merge' / 'overwrite'.")
    cols = []
    for f in target.fields:
        src = by_lower[f.name.lower()]
        c = F.col(quote_identifier(src.name))
        if src.dataType != f.dataType:
            c = cast_by_name(c, src.dataType, f.dataType)
        if not f.nullable:
            # A NOT NULL column is an invariant writers must honour; checked while writing, no extra pass.
            c = F.when(c.isNull(), F.raise_error(F.lit(
                f"{table}: NULL value in column '{f.name}', which the table declares NOT NULL; nothing was "
                f"committed. Filter or fill the nulls before writing."))).otherwise(c)
        cols.append(c.alias(f.name) if src.name != f.name or src.dataType != f.dataType or not f.nullable else c)
    return df.select(*cols)


def enforce_constraints(df: DataFrame, schema_json: dict[str, Any], configuration: dict[str, str],
                        table: str) -> DataFrame:
    """`df` (already in the table's columns) with the table's CHECK constraints and invariants checked
    on every row as it is written: the first violating row fails the write with a message naming the
    constraint and the row, so nothing is committed. No extra pass: the check guards the first column's
    value, so the optimizer cannot drop it."""
    declared = table_constraints(configuration, schema_json)
    if not declared or not df.columns:
        return df
    row_json = F.to_json(F.struct(*[F.col(quote_identifier(c)) for c in df.columns]), {"ignoreNullFields": "false"})
    first = df.columns[0]
    guarded = None
    for c in declared:
        try:
            holds = F.expr(c.expression)
            df.select(holds).schema  # analysis only: a bad expression fails here, named
        except Exception as e:
            raise InvalidTableError(
                f"{table}: {c.describe()} cannot be evaluated on the table's columns "
                f"({', '.join(df.columns)}): {str(e).splitlines()[0]}. Nothing was committed.") from None
        message = F.concat(F.lit(f"{table}: {c.describe()} is violated by row "), row_json,
                           F.lit("; nothing was committed."))
        violated = ~F.coalesce(holds, F.lit(False))  # NULL violates, as in Delta
        guarded = (F.when(violated, F.raise_error(message)) if guarded is None
                   else guarded.when(violated, F.raise_error(message)))
    return df.select(guarded.otherwise(F.col(quote_identifier(first))).alias(first),
                     *[quote_identifier(c) for c in df.columns[1:]])


def filled_by_writer(schema_json: dict[str, Any], table: str = "", *, identity_too: bool = False) -> set[str]:
    """The columns (lower case) `write_files` fills in when the data leaves them out: generated columns
    and columns with a default; with `identity_too`, also identity columns (`write_dataframe` numbers them)."""
    out = ({g.name.lower() for g in generated_columns(schema_json)}
           | {d.name.lower() for d in column_defaults(schema_json)})
    if identity_too:
        out |= {c.name.lower() for c in identity.identity_columns(schema_json, table)}
    return out


def with_column_defaults(df: DataFrame, schema_json: dict[str, Any], table: str) -> DataFrame:
    """`df` with each column that has a default (CURRENT_DEFAULT) and that the data leaves out set to its
    default, as the table's type."""
    have = {c.lower() for c in df.columns}
    for d in column_defaults(schema_json):
        if d.name.lower() in have:
            continue
        wanted = spark_schema({"type": "struct", "fields": [
            {"name": d.name, "type": d.type, "nullable": True, "metadata": {}}]}).fields[0].dataType
        try:
            value = F.expr(d.expression).cast(wanted)
            df = df.withColumn(d.name, value)
            df.schema  # analysis only: a bad default fails here, named
        except Exception as e:
            raise InvalidTableError(
                f"{table}: the {d.describe()} cannot be evaluated as {wanted.simpleString()}: "
                f"{str(e).splitlines()[0]}. Nothing was committed.") from None
    return df


def with_generated_columns(df: DataFrame, schema_json: dict[str, Any], table: str) -> DataFrame:
    """`df` with the table's generated columns: one the data leaves out is computed from the row; one it
    gives is checked on every row as it is written (NULL-safe equality, Delta's rule): the first row
    that disagrees fails the write naming the table, the column, the expression and the row, so nothing
    is committed. No extra pass: the check is the written column's own value."""
    declared = generated_columns(schema_json)
    if not declared:
        return df
    target = spark_schema(schema_json)
    by_lower = {f.name.lower(): f for f in df.schema.fields}
    generated = {g.name.lower() for g in declared}
    if any(f.name.lower() not in by_lower for f in target.fields if f.name.lower() not in generated):
        return df  # conform_dataframe names the missing columns
    # every column as the table stores it, so the expressions read the values that will be written
    stored = []
    for f in target.fields:
        src = by_lower.get(f.name.lower())
        if src is None:
            continue
        c = F.col(quote_identifier(src.name))
        stored.append((cast_by_name(c, src.dataType, f.dataType) if src.dataType != f.dataType else c).alias(f.name))
    wanted = {f.name.lower() for f in target.fields}
    extra = [F.col(quote_identifier(f.name)) for f in df.schema.fields if f.name.lower() not in wanted]
    df = df.select(*stored, *extra)
    row_json = F.to_json(F.struct(*[F.col(quote_identifier(f.name)) for f in target.fields
                                    if f.name.lower() not in generated or f.name.lower() in by_lower]),
                         {"ignoreNullFields": "false"})
    values = {}
    for g in declared:
        column_type = target[g.name].dataType
        try:
            value = F.expr(g.expression).cast(column_type)
            df.select(value).schema  # analysis only: an expression Spark cannot resolve fails here, named
        except Exception as e:
            raise InvalidTableError(
                f"{table}: {g.describe()} cannot be evaluated on the table's columns "
                f"({', '.join(f.name for f in target.fields)}): {str(e).splitlines()[0]}. "
                f"Nothing was committed.") from None
        if g.name.lower() not in by_lower:
            values[g.name.lower()] = value.alias(g.name)
            continue
        given = F.col(quote_identifier(g.name))
        message = F.concat(
            F.lit(f"{table}: column {g.name} is generated as {g.expression}, and row "), row_json,
            F.lit(" gives "), F.coalesce(given.cast("string"), F.lit("NULL")), F.lit(" where the expression gives "),
            F.coalesce(value.cast("string"), F.lit("NULL")),
            F.lit(". Leave the column out to have it computed, or give the expression's value. Nothing was committed."))
        values[g.name.lower()] = F.when(~given.eqNullSafe(value), F.raise_error(message)).otherwise(given).alias(g.name)
    out = [values.get(f.name.lower(), F.col(quote_identifier(f.name))) for f in target.fields
           if f.name.lower() in by_lower or f.name.lower() in values]
    return df.select(*out, *[F.col(quote_identifier(f.name)) for f in df.schema.fields
                             if f.name.lower() not in wanted])


def write_files(df: DataFrame, table_uri: str, partition_columns: Sequence[str], schema_json: dict[str, Any],
                configuration: dict[str, str] | None = None, *, method: str = "native",
                conform: bool = True, store_partition_columns: bool = False,
                parquet_options: dict[str, str] | None = None, store: Any = None) -> list[AddFile]:
    """Write `df` as new data files under `table_uri` (the table's root, or a folder in it) and return
    their `add` actions (not committed). `store`: the table's `LogStore`, whose options tasks reach the
    files with (without it: those configured for `table_uri`).

    `parquet_options`: Parquet writer settings for the native method (e.g. `parquet.enable.dictionary#col`).

    `store_partition_columns`: keep the partition columns in the data files too (the table has the
    materializePartitionColumns writer feature); only the arrow method can do that.
    """
    object_store = is_object_store_uri(table_uri)
    root = str(table_uri).rstrip("/") if object_store else table_path_from_uri(table_uri)
    task_options = store.task_options() if store is not None else task_storage_options(root)
    partition_columns = list(partition_columns)
    if conform:
        df = with_column_defaults(df, schema_json, root)
        df = with_generated_columns(df, schema_json, root)
        df = conform_dataframe(df, schema_json, root)
        df = enforce_constraints(df, schema_json, configuration or {}, root)
    if method not in ("native", "arrow"):
        raise ValueError(f"unknown write method {method!r}; use 'native' or 'arrow'")
    # Delta readers need real Parquet timestamps (INT96 has no statistics and is deprecated); Spark 4
    # shreds variants by default, which needs the variantShredding feature that delta-rs and most
    # readers refuse. Only the session's settings reach Spark's Parquet writer: held for this write.
    settings = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    if uses_type(schema_json, "variant"):
        settings["spark.sql.variant.writeShredding.enabled"] = "false"
    with session_settings.held(df.sparkSession, settings):
        return _write_files(df, root, object_store, task_options, partition_columns, schema_json, configuration,
                            method, store_partition_columns, parquet_options)


def _write_files(df: DataFrame, root: str, object_store: bool, task_options: Any, partition_columns: list[str],
                 schema_json: dict[str, Any], configuration: dict[str, str] | None, method: str,
                 store_partition_columns: bool, parquet_options: dict[str, str] | None) -> list[AddFile]:
    if is_mapped(configuration):
        configuration = physical_stats_configuration(schema_json, configuration)
        df, schema_json, partition_columns = _physical_columns(df, schema_json, partition_columns, configuration)
    # Spark counts the rows as they go into the writer; the files handed back must hold exactly those.
    written = Observation(f"deltalog_write_{uuid.uuid4().hex}")
    df = df.observe(written, F.count(F.lit(1)).alias("rows"))
    keep_partitions = bool(store_partition_columns and partition_columns)
    direct = False
    if object_store and method == "native":
        # Spark's default commit renames a staging folder the driver lists: not on an object store. With
        # the scheme's Hadoop connector, Spark's writer puts each file at its final key instead
        # (DirectCommitProtocol); without one, executors write them with pyarrow.
        direct, why = hadoop.native_io(df.sparkSession, root, task_options)
        _log_once(f"{root}: data files are written at their final keys by "
                  + (f"Spark's Parquet writer; {why}" if direct else f"executors with pyarrow's file system; {why}"))
        method = "native" if direct else "arrow"
    if direct and not keep_partitions:
        adds = _write_direct(df, root, partition_columns, schema_json, configuration or {}, parquet_options,
                             task_options)
    elif method == "native" and not keep_partitions:
        adds = _write_native(df, root, partition_columns, schema_json, configuration or {}, parquet_options)
    else:
        adds = _write_arrow(df, root, partition_columns, schema_json, configuration or {},
                            keep_partitions=keep_partitions,
                            storage_options=task_options if object_store else None)
    # native: the driver found the files itself; arrow: executors report files the driver must still see
    # (a local folder may be an executor's own disk; an object store shows every writer the same keys)
    _check_rows_accounted_for(int(written.get["rows"]), adds, root,
                              check_visible=(method == "arrow" or keep_partitions) and not object_store)
    return adds


_logged: set[str] = set()
_logged_lock = threading.Lock()


def _log_once(message: str) -> None:
    """`message` logged once per process, however many threads write at once."""
    with _logged_lock:
        if message in _logged:
            return
        _logged.add(message)
    log.info(message)


def _physical_columns(df: DataFrame, schema_json: dict[str, Any], partition_columns: list[str],
                      configuration: dict[str, str]) -> tuple[DataFrame, dict[str, Any], list[str]]:
    """Under column mapping, files hold physical names at every depth (and in `id` mode Parquet field
    ids, which Spark's writer takes from the `parquet.field.id` field metadata); the partition values
    and stats of the files written then use physical names too, as the protocol asks."""
    physical = physical_schema(schema_json, mode_of(configuration))
    target = spark_schema(physical)
    df = df.select(*[F.col(quote_identifier(f["name"])).cast(p.dataType).alias(p.name, metadata=p.metadata)
                     for f, p in zip(schema_json["fields"], target.fields)])
    names = physical_names(schema_json, configuration)
    return df, physical, [names[c] for c in partition_columns]


def _check_rows_accounted_for(rows_written: int, adds: list[AddFile], root: str, check_visible: bool) -> None:
    """A write may fail, but never commit fewer rows than it wrote: compare Spark's count of the rows
    it wrote with the numRecords of the files found. On a cluster whose executors write to disks the
    driver cannot see, the files are missing here and the counts differ."""
    found = sum(a.num_records or 0 for a in adds)
    if found == rows_written and all(a.num_records is not None for a in adds):
        # executors elsewhere may have written them to their own disks: the driver must see each one
        unseen = [a for a in adds if check_visible
                  and not _has_size(os.path.join(root, decode_path(a.path)), a.size)]
        if not unseen:
            return
        found -= sum(a.num_records or 0 for a in unseen)
        adds = [a for a in adds if a not in unseen]
    for a in adds:  # not committed: nobody references them
        try:
            delete_file(join(root, decode_path(a.path)), within=root)
        except (OSError, DeltaError):
            pass
    raise IncompleteWriteError(
        f"{root}: Spark wrote {rows_written} row(s) but the data files the driver found hold {found}; "
        f"nothing was committed. The executors wrote where this driver cannot read: a warehouse on a "
        f"cluster must be storage every executor and the driver share (a network file system mounted at "
        f"the same path everywhere), not a local folder.")


# ---------------------------------------------------------------------------------------------------
# native: Spark's Parquet writer + footers


def _write_native(df: DataFrame, root: str, partition_columns: list[str], schema_json: dict[str, Any],
                  configuration: dict[str, str], parquet_options: dict[str, str] | None = None) -> list[AddFile]:
    spark = df.sparkSession
    staging = os.path.join(root, STAGING_DIR, str(uuid.uuid4()))
    try:
        _parquet_writer(df, partition_columns, parquet_options).mode("error").parquet(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    session_tz = _session_time_zone(spark)
    types = partition_column_types(schema_json, partition_columns, root)
    files = []
    for dirpath, _, names in os.walk(staging):
        for name in names:
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                files.append(os.path.join(dirpath, name))
    try:
        with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, max(len(files), 1))) as pool:
            adds = list(pool.map(
                lambda f: _adopt_staged_file(f, staging, root, partition_columns, types, schema_json,
                                             configuration, session_tz), files))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            os.rmdir(os.path.join(root, STAGING_DIR))
        except OSError:
            pass  # another writer's staging folder is still there
    adds = [a for a in adds if a is not None]
    _fsync_dirs(root, [decode_path(a.path) for a in adds])
    return adds


def _parquet_writer(df: DataFrame, partition_columns: list[str], parquet_options: dict[str, str] | None) -> Any:
    writer = df.write.option("compression", "snappy")  # (the session's settings: write_files holds them)
    for key, value in (parquet_options or {}).items():
        writer = writer.option(key, value)
    return writer.partitionBy(*partition_columns) if partition_columns else writer


def _write_direct(df: DataFrame, root: str, partition_columns: list[str], schema_json: dict[str, Any],
                  configuration: dict[str, str], parquet_options: dict[str, str] | None = None,
                  storage_options: dict[str, str] | None = None) -> list[AddFile]:
    """Spark's Parquet writer on an object store, through the jar's DirectCommitProtocol: executors write
    each file at its final key and name it in their task's commit message; the driver reads the footers
    of exactly those files (no listing, no rename)."""
    spark = df.sparkSession
    protocol = jar_class(spark, hadoop.DIRECT_COMMIT_PROTOCOL)
    write_id = uuid.uuid4().hex
    try:
        with _direct_commit_protocol(spark):
            (_parquet_writer(df, partition_columns, parquet_options).mode("append")
             .option(DIRECT_WRITE_OPTION, write_id).parquet(root))
    finally:
        relatives = protocol.take(write_id)  # None when the job failed: its files are named by no version
    if relatives is None:
        raise IncompleteWriteError(f"{root}: Spark's write finished without committing its job; nothing was "
                                   f"committed to the table.")
    session_tz = _session_time_zone(spark)
    types = partition_column_types(schema_json, partition_columns, root)

    def describe(relative: str) -> AddFile | None:
        fs, path = arrow_filesystem(join(root, relative), storage_options)
        with fs.open_input_file(path) as f:
            size = f.size()
            metadata = pq.ParquetFile(f).metadata
        if metadata.num_rows == 0:  # Spark writes one empty file for an empty unpartitioned DataFrame
            delete_file(join(root, relative), within=root)
            return None
        collector = StatsCollector(schema_json, partition_columns, configuration)
        collector.update_from_parquet_metadata(metadata)
        return AddFile(path=encode_path(relative),
                       partition_values=_spark_partition_values(relative, partition_columns, types, session_tz),
                       size=size, modification_time=int(time.time() * 1000), data_change=True,
                       stats=collector.to_json())

    with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, max(len(relatives), 1))) as pool:
        adds = list(pool.map(describe, list(relatives)))
    return [a for a in adds if a is not None]


def _direct_commit_protocol(spark: Any) -> Any:
    """Spark takes the commit protocol from the session, not from a write's options: the jar's protocol
    is held for the write (for a write without deltalog's option it is Spark's default one, so another
    write of the session meanwhile is unaffected)."""
    key = "spark.sql.sources.commitProtocolClass"
    current = spark.conf.get(key, None)
    if current and "SQLHadoopMapReduceCommitProtocol" not in current and "io.deltalog." not in current:
        _log_once(f"{key} is {current}; while deltalog writes, the session's other writes use Spark's default "
                  f"protocol")
    return session_settings.held(spark, {key: "io.deltalog." + hadoop.DIRECT_COMMIT_PROTOCOL})


def _adopt_staged_file(path: str, staging: str, root: str, partition_columns: list[str],
                       types: dict[str, str], schema_json: dict[str, Any], configuration: dict[str, str],
                       session_tz: Any) -> AddFile | None:
    metadata = pq.read_metadata(path)
    if metadata.num_rows == 0:
        return None  # Spark writes an empty file for an empty unpartitioned DataFrame
    relative = os.path.relpath(path, staging).replace(os.sep, "/")
    values = _spark_partition_values(relative, partition_columns, types, session_tz)
    collector = StatsCollector(schema_json, partition_columns, configuration)
    collector.update_from_parquet_metadata(metadata)
    final_relative = new_data_file_path(partition_folder(partition_columns, values),
                                        part=_part_number(os.path.basename(path)))
    final = os.path.join(root, final_relative)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    os.rename(path, final)
    _fsync(final)
    st = os.stat(final)
    return AddFile(path=encode_path(final_relative), partition_values=values, size=st.st_size,
                   modification_time=int(st.st_mtime * 1000), data_change=True, stats=collector.to_json())


def _spark_partition_values(relative: str, partition_columns: list[str], types: dict[str, str],
                            session_tz: Any) -> dict[str, str | None]:
    """The Delta partition values of a file Spark's writer put under `col=value/` folders."""
    spark_values = parse_partition_folder(relative)
    values: dict[str, str | None] = {}
    for c in partition_columns:
        raw = spark_values.get(c)
        if raw is not None and types[c] == "timestamp":
            # Spark spells timestamps in folders in the session time zone; Delta's value is UTC.
            local = parse_partition_value(raw, "timestamp_ntz").replace(tzinfo=session_tz)
            values[c] = serialize_partition_value(local, "timestamp")
        else:
            values[c] = serialize_partition_value(parse_partition_value(raw, types[c]), types[c]) \
                if raw is not None else None
    return values


def _session_time_zone(spark: Any) -> Any:
    try:
        return ZoneInfo(spark.conf.get("spark.sql.session.timeZone") or "UTC")
    except Exception:
        return dt.timezone.utc


def _has_size(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except OSError:
        return False


def _fsync(path: str) -> None:
    """Data files must be durable before the commit that names them is (the log store fsyncs the log)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dirs(root: str, relatives: list[str]) -> None:
    for folder in sorted({os.path.dirname(os.path.join(root, r)) for r in relatives}):
        try:
            _fsync(folder)
        except OSError:
            pass


def _part_number(name: str) -> int:
    try:
        return int(name.split("-")[1])
    except (IndexError, ValueError):
        return 0


# ---------------------------------------------------------------------------------------------------
# arrow: mapInArrow on the executors

_ADD_SCHEMA = "path string, partition_values string, size long, modification_time long, stats string"


def _write_arrow(df: DataFrame, root: str, partition_columns: list[str], schema_json: dict[str, Any],
                 configuration: dict[str, str], keep_partitions: bool = False,
                 storage_options: dict[str, str] | None = None) -> list[AddFile]:
    types = partition_column_types(schema_json, partition_columns, root)
    data_schema = schema_json if keep_partitions else without_columns(schema_json, partition_columns)
    if partition_columns:
        # Like Spark's writer: rows of one partition together, so each task keeps one file open.
        df = df.sortWithinPartitions(*[F.col(quote_identifier(c)) for c in partition_columns])
    task = _ArrowFileTask(root, partition_columns, types, data_schema, schema_json, configuration, storage_options)
    rows = df.mapInArrow(task, _ADD_SCHEMA).collect()
    return [AddFile(path=r["path"], partition_values=json.loads(r["partition_values"]), size=r["size"],
                    modification_time=r["modification_time"], data_change=True, stats=r["stats"])
            for r in rows]


class _ArrowFileTask:
    """Runs on an executor: writes the record batches of one Spark partition to data files, in a local
    folder, or (given `storage_options`, which travel in the task's closure) on an object store."""

    def __init__(self, root: str, partition_columns: list[str], types: dict[str, str],
                 data_schema: dict[str, Any], schema_json: dict[str, Any], configuration: dict[str, str],
                 storage_options: dict[str, str] | None = None):
        self.root = root
        self.storage_options = storage_options
        self.partition_columns = partition_columns
        self.types = types
        self.data_names = [f["name"] for f in data_schema["fields"]]
        # column mapping's id mode: files carry Parquet field ids (the physical schema has them)
        self.id_schema = data_schema if mode_of(configuration) == "id" else None
        self.schema_json = schema_json
        self.configuration = configuration

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current_key: tuple | None = None
        writer: pq.ParquetWriter | None = None
        collector: StatsCollector | None = None
        relative = ""
        values: dict[str, str | None] = {}
        done: list[dict[str, Any]] = []
        part = 0

        sink = None

        def close() -> None:
            nonlocal writer, sink
            if writer is None:
                return
            writer.close()
            writer = None
            if sink is not None:  # an object store: the object exists once its stream is closed
                size = sink.tell()
                sink.close()
                sink = None
                mtime = int(time.time() * 1000)
            else:
                full = os.path.join(self.root, relative)
                _fsync(full)
                _fsync_dirs(self.root, [relative])
                st = os.stat(full)
                size, mtime = st.st_size, int(st.st_mtime * 1000)
            done.append({"path": encode_path(relative), "partition_values": json.dumps(values),
                         "size": size, "modification_time": mtime, "stats": collector.to_json()})

        for batch in batches:
            if batch.num_rows == 0:
                continue
            for key, chunk in self._runs(batch):
                if writer is None or key != current_key:
                    close()
                    current_key = key
                    values = {c: serialize_partition_value(v, self.types[c])
                              for c, v in zip(self.partition_columns, key)}
                    relative = new_data_file_path(partition_folder(self.partition_columns, values), part)
                    part += 1
                    data = self._data(chunk)
                    if self.storage_options is not None:
                        fs, path = arrow_filesystem(join(self.root, relative), self.storage_options)
                        full = sink = fs.open_output_stream(path)
                    else:
                        full = os.path.join(self.root, relative)
                        os.makedirs(os.path.dirname(full), exist_ok=True)
                    writer = pq.ParquetWriter(full, data.schema, compression="snappy",
                                              coerce_timestamps="us", allow_truncated_timestamps=True)
                    collector = StatsCollector(self.schema_json, self.partition_columns, self.configuration)
                else:
                    data = self._data(chunk)
                writer.write_batch(data)
                collector.update(data)
        close()
        if done:
            yield pa.RecordBatch.from_pylist(done, schema=pa.schema([
                ("path", pa.string()), ("partition_values", pa.string()), ("size", pa.int64()),
                ("modification_time", pa.int64()), ("stats", pa.string())]))

    def _data(self, chunk: pa.RecordBatch) -> pa.RecordBatch:
        data = chunk.select(self.data_names)
        if self.id_schema is None:
            return data
        return pa.RecordBatch.from_arrays(data.columns, schema=with_arrow_field_ids(data.schema, self.id_schema))

    def _runs(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple, pa.RecordBatch]]:
        """(partition key, rows) for each run of equal partition values in a (sorted) batch."""
        if not self.partition_columns:
            yield (), batch
            return
        n = batch.num_rows
        change = None
        for c in self.partition_columns:
            arr = batch.column(c)
            prev, cur = arr.slice(0, n - 1), arr.slice(1)
            differs = pc.or_(pc.fill_null(pc.not_equal(prev, cur), False),
                             pc.xor(pc.is_null(prev), pc.is_null(cur)))
            change = differs if change is None else pc.or_(change, differs)
        starts = [0] + [i + 1 for i in pc.indices_nonzero(change).to_pylist()] if n > 1 else [0]
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else n
            key = tuple(batch.column(c)[start].as_py() for c in self.partition_columns)
            yield key, batch.slice(start, end - start)


# ---------------------------------------------------------------------------------------------------
# identity columns: values for the rows of a write that leaves them out (deltalog/identity.py has the rules)


class IdentityNumbering:
    """The identity values a Spark write gives its rows, seen by an Observation as the rows are written:
    after the write, `generated(files)` says what was numbered (for `Transaction.record_identity`)."""

    def __init__(self, numbered: list[tuple[identity.IdentityColumn, int]], observation: Observation, table: str):
        self.numbered = numbered
        self.observation = observation
        self.table = table

    def generated(self, files: Iterable[str], rebasable: bool = True) -> list[identity.GeneratedValues]:
        seen = self.observation.get
        files = frozenset(files)
        out = []
        for k, (column, first) in enumerate(self.numbered):
            last = identity.checked_range(column, first, seen[f"low{k}"], seen[f"high{k}"], seen["rows"], self.table)
            out.append(identity.GeneratedValues(column, first, last, files, rebasable))
        return out


# Data up to this size (Spark's estimate) is numbered in one task: dense values, one file's worth of rows.
IDENTITY_ONE_TASK_BYTES = 64 << 20
# Without an estimate (rows made in Python, Spark Connect), data of at most this many rows (counted with a
# LIMIT, which stops there) is numbered in one task too.
IDENTITY_ONE_TASK_ROWS = 100_000


def _estimated_bytes(df: DataFrame) -> float:
    """Spark's estimate of the DataFrame's size (classic sessions), else infinity (Spark Connect has no
    estimate to ask for)."""
    try:
        return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:
        return float("inf")


def _small(df: DataFrame) -> bool:
    """Whether `df` is small enough to be numbered in one task: by Spark's estimate, or, without one, by
    counting at most IDENTITY_ONE_TASK_ROWS + 1 of its rows."""
    estimate = _estimated_bytes(df)
    if estimate != float("inf") and estimate < (1 << 62):
        return estimate <= IDENTITY_ONE_TASK_BYTES
    return df.limit(IDENTITY_ONE_TASK_ROWS + 1).count() <= IDENTITY_ONE_TASK_ROWS


def number_identity_columns(df: DataFrame, schema_json: dict[str, Any], table: str,
                            left_out: Iterable[str] | None = None, *,
                            own_rows: bool = False) -> tuple[DataFrame, IdentityNumbering | None]:
    """`df` with a value for each identity column it leaves out (or, given `left_out`, for those columns,
    whose values in `df` are placeholders); a `generated always` column it gives is refused by name,
    unless `own_rows`: the rows are the table's own, rewritten (an UPDATE), and keep their values.

    Values are `first + step * monotonically_increasing_id()`, `first` the first value past the mark:
    dense within each Spark task, tasks 2^33 steps apart; small data (`_small`) is numbered in one task,
    so densely (1, 2, 3, ...). delta-spark interleaves
    the tasks instead (value = first + step * (task + tasks * row)), which needs the number of tasks
    inside each one; a plain column expression works the same on Spark Connect, costs no extra pass, and
    still gives unique values, monotone in step's direction, past the mark."""
    columns = identity.identity_columns(schema_json, table)
    if not columns:
        return df, None
    have = {c.lower() for c in df.columns}
    wanted = None if left_out is None else {c.lower() for c in left_out}
    if any(c.name.lower() not in have if wanted is None else c.name.lower() in wanted for c in columns) \
            and _small(df):
        df = df.coalesce(1)  # before numbering: values come from the task that computes the rows
    numbered = []
    for column in columns:
        leaves_out = column.name.lower() not in have if wanted is None else column.name.lower() in wanted
        if not leaves_out:
            if not own_rows:
                column.refuse_given_values(table)
            continue
        first = column.first_value
        df = df.withColumn(column.name, (F.lit(first).cast("long")
                                         + F.lit(column.step).cast("long") * F.monotonically_increasing_id()))
        numbered.append((column, first))
    if not numbered:
        return df, None
    seen = Observation(f"deltalog_identity_{uuid.uuid4().hex}")
    aggregates = [F.count(F.lit(1)).alias("rows")]
    for k, (column, _) in enumerate(numbered):
        value = F.col(quote_identifier(column.name))
        aggregates += [F.min(value).alias(f"low{k}"), F.max(value).alias(f"high{k}")]
    return df.observe(seen, *aggregates), IdentityNumbering(numbered, seen, table)
