"""A Hive Metastore as the shop's catalog of names (profile `catalog: {type: hive, uri: thrift://host:9083}`).

The Delta log stays the truth for a table's content; the metastore holds names and locations. Every
table the adapter creates, replaces, renames or drops is registered (or removed) there in the form Spark
writes a data-source table and delta-spark, Spark's Thrift Server and Trino read it: an EXTERNAL_TABLE with
provider `delta` (`spark.sql.sources.provider`), its location as the `path` storage property, its schema
(`spark.sql.sources.schema`, split in parts over 4,000 characters as Spark does), partition columns and
comment. dbt schemas are metastore databases; dbt views are VIRTUAL_VIEWs holding their SQL with names
as the metastore knows them (`shop`.`orders`). A table registered by someone else (a dbt source with
no location) is found here by name (`location`).

Spoken to through the metastore's Thrift API (the generated client that `pymetastore` ships), one short
connection per call."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlparse

from dbt_common.exceptions import DbtRuntimeError

from deltalog.lazy_imports import load

load("metastore")  # the Thrift client, whole, before the methods below import from it (1 ms)

SCHEMA_PART_SIZE = 4000  # Spark's spark.sql.sources.schemaStringLengthThreshold: the metastore column's size
CATALOG_TYPES = ("hive",)


class MetastoreError(DbtRuntimeError):
    """The metastore could not be reached or refused a change."""


def parse_catalog(value: Any) -> Optional["HiveMetastore"]:
    """The profile's `catalog` as a metastore (None: the warehouse folder is the only catalog), or a
    DbtRuntimeError saying what is wrong and what is allowed."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DbtRuntimeError(
            f"deltalog profile: `catalog` is {value!r}: a catalog name, as dbt-databricks takes it, is not "
            f"something this adapter takes. Allowed: a mapping such as {{type: hive, uri: thrift://host:9083}} "
            f"(a Hive Metastore that also lists every table and view built). Nothing was run.")
    unknown = sorted(set(value) - {"type", "uri"})
    kind = str(value.get("type", "")).strip().lower()
    if unknown or kind not in CATALOG_TYPES:
        raise DbtRuntimeError(
            f"deltalog profile: `catalog` {value!r} is not one this adapter takes"
            + (f" (unknown keys: {', '.join(unknown)})" if unknown else "")
            + ". Allowed: {type: hive, uri: thrift://host:9083}. Nothing was run.")
    uri = str(value.get("uri") or "")
    parsed = urlparse(uri)
    if parsed.scheme != "thrift" or not parsed.hostname:
        raise DbtRuntimeError(
            f"deltalog profile: `catalog.uri` is {uri!r}. Allowed: the metastore's Thrift address, "
            f"thrift://host:port (9083 by default). Nothing was run.")
    return HiveMetastore(parsed.hostname, parsed.port or 9083)


def _location_uri(location: str) -> str:
    """A location as the metastore keeps it: a URI (`file:/...` for a local folder)."""
    return location if "://" in location else "file:" + location


def _local_path(location: str) -> str:
    if location.startswith("file://"):
        return location[len("file://"):]
    if location.startswith("file:"):
        return location[len("file:"):]
    return location


def metastore_sql(sql: str, catalog: Optional[str] = None) -> str:
    """A dbt view's SQL with each session-view name (`` `shop.orders` ``) written as the metastore names
    the relation (`` `shop`.`orders` ``), for engines that read the view from the metastore. In the
    metastore of the attached catalog `catalog`, that catalog's `` `catalog.shop.orders` `` is
    `` `shop`.`orders` `` too; another catalog's name keeps its three parts."""
    from dbt.adapters.deltalog.sql_gateway import tokens

    try:
        toks = tokens(sql)
    except Exception:
        return sql
    for t in reversed(toks):
        parts = t.text.split(".") if t.kind == "IDENTIFIER" else []
        if len(parts) == 3 and catalog and parts[0] == catalog:
            parts = parts[1:]
        if len(parts) in (2, 3) and all(parts):
            sql = sql[:t.start] + ".".join(f"`{p}`" for p in parts) + sql[t.end:]
    return sql


