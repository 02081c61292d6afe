"""`write_dataframe`: create / append / overwrite / replaceWhere / dynamic partition overwrite, one commit."""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Sequence

import pyarrow as pa
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import StructType

from ...actions import AddFile, Metadata, RemoveFile
from ...errors import DeltaError, InvalidTableError, SchemaMismatchError
from ...column_defaults import DEFAULT_KEY
from ...column_mapping import physical_names
from ...schema import check_column_names, nullable_type, quote_identifier, schema_string, to_arrow_schema
from ...schema_evolution import check_append_schema
from ...write_plan import WritePlan, partition_names
from ...definition import TableDefinition
from ...table import DeltaTable, as_table, new_metadata
from ...transaction import rearranged_only, reruns_after_conflict
from .. import auto_compact
from ..writer import filled_by_writer, number_identity_columns, with_column_defaults, with_generated_columns, write_files
from .files import byte_count, removes_of, set_transactions, sum_records, target_files_read
from .alter import check_existing_rows, metadata_differs
from .delete import DeletePlan, delete_plan, deleted_rows_changes, write_kept_rows

log = logging.getLogger(__name__)


_SPARK_MODE = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists",
               "errorifexists": "ErrorIfExists", "ignore": "Ignore"}


def _plain_fields(t: Any) -> Any:
    """A type without the field metadata a table declares for itself (comments, `delta.*` such as
    invariants): a new table must not inherit them from the tables its data was read from."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return {**t, "fields": [
                {**f, "type": _plain_fields(f["type"]),
                 "metadata": {k: v for k, v in (f.get("metadata") or {}).items()
                              if k not in ("comment", DEFAULT_KEY, "EXISTS_DEFAULT") and not k.startswith("delta.")}}
                for f in t["fields"]]}
        if kind == "array":
            return {**t, "elementType": _plain_fields(t["elementType"])}
        if kind == "map":
            return {**t, "keyType": _plain_fields(t["keyType"]), "valueType": _plain_fields(t["valueType"])}
    return t


def dataframe_schema(df: DataFrame, table: str) -> dict[str, Any]:
    """The Delta schema of a DataFrame: all nullable, names unique ignoring case, types Delta has, and
    no field metadata a table declares for itself."""
    schema_json = _plain_fields(nullable_type(json.loads(df.schema.json())))
    check_column_names(schema_json, table)
    void = [f["name"] for f in schema_json["fields"] if f["type"] == "void"]
    if void:
        raise SchemaMismatchError(
            f"{table}: column(s) {', '.join(repr(v) for v in void)} have no type (a bare NULL); Delta needs a "
            f"type for every column: cast them, e.g. cast(null as string).")
    try:
        to_arrow_schema(schema_json)
    except DeltaError as e:
        raise SchemaMismatchError(f"{table}: {e}") from None
    return schema_json


def _refuse_rows_outside(df: DataFrame, predicate: str, table: str) -> DataFrame:
    """The rows, failing the write at the first row outside the replace-where predicate (as Delta's
    replaceWhere constraint check does): such a row would survive beside the rows it should replace.
    Checked as the rows are written, not in a pass of its own."""
    outside = ~F.coalesce(F.expr(predicate), F.lit(False))
    row = F.to_json(F.struct(*[F.col(quote_identifier(c)) for c in df.columns]))
    message = F.concat(F.lit(f"{table}: rows written with replace-where predicate {predicate!r} must "
                             f"satisfy it, and this one does not: "), row,
                       F.lit(". Filter the data to the predicate, or widen the predicate. Nothing was committed."))
    first = df.columns[0]
    checked = F.when(outside, F.raise_error(message)).otherwise(F.col(quote_identifier(first)))
    return df.select(checked.alias(first), *[F.col(quote_identifier(c)) for c in df.columns[1:]])


def _fill_missing(df: DataFrame, schema_json: dict[str, Any]) -> DataFrame:
    """Add the table's columns that the DataFrame lacks, as nulls (then writer.conform orders/casts);
    generated columns and columns with a default are left to the writer, which computes them."""
    have = {c.lower() for c in df.columns} | filled_by_writer(schema_json)
    target = StructType.fromJson(schema_json)
    for f in target.fields:
        if f.name.lower() not in have:
            df = df.withColumn(f.name, F.lit(None).cast(f.dataType))
    return df


def _type_void_columns(df: DataFrame, schema_json: dict[str, Any]) -> DataFrame:
    """Columns of NULL literals (Spark's void type) take the table's type for that column."""
    target = StructType.fromJson(schema_json)
    by_lower = {f.name.lower(): f for f in target.fields}
    for f in df.schema.fields:
        if f.dataType.typeName() == "void" and f.name.lower() in by_lower:
            df = df.withColumn(f.name, F.col(quote_identifier(f.name)).cast(by_lower[f.name.lower()].dataType))
    return df


@reruns_after_conflict(rearranged_only)
def write_dataframe(df: DataFrame, table: DeltaTable | str, mode: str = "append", partition_by: Sequence[str] | str | None = None,
                    replace_where: str | None = None, overwrite_partitions: bool = False,
                    schema_mode: str | None = None, configuration: dict[str, str] | None = None,
                    operation: str | None = None, operation_parameters: dict[str, Any] | None = None,
                    user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
                    method: str = "native", table_schema: dict[str, Any] | None = None,
                    definition: TableDefinition | None = None,
                    app_transactions: dict[str, int] | None = None,
                    read_version: int | None = None, txn_app_id: str | None = None,
                    txn_version: int | None = None, own_rows: bool = False) -> int | None:
    """Write a DataFrame to a Delta table in one commit (creating the table as version 0 when absent).

    mode: 'append' (a blind append), 'overwrite' (remove all live files, add the new ones; history is
    kept), 'error' (the table must not exist), 'ignore' (do nothing when it exists).
    replace_where: with mode='overwrite', only the table's rows matching this SQL predicate are replaced.
    overwrite_partitions: with mode='overwrite', replace only the partitions present in `df`.
    schema_mode: 'merge' adds the data's new columns; 'overwrite' (with mode='overwrite') replaces the
    schema and partitioning.
    table_schema: the existing table's schema after this write (columns added or dropped, e.g. by dbt's
    on_schema_change), committed in the same commit as the data: a failed write changes nothing. For a
    new table, or with schema_mode='overwrite', the table's schema (the data's columns must be among its
    columns; field metadata such as identity or generated columns is kept).
    definition: properties, description, comments, NOT NULL columns and CHECK constraints the table
    gets in this same commit (version 0 included); rows the write keeps must satisfy new constraints.
    app_transactions: {appId: version} recorded in the same commit (`txn` actions): what this write
    consumed, so that a rerun after a crash neither skips nor repeats it.
    own_rows: `df` is the table's own rows, rewritten (an UPDATE): they keep their identity values, even
    in a `generated always` column.
    read_version: the version of this table `df` was computed from (it reads the table it writes): the
    commit is made against that version (an overwrite removes exactly its files) and is checked, as a
    read of the whole table, against every commit landed since: none is overwritten unseen.
    txn_app_id, txn_version: an idempotent write, as delta-spark's options of these names: when the table
    already records `txn_version` or a later one for `txn_app_id`, nothing is written (None); otherwise
    the commit records it. A concurrent commit of the same app id is a ConcurrentTransactionException.
    """
    table = as_table(table)
    plan = WritePlan.of(table.uri, mode, partition_by, replace_where, overwrite_partitions, schema_mode,
                        txn_app_id, txn_version)
    txn = table.transaction(read_version=read_version)
    if read_version is not None and txn.snapshot is not None:
        txn.read_whole_table()  # `df` read the table: what it read is not known file by file
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    if plan.app_transaction is not None:
        app_id, app_version = plan.app_transaction
        done = txn.read_app_transaction(app_id)
        if done is not None and done >= app_version:
            log.info("%s: %s version %d is committed already (the table records %d); nothing written",
                     table.uri, app_id, app_version, done)
            return None
        app_transactions = {**(app_transactions or {}), app_id: app_version}
    with txn.staging():
        name = table.uri
        snapshot = txn.snapshot
        if snapshot is not None and plan.mode in ("error", "errorifexists"):
            raise InvalidTableError(
                f"{name}: a Delta table already exists here (version {snapshot.version}); use mode='append' "
                f"or 'overwrite'.")
        if snapshot is not None and plan.mode == "ignore":
            return None
        if snapshot is not None and plan.schema_mode != "overwrite":
            df = _type_void_columns(df, snapshot.schema_json)
        data_schema = dataframe_schema(df, name)
        if table_schema is not None and (snapshot is None or plan.replaces_schema):
            # a new (or replaced) table the caller declared: its columns (in its order, with their field
            # metadata: identity, generated, defaults); those the data leaves out are filled in below
            check_append_schema(name, table_schema, data_schema)
            data_schema = table_schema
        params: dict[str, Any] = {"mode": _SPARK_MODE[plan.mode]}
        started = time.time()

        parts, remove = _table_metadata(txn, plan, df, data_schema, configuration, table_schema, definition, params)
        schema_json, conf = txn.metadata.schema_json, dict(txn.metadata.configuration)
        params["partitionBy"] = json.dumps(parts)

        df, numbering = number_identity_columns(df, schema_json, name, own_rows=own_rows)
        df = _fill_missing(df, schema_json)
        if plan.replace_where and snapshot is not None:
            # the predicate may name a column the writer fills in (a generated partition column)
            df = with_generated_columns(with_column_defaults(df, schema_json, name), schema_json, name)
            df = _refuse_rows_outside(df, plan.replace_where, name)
        materialize = bool(txn.protocol and txn.protocol.stores_partition_columns)
        adds = txn.stage(write_files(df, name, parts, schema_json, conf, method=method,
                                     store_partition_columns=materialize, store=txn.store))
        if numbering is not None:  # every file just written holds only numbered rows
            txn.record_identity(numbering.generated(a.path for a in adds))
        kept_adds: list[AddFile] = []
        cdc = []
        marked = remove.marked if remove is not None else None
        if marked is not None:
            cdc = txn.stage(deleted_rows_changes(df.sparkSession, snapshot, remove.marked_files, plan.replace_where,
                                                 method, adds, txn.metadata))
        if remove is not None and remove.keep is not None:
            kept_adds = write_kept_rows(txn, remove, name, parts, schema_json, conf, method, materialize)
            cdc = txn.stage(deleted_rows_changes(df.sparkSession, snapshot, remove.removed, plan.replace_where,
                                                 method, adds, txn.metadata))

        removed_files = None
        if plan.overwrite_partitions and snapshot is not None and parts:
            # Dynamic partition overwrite: the partitions the new data lands in are replaced.
            keys = [physical_names(schema_json, conf)[c] for c in parts]  # as the log keys them
            written = {tuple(a.partition_values.get(k) for k in keys) for a in adds}
            txn.read_predicate(lambda pv, _w=written, _k=keys: tuple(pv.get(k) for k in _k) in _w)
            mask = [tuple(dict(pv or []).get(k) for k in keys) in written
                    for pv in snapshot.files.column("partition_values").to_pylist()]
            removed_files = snapshot.files.filter(pa.array(mask, pa.bool_()))
            params["partitionOverwriteMode"] = "DYNAMIC"
        elif remove is not None:
            removed_files = remove.removed
        removes: list[RemoveFile] = removes_of(removed_files) if removed_files is not None else []
        dv_adds = []
        if marked is not None:  # merge-on-read: the replaced rows are marked in deletion vectors
            removes += marked.removes
            dv_adds = marked.adds

        if plan.mode == "append" and snapshot is not None:
            read = target_files_read(df, snapshot)
            if read is not None:
                # INSERT ... SELECT from its own target: not blind; it conflicts as a MERGE would (DESIGN.md).
                txn.read_files(read)
                if snapshot.partition_columns:
                    txn.read_predicate(lambda pv: True)
            if not adds and not txn.metadata_changed and txn.protocol == snapshot.protocol \
                    and not app_transactions:
                return None  # an empty append changes nothing
        txn.add_actions([*removes, *adds, *kept_adds, *dv_adds, *cdc, *set_transactions(app_transactions)])
        metrics = _metrics(adds, kept_adds, removes, dv_adds, removed_files, remove, started)
        if operation_parameters:
            params.update(operation_parameters)
        version = txn.commit(operation=operation or "WRITE", parameters=params, metrics=metrics,
                             user_metadata=user_metadata, extra_commit_info=extra_commit_info)
        if adds and auto_compact.enabled(txn.metadata.configuration):
            auto_compact.after_write(df.sparkSession, table, txn.metadata.configuration,
                                     {tuple(sorted((a.partition_values or {}).items())): a.partition_values
                                      for a in adds}.values())
        return version


def _table_metadata(txn: Any, plan: WritePlan, df: DataFrame, data_schema: dict[str, Any],
                    configuration: dict[str, str] | None, table_schema: dict[str, Any] | None,
                    definition: TableDefinition | None, params: dict[str, Any]) -> tuple[list[str], DeletePlan | None]:
    """The metadata the write commits (a new table's, or the existing one's evolved by the plan and the
    definition), set on `txn`; returns the partition columns and the files an overwrite replaces."""
    snapshot = txn.snapshot
    remove = None
    if snapshot is None:
        # a new table's schema may declare more than the data holds (generated columns, defaults)
        schema = table_schema if table_schema is not None else data_schema
        parts = partition_names(schema, plan.partition_by or [], txn.table_uri)
        metadata = new_metadata(schema, parts, configuration, table=txn.table_uri)
        if definition is not None:
            metadata = definition.apply(metadata, txn.table_uri)
        txn.update_metadata(metadata)
        if definition is not None:
            definition.apply_clustering(txn)
    else:
        schema_json, parts, conf = plan.layout(txn.table_uri, snapshot, data_schema, configuration, table_schema)
        metadata = Metadata(
            id=snapshot.metadata.id, schema_string=schema_string(schema_json), partition_columns=parts,
            configuration=conf, format=snapshot.metadata.format, name=snapshot.metadata.name,
            description=snapshot.metadata.description, created_time=snapshot.metadata.created_time)
        if definition is not None:
            metadata = definition.apply(metadata, txn.table_uri)
        if metadata_differs(metadata, snapshot.metadata):
            if not plan.replaces_all:
                # rows this write keeps must satisfy what the table now declares
                check_existing_rows(df.sparkSession, snapshot, metadata, txn)
            txn.update_metadata(metadata, replaces_table=plan.replaces_all)
        if definition is not None:
            definition.apply_clustering(txn)
        if plan.replace_where:
            remove = delete_plan(df.sparkSession, txn, plan.replace_where)
            params["predicate"] = json.dumps([plan.replace_where])
        elif plan.mode == "overwrite" and (plan.replaces_all or not parts):
            txn.read_whole_table()
            remove = DeletePlan.whole(snapshot.files, None)
    return parts, remove


def _metrics(adds: list[AddFile], kept_adds: list[AddFile], removes: list[RemoveFile], dv_adds: list[Any],
             removed_files: Any, remove: DeletePlan | None, started: float) -> dict[str, Any]:
    """operationMetrics of a WRITE, as delta-spark names them."""
    metrics = {
        "numFiles": len(adds) + len(kept_adds),
        "numOutputRows": sum_records(adds) + sum_records(kept_adds),
        "numOutputBytes": sum(a.size for a in adds) + sum(a.size for a in kept_adds),
    }
    if removes:
        metrics["numRemovedFiles"] = len(removes) - len(dv_adds)
        metrics["numRemovedBytes"] = byte_count(removed_files) if removed_files is not None else 0
    if dv_adds:
        metrics["numDeletionVectorsAdded"] = len(dv_adds)
    if remove is not None and remove.keep is not None:
        metrics["numCopiedRows"] = sum_records(kept_adds)
    if remove is not None and remove.deleted is not None:
        metrics["numDeletedRows"] = remove.deleted
    metrics["executionTimeMs"] = int((time.time() - started) * 1000)
    return metrics
