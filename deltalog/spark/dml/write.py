"""`write_dataframe`: create / append / overwrite / replaceWhere / dynamic partition overwrite, one commit."""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import StructType

from ...actions import AddFile, Metadata, RemoveFile
from ...errors import DeltaError, InvalidTableError, SchemaMismatchError
from ...column_mapping import physical_names
from ...schema import (
    check_column_names, find_field, nullable_type, partition_column_types, quote_identifier, schema_string,
    to_arrow_schema,
)
from ...schema_evolution import SCHEMA_MODES, WRITE_MODES, check_append_schema, checked_table_schema, evolved_schema
from ...definition import TableDefinition
from ...table import DeltaTable, new_metadata
from ...transaction import rearranged_only, reruns_after_conflict
from .. import auto_compact
from ..writer import write_files
from .files import byte_count, removes_of, set_transactions, sum_records, target_files_read
from .alter import check_existing_rows, mapped_if_dropping, metadata_differs
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
                              if k != "comment" and not k.startswith("delta.")}}
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


def _same_columns(a: Sequence[str], b: Sequence[str]) -> bool:
    return [x.lower() for x in a] == [x.lower() for x in b]


def _table_partition_names(schema_json: dict[str, Any], partition_by: Sequence[str], table: str) -> list[str]:
    """Partition column names spelled as in the schema; each must exist and be primitive."""
    out = []
    for c in partition_by:
        f = find_field(schema_json, c)
        if f is None:
            raise SchemaMismatchError(
                f"{table}: partition column '{c}' is not a column of the data; columns are "
                f"{', '.join(x['name'] for x in schema_json['fields'])}.")
        out.append(f["name"])
    partition_column_types(schema_json, out, table)
    if len(set(c.lower() for c in out)) != len(out):
        raise InvalidTableError(f"{table}: partition columns {out} repeat a column.")
    if out and len(out) == len(schema_json["fields"]):
        raise InvalidTableError(
            f"{table}: every column is a partition column ({out}); Delta needs at least one data column.")
    return out


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
    """Add the table's columns that the DataFrame lacks, as nulls (then writer.conform orders/casts)."""
    have = {c.lower() for c in df.columns}
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
def write_dataframe(df: DataFrame, table_uri: str, mode: str = "append", partition_by: Sequence[str] | str | None = None,
                    replace_where: str | None = None, overwrite_partitions: bool = False,
                    schema_mode: str | None = None, configuration: dict[str, str] | None = None,
                    operation: str | None = None, operation_parameters: dict[str, Any] | None = None,
                    user_metadata: str | None = None, extra_commit_info: dict[str, Any] | None = None,
                    method: str = "native", table_schema: dict[str, Any] | None = None,
                    definition: TableDefinition | None = None,
                    app_transactions: dict[str, int] | None = None,
                    read_version: int | None = None, txn_app_id: str | None = None,
                    txn_version: int | None = None) -> int | None:
    """Write a DataFrame to a Delta table in one commit (creating the table as version 0 when absent).

    mode: 'append' (a blind append), 'overwrite' (remove all live files, add the new ones; history is
    kept), 'error' (the table must not exist), 'ignore' (do nothing when it exists).
    replace_where: with mode='overwrite', only the table's rows matching this SQL predicate are replaced.
    overwrite_partitions: with mode='overwrite', replace only the partitions present in `df`.
    schema_mode: 'merge' adds the data's new columns; 'overwrite' (with mode='overwrite') replaces the
    schema and partitioning.
    table_schema: the existing table's schema after this write (columns added or dropped, e.g. by dbt's
    on_schema_change), committed in the same commit as the data: a failed write changes nothing.
    definition: properties, description, comments, NOT NULL columns and CHECK constraints the table
    gets in this same commit (version 0 included); rows the write keeps must satisfy new constraints.
    app_transactions: {appId: version} recorded in the same commit (`txn` actions): what this write
    consumed, so that a rerun after a crash neither skips nor repeats it.
    read_version: the version of this table `df` was computed from (it reads the table it writes): the
    commit is made against that version (an overwrite removes exactly its files) and is checked, as a
    read of the whole table, against every commit landed since: none is overwritten unseen.
    txn_app_id, txn_version: an idempotent write, as delta-spark's options of these names: when the table
    already records `txn_version` or a later one for `txn_app_id`, nothing is written (None); otherwise
    the commit records it. A concurrent commit of the same app id is a ConcurrentTransactionException.
    """
    mode = (mode or "append").lower()
    if mode not in WRITE_MODES:
        raise ValueError(f"{table_uri}: write mode {mode!r} is not one of {', '.join(WRITE_MODES)}.")
    if schema_mode not in SCHEMA_MODES:
        raise ValueError(f"{table_uri}: schema_mode {schema_mode!r} is not one of None, 'merge', 'overwrite'.")
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if (txn_app_id is None) != (txn_version is None):
        raise ValueError(f"{table_uri}: an idempotent write needs both txn_app_id and txn_version (got "
                         f"txn_app_id={txn_app_id!r}, txn_version={txn_version!r}).")
    if txn_version is not None and (isinstance(txn_version, bool) or not isinstance(txn_version, int)
                                    or txn_version < 0):
        raise ValueError(f"{table_uri}: txn_version must be a whole number >= 0, got {txn_version!r}.")
    if (replace_where or overwrite_partitions) and mode != "overwrite":
        raise ValueError(f"{table_uri}: replace_where and overwrite_partitions need mode='overwrite' (got {mode!r}).")
    if replace_where and overwrite_partitions:
        raise ValueError(f"{table_uri}: use either replace_where or overwrite_partitions, not both.")
    if schema_mode == "overwrite" and mode != "overwrite":
        raise ValueError(f"{table_uri}: schema_mode='overwrite' needs mode='overwrite'.")

    table = DeltaTable(table_uri)
    txn = table.transaction(read_version=read_version)
    if read_version is not None and txn.snapshot is not None:
        txn.read_whole_table()  # `df` read the table: what it read is not known file by file
    txn.constraints_enforced = True  # every add below comes from write_files, which checks them
    if txn_app_id is not None:
        done = txn.read_app_transaction(txn_app_id)
        if done is not None and done >= txn_version:
            log.info("%s: %s version %d is committed already (the table records %d); nothing written",
                     table.uri, txn_app_id, txn_version, done)
            return None
        app_transactions = {**(app_transactions or {}), txn_app_id: txn_version}
    with txn.staging():
        name = table.uri
        snapshot = txn.snapshot
        if snapshot is not None and schema_mode != "overwrite":
            df = _type_void_columns(df, snapshot.schema_json)
        data_schema = dataframe_schema(df, name)
        params: dict[str, Any] = {"mode": _SPARK_MODE[mode]}
        started = time.time()

        if snapshot is None:
            parts = _table_partition_names(data_schema, partition_by or [], name)
            metadata = new_metadata(data_schema, parts, configuration, table=name)
            if definition is not None:
                metadata = definition.apply(metadata, name)
            txn.update_metadata(metadata)
            if definition is not None:
                definition.apply_clustering(txn)
            schema_json, conf = txn.metadata.schema_json, dict(txn.metadata.configuration)
            remove = None
        else:
            if mode in ("error", "errorifexists"):
                raise InvalidTableError(
                    f"{name}: a Delta table already exists here (version {snapshot.version}); use mode='append' "
                    f"or 'overwrite'.")
            if mode == "ignore":
                return None
            current = snapshot.schema_json
            parts = list(snapshot.partition_columns)
            conf = dict(snapshot.configuration)
            new_conf = {**conf, **{str(k): str(v) for k, v in (configuration or {}).items()}}
            if schema_mode == "overwrite" and not (replace_where or overwrite_partitions):
                if partition_by is not None:
                    parts = _table_partition_names(data_schema, partition_by, name)
                else:
                    parts = _table_partition_names(data_schema, parts, name) if all(
                        find_field(data_schema, p) for p in parts) else []
                schema_json = data_schema
            else:
                if partition_by is not None and partition_by and not _same_columns(partition_by, parts):
                    raise InvalidTableError(
                        f"{name}: the table is partitioned by {parts}, not {list(partition_by)}. Overwrite it with "
                        f"schema_mode='overwrite' to change its partitioning.")
                if table_schema is not None:
                    schema_json = checked_table_schema(name, current, table_schema, parts)
                    check_append_schema(name, schema_json, data_schema)
                    new_conf = mapped_if_dropping(name, new_conf, current, schema_json)
                elif schema_mode == "merge":
                    schema_json = evolved_schema(name, current, data_schema)
                else:
                    check_append_schema(name, current, data_schema)
                    schema_json = current
            metadata = Metadata(
                id=snapshot.metadata.id, schema_string=schema_string(schema_json), partition_columns=parts,
                configuration=new_conf, format=snapshot.metadata.format, name=snapshot.metadata.name,
                description=snapshot.metadata.description, created_time=snapshot.metadata.created_time)
            if definition is not None:
                metadata = definition.apply(metadata, name)
            if metadata_differs(metadata, snapshot.metadata):
                replaces_all = mode == "overwrite" and not (replace_where or overwrite_partitions)
                if not replaces_all:
                    # rows this write keeps must satisfy what the table now declares
                    check_existing_rows(df.sparkSession, snapshot, metadata, txn)
                txn.update_metadata(metadata, replaces_table=replaces_all)
            if definition is not None:
                definition.apply_clustering(txn)
            schema_json, conf = txn.metadata.schema_json, dict(txn.metadata.configuration)
            remove = None
            if mode == "overwrite":
                if replace_where:
                    remove = delete_plan(df.sparkSession, txn, replace_where)
                    params["predicate"] = json.dumps([replace_where])
                elif not overwrite_partitions or not parts:
                    txn.read_whole_table()
                    remove = DeletePlan.whole(snapshot.files, None)
        params["partitionBy"] = json.dumps(parts)

        df = _fill_missing(df, schema_json)
        if replace_where and snapshot is not None:
            df = _refuse_rows_outside(df, replace_where, name)
        materialize = bool(txn.protocol and txn.protocol.has_writer_feature("materializePartitionColumns"))
        adds = txn.stage(write_files(df, name, parts, schema_json, conf, method=method,
                                     store_partition_columns=materialize))
        kept_adds: list[AddFile] = []
        cdc = []
        marked = remove.marked if remove is not None else None
        if marked is not None:
            cdc = txn.stage(deleted_rows_changes(df.sparkSession, snapshot, remove.marked_files, replace_where,
                                                 method, adds, txn.metadata))
        if remove is not None and remove.keep is not None:
            kept_adds = write_kept_rows(txn, remove, name, parts, schema_json, conf, method, materialize)
            rewritten = remove.removed
            cdc = txn.stage(deleted_rows_changes(df.sparkSession, snapshot, rewritten, replace_where, method, adds,
                                                 txn.metadata))

        removes: list[RemoveFile] = []
        removed_files = None
        if overwrite_partitions and snapshot is not None and parts and remove is None:
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
        if removed_files is not None:
            removes = removes_of(removed_files)
        dv_adds = []
        if marked is not None:  # merge-on-read: the replaced rows are marked in deletion vectors
            removes += marked.removes
            dv_adds = marked.adds

        if mode == "append" and snapshot is not None:
            read = target_files_read(df, snapshot)
            if read is not None:
                # INSERT ... SELECT from its own target: not blind; it conflicts as a MERGE would (DESIGN.md).
                txn.read_files(read)
                if snapshot.partition_columns:
                    txn.read_predicate(lambda pv: True)
        if mode == "append" and snapshot is not None and not adds and not txn.metadata_changed \
                and txn.protocol == snapshot.protocol and not app_transactions:
            return None  # an empty append changes nothing
        txn.add_actions([*removes, *adds, *kept_adds, *dv_adds, *cdc, *set_transactions(app_transactions)])
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
        operation = operation or "WRITE"
        if operation_parameters:
            params.update(operation_parameters)
        version = txn.commit(operation=operation, parameters=params, metrics=metrics, user_metadata=user_metadata,
                             extra_commit_info=extra_commit_info)
        if adds and auto_compact.enabled(txn.metadata.configuration):
            auto_compact.after_write(df.sparkSession, table_uri, txn.metadata.configuration,
                                     {tuple(sorted((a.partition_values or {}).items())): a.partition_values
                                      for a in adds}.values())
        return version
