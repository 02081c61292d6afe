"""`DeltaTable`: the facade over one table location — snapshots, history, transactions, creation."""
from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

import pyarrow as pa

from .actions import Metadata
from .errors import InvalidTableError, NotATableError
from .storage.log_store import LogStore
from .storage import log_store_for
from .transaction import Transaction


def as_table(table: "DeltaTable | str | os.PathLike") -> "DeltaTable":
    """A table given as a handle (kept) or by its location alone (its store from the options configured
    for that location, see `storage.files.configure`)."""
    return table if isinstance(table, DeltaTable) else DeltaTable(table)


class DeltaTable:
    """One table and its store (`LogStore`: the log, the data files, the options that reach them), made
    once and handed to everything that reads or writes the table."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None, *, store: LogStore | None = None):
        self.store = store or log_store_for(str(uri), storage_options)
        self.uri = self.store.table_uri

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    def exists(self) -> bool:
        """Whether the location holds a Delta table (a `_delta_log` with a commit or checkpoint)."""
        if not self.store.exists():
            return False
        try:
            return any(f.kind in ("commit", "checkpoint") for f in self.store.list_from(0))
        except NotATableError:
            return False

    def snapshot(self, version: int | None = None, timestamp: datetime | int | str | None = None):
        from .snapshot import Snapshot
        return Snapshot.load(self.uri, version=version, timestamp=timestamp, store=self.store)

    def version(self) -> int:
        """The latest committed version."""
        return self.snapshot().version

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """One row per commit, newest first (commitInfo fields plus version and timestamp)."""
        from .history import history
        return history(self.store, limit=limit)

    def transaction(self, app_id: str | None = None, isolation_level: str | None = None,
                    read_version: int | None = None) -> Transaction:
        """A transaction at the latest snapshot (or at `read_version`, when what it writes was computed from
        that version), or at none (read_version -1) for a table not yet created."""
        try:
            snap = self.snapshot(version=read_version)
        except NotATableError:
            snap = None
        return Transaction(self.uri, snap, app_id=app_id, isolation_level=isolation_level, store=self.store)

    def create(self, schema: pa.Schema | dict[str, Any], partition_columns: list[str] | None = None,
               configuration: dict[str, str] | None = None, name: str | None = None,
               description: str | None = None, exist_ok: bool = False) -> int:
        """Create an empty table (version 0: protocol + metaData). Returns the version, or the current
        one when the table exists and `exist_ok`; otherwise an existing table is an error."""
        if self.exists():
            if exist_ok:
                return self.version()
            raise InvalidTableError(
                f"{self.uri}: a Delta table already exists here (version {self.version()}); write to it, "
                f"or choose another location.")
        txn = self.transaction()
        txn.update_metadata(new_metadata(schema, partition_columns, configuration, name, description,
                                         table=self.uri))
        return txn.commit(operation="CREATE TABLE", parameters=create_parameters(txn.metadata))


def new_metadata(schema: pa.Schema | dict[str, Any], partition_columns: list[str] | None = None,
                 configuration: dict[str, str] | None = None, name: str | None = None,
                 description: str | None = None, table: str = "table") -> Metadata:
    """Metadata for a new table from an Arrow schema or a Delta (Spark StructType) schema dict."""
    from .schema import check_column_names, from_arrow_schema, schema_string
    if isinstance(schema, pa.Schema):
        schema_json = from_arrow_schema(schema)
    elif isinstance(schema, dict):
        schema_json = schema
        check_column_names(schema_json, table)
    else:
        raise TypeError(f"{table}: schema must be a pyarrow.Schema or a Delta schema dict, "
                        f"not {type(schema).__name__}")
    return Metadata(schema_string=schema_string(schema_json), partition_columns=list(partition_columns or []),
                    configuration={str(k): str(v) for k, v in (configuration or {}).items()},
                    name=name, description=description)


def create_parameters(metadata: Metadata) -> dict[str, Any]:
    """operationParameters of CREATE TABLE, as delta-spark records them."""
    return {"isManaged": "false", "description": metadata.description,  # None -> JSON null, as delta-spark
            "partitionBy": json.dumps(metadata.partition_columns),
            "properties": json.dumps(metadata.configuration, separators=(",", ":"))}
