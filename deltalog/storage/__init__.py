"""Storage: how the engine reaches a table's log and files, locally or on an object store.

- `log_store`: `LogStore`, the handle of one table (its `_delta_log` and data files, and the options
  that reach them), and `LocalLogStore`;
- `object_store`: `ObjectLogStore` (obstore for the log, put-if-absent commits) and the warehouse probe;
- `options`: `StorageOptions`, delta-rs style options parsed once and rendered for obstore, pyarrow and
  Hadoop;
- `files`: data files, folders and small objects through pyarrow's file systems, and the prefix
  registry (`files.configure`) that serves tables named by location alone;
- here: `log_store_for(location, options)`, one store per table location and options in a process (an
  object store's clients are made once and kept, however many snapshots, transactions and readers reach
  the table).
"""
from __future__ import annotations

from typing import Any

from .files import is_object_store_uri, storage_options_for, table_path_from_uri
from .object_store import ObjectLogStore
from ..process_cache import made_once
from .log_store import LocalLogStore, LogStore
from .options import StorageOptions


def log_store_for(table_uri: str, storage_options: StorageOptions | dict[str, Any] | None = None) -> LogStore:
    """The store of a table location: a local path or `file://` URI, or an object-store URI (s3://,
    abfss:// / az://, gs://) with delta-rs style `storage_options` (else those configured for it)."""
    uri = str(table_uri)
    if not is_object_store_uri(uri):
        return LocalLogStore(table_path_from_uri(uri))
    options = StorageOptions.of(storage_options) if storage_options is not None else storage_options_for(uri)
    if uri.startswith("memory://"):  # an in-memory store lives as long as its one handle
        return ObjectLogStore(uri, options)
    return _object_log_store(uri.rstrip("/"), options)


def store_of(table: str | LogStore, storage_options: StorageOptions | dict[str, Any] | None = None) -> LogStore:
    """A table given by its store (kept) or by its location."""
    return table if isinstance(table, LogStore) else log_store_for(table, storage_options)


@made_once(maxsize=256)  # one store per location and options: threads share its probes and clients
def _object_log_store(uri: str, options: StorageOptions) -> ObjectLogStore:
    return ObjectLogStore(uri, options)
