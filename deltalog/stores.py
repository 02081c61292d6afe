"""The log store of a table location: `LocalLogStore` for a path or `file://` URI, `ObjectLogStore` for
an object-store URI. (Apart from both, so that neither store module imports the other.)"""
from __future__ import annotations

from typing import Any

from .filesystem import is_object_store_uri, table_path_from_uri
from .object_store import ObjectLogStore
from .storage import LocalLogStore, LogStore


def log_store_for(table_uri: str, storage_options: dict[str, Any] | None = None) -> LogStore:
    """The store of a table location: a local path or `file://` URI, or an object-store URI (s3://,
    abfss:// / az://, gs://) with delta-rs style `storage_options`."""
    if is_object_store_uri(str(table_uri)):
        return ObjectLogStore(str(table_uri), storage_options)
    return LocalLogStore(table_path_from_uri(str(table_uri)))