class HiveMetastore:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port

    @property
    def uri(self) -> str:
        return f"thrift://{self.host}:{self.port}"

    @contextlib.contextmanager
    def _client(self) -> Iterator[Any]:
        from pymetastore.hive_metastore import ThriftHiveMetastore
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        socket = TSocket.TSocket(self.host, self.port)
        socket.setTimeout(60_000)
        transport = TTransport.TBufferedTransport(socket)
        try:
            transport.open()
        except Exception as exc:
            raise MetastoreError(f"the Hive Metastore at {self.uri} (profile `catalog`) cannot be reached: "
                                 f"{exc}. Start it, or correct `catalog.uri`.") from None
        try:
            yield ThriftHiveMetastore.Client(TBinaryProtocol.TBinaryProtocol(transport))
        finally:
            transport.close()

    # ---- databases (dbt schemas) ------------------------------------------------------------------

    def databases(self) -> List[str]:
        with self._client() as client:
            return list(client.get_all_databases())

    def ensure_database(self, name: str, location: str) -> None:
        from pymetastore.hive_metastore import ttypes

        with self._client() as client:
            try:
                client.get_database(name)
                return
            except ttypes.NoSuchObjectException:
                pass
            try:
                client.create_database(ttypes.Database(name=name, description="", parameters={},
                                                       locationUri=_location_uri(location)))
            except ttypes.AlreadyExistsException:
                pass  # another command made it meanwhile

    def drop_database(self, name: str) -> None:
        """The database and its entries; the data stays (the warehouse drops what is its own)."""
        from pymetastore.hive_metastore import ttypes

        with self._client() as client:
            try:
                client.drop_database(name, False, True)
            except ttypes.NoSuchObjectException:
                pass

    # ---- tables and views -------------------------------------------------------------------------

    def register_table(self, schema: str, name: str, location: str, schema_json: Dict[str, Any],
                       partition_columns: List[str], comment: Optional[str],
                       iceberg_metadata: Optional[str] = None) -> None:
        """Create or update the entry of a Delta table at `location`. A table that is Iceberg too
        (`iceberg_metadata`: its newest metadata file) is one entry for both: Spark finds the Delta
        provider and path, Iceberg's Hive catalog `table_type = ICEBERG` and `metadata_location` (with the
        one before as `previous_metadata_location`, as Iceberg's own commits leave it)."""
        from pymetastore.hive_metastore import ttypes

        location = _location_uri(location)
        params = {"EXTERNAL": "TRUE", "spark.sql.sources.provider": "delta",
                  "spark.sql.create.version": "dbt-deltalog"}
        if iceberg_metadata:
            params.update({"table_type": "ICEBERG", "metadata_location": _location_uri(iceberg_metadata)})
        text = json.dumps(schema_json, separators=(",", ":"))
        parts = [text[i:i + SCHEMA_PART_SIZE] for i in range(0, len(text), SCHEMA_PART_SIZE)] or [""]
        if len(parts) == 1:
            params["spark.sql.sources.schema"] = parts[0]
        else:
            params["spark.sql.sources.schema.numParts"] = str(len(parts))
            params.update({f"spark.sql.sources.schema.part.{i}": p for i, p in enumerate(parts)})
        if partition_columns:
            params["spark.sql.sources.schema.numPartCols"] = str(len(partition_columns))
            params.update({f"spark.sql.sources.schema.partCol.{i}": c for i, c in enumerate(partition_columns)})
        if comment:
            params["comment"] = comment
        storage = ttypes.StorageDescriptor(
            # Spark's form of a table whose format Hive cannot read: one placeholder column and the
            # location in the `path` property, which Spark reads. The location is the table's too (where
            # Spark puts a placeholder path, which the metastore would create as a folder beside the table)
            cols=[ttypes.FieldSchema(name="col", type="array<string>", comment="from deserializer")],
            location=location,
            inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
            compressed=False, numBuckets=-1,
            serdeInfo=ttypes.SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                                       parameters={"serialization.format": "1", "path": location}),
            bucketCols=[], sortCols=[], parameters={})
        self._put(ttypes.Table(tableName=name, dbName=schema, owner="dbt-deltalog", createTime=int(time.time()),
                               lastAccessTime=0, retention=0, sd=storage, partitionKeys=[], parameters=params,
                               tableType="EXTERNAL_TABLE"))

    def register_view(self, schema: str, name: str, sql: str, columns: List[Tuple[str, str]],
                      comment: Optional[str], catalog: Optional[str] = None) -> None:
        """Create or update a view: its SQL with names as the metastore knows them, its columns."""
        from pymetastore.hive_metastore import ttypes

        text = metastore_sql(sql, catalog)
        params = {"spark.sql.create.version": "dbt-deltalog"}
        if comment:
            params["comment"] = comment
        storage = ttypes.StorageDescriptor(
            cols=[ttypes.FieldSchema(name=c, type=t) for c, t in columns],
            inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
            compressed=False, numBuckets=-1,
            serdeInfo=ttypes.SerDeInfo(serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                                       parameters={"serialization.format": "1"}),
            bucketCols=[], sortCols=[], parameters={})
        self._put(ttypes.Table(tableName=name, dbName=schema, owner="dbt-deltalog", createTime=int(time.time()),
                               lastAccessTime=0, retention=0, sd=storage, partitionKeys=[], parameters=params,
                               viewOriginalText=text, viewExpandedText=text, tableType="VIRTUAL_VIEW"))

    def _put(self, table: Any) -> None:
        from pymetastore.hive_metastore import ttypes

        with self._client() as client:
            try:
                existing = client.get_table(table.dbName, table.tableName)
            except ttypes.NoSuchObjectException:
                existing = None
            try:
                if existing is None:
                    client.create_table(table)
                elif existing.tableType != table.tableType:  # a view became a table or back
                    client.drop_table(table.dbName, table.tableName, False)
                    client.create_table(table)
                else:
                    table.createTime = existing.createTime
                    before = (existing.parameters or {}).get("metadata_location")
                    now = (table.parameters or {}).get("metadata_location")
                    if before and now and before != now:
                        table.parameters["previous_metadata_location"] = before
                    elif before and now:
                        previous = (existing.parameters or {}).get("previous_metadata_location")
                        if previous:
                            table.parameters["previous_metadata_location"] = previous
                    client.alter_table(table.dbName, table.tableName, table)
            except Exception as exc:
                raise MetastoreError(
                    f"the Hive Metastore at {self.uri} refused the entry of {table.dbName}.{table.tableName}: "
                    f"{getattr(exc, 'message', None) or exc}") from None

    def drop(self, schema: str, name: str) -> None:
        from pymetastore.hive_metastore import ttypes

        with self._client() as client:
            try:
                client.drop_table(schema, name, False)  # the entry only: data is the warehouse's to drop
            except ttypes.NoSuchObjectException:
                pass

    def tables(self, schema: str) -> List[str]:
        from pymetastore.hive_metastore import ttypes

        with self._client() as client:
            try:
                return list(client.get_all_tables(schema))
            except ttypes.NoSuchObjectException:
                return []

    def location(self, schema: str, name: str) -> Optional[str]:
        """Where the metastore says the Delta table `schema.name` is (None: no such table there). Spark's
        data-source tables keep it as the `path` property, Hive's own tables as the location."""
        from pymetastore.hive_metastore import ttypes

        with self._client() as client:
            try:
                table = client.get_table(schema, name)
            except ttypes.NoSuchObjectException:
                return None
        if table.tableType == "VIRTUAL_VIEW" or table.sd is None:
            return None
        path = (table.sd.serdeInfo.parameters or {}).get("path") if table.sd.serdeInfo else None
        location = path or table.sd.location
        return _local_path(location) if location else None


