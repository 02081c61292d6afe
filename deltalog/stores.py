"""The log store of a table location: `LocalLogStore` for a path or `file://` URI, `ObjectLogStore` for
an object-store URI. (Apart from both, so that neither store module imports the other.)

One store per table location and options in a process: an object store's clients (obstore's for the
log, pyarrow's for data files) are made once and kept, however many snapshots, transactions and
readers reach the table."""
from __future__ import annotations

from typing import Any

from .filesystem import is_object_store_uri, storage_options_for, table_path_from_uri
from .object_store import ObjectLogStore
from .process_cache import made_once
from .storage import LocalLogStore, LogStore
from .storage_options import StorageOptions


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