def _iceberg_metadata(snapshot: Any) -> Optional[str]:
    """The newest Iceberg metadata file of a table that writes one (table_format: iceberg)."""
    if not snapshot.table_configuration.writes_iceberg:
        return None
    from deltalog.iceberg import latest_metadata, metadata_location

    number, metadata = latest_metadata(snapshot.table_uri, snapshot.store)
    return metadata_location(snapshot.table_uri, number) if metadata is not None else None


def publish(metastore: HiveMetastore, warehouse: Any, spark: Any, schema: str, name: str) -> None:
    """Register the warehouse's relation `schema.name` as it now is (a table or a view), or drop its
    entry when the warehouse no longer holds it."""
    entry = warehouse.lookup(schema, name)
    if entry is None:
        metastore.drop(schema, name)
        return
    database_location = warehouse.schema_path(schema)
    metastore.ensure_database(schema, database_location)
    if entry.kind == "table":
        snapshot = warehouse.table(schema, name).snapshot()
        metastore.register_table(schema, name, entry.path, snapshot.schema_json, list(snapshot.partition_columns),
                                 snapshot.metadata.description, _iceberg_metadata(snapshot))
        return
    fields = spark.table(f"`{warehouse.view_name(schema, name)}`").schema.fields
    docs = warehouse.read_view_docs(schema, name)
    metastore.register_view(schema, name, warehouse.read_view_sql(schema, name) or "",
                            [(f.name, f.dataType.simpleString()) for f in fields], docs.get("description"),
                            warehouse.name)
