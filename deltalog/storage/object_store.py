"""Tables on object stores (S3, Azure Blob / ADLS Gen2, GCS): the log through `obstore`, the Python
binding of the `object_store` crate that delta-rs commits through.

- A commit is `put(mode="create")`: put-if-absent (S3 and Azure `If-None-Match: *`, GCS
  `ifGenerationMatch=0`), so exactly one of several racing writers creates a version.
- Listing from a version is one prefix listing with an offset (S3 `StartAfter`).
- Commit safety is never assumed. Before its first commit, a store is probed: a second create of the
  same key must be refused. A store that overwrites instead (some emulators do) is refused with
  `UnsafeStoreError`, unless the options declare a single writer (`deltalog_single_writer: true`).
- `storage_options` take the keys delta-rs and `object_store` take (`AWS_ENDPOINT_URL`,
  `AWS_ACCESS_KEY_ID`, `AWS_REGION`, `AWS_ALLOW_HTTP`, `AZURE_STORAGE_ACCOUNT_NAME`, …); without them,
  credentials come from the environment as they do for delta-rs.
"""
from __future__ import annotations

import io
import threading
import time
import uuid
from datetime import timedelta
from typing import Any, BinaryIO
from urllib.parse import urlparse

from ..errors import DeltaError, NotATableError, one_line
from ..lazy_imports import load
from .files import redact, storage_options_for, task_storage_options
from .options import SINGLE_WRITER_OPTION, StorageOptions
from .log_store import LOG_DIR, LogFile, LogStore, WriteOutcomeUnknown, arrow_owned_buffer, classify

load("obstore")  # 13 ms; the functions below import from it

class StoreUnreachableError(DeltaError):
    """The store holding a warehouse or table cannot be listed or written: endpoint, bucket or credentials."""


class UnsafeStoreError(DeltaError):
    """The store does not refuse a second create of a key: concurrent commits could overwrite each other."""


def make_store(table_uri: str, storage_options: StorageOptions | dict[str, Any] | None = None):
    """An obstore store rooted at the table's location."""
    from obstore.store import MemoryStore, from_url

    options = StorageOptions.of(storage_options)
    config, client = options.obstore_settings()
    if urlparse(table_uri).scheme == "memory":
        return MemoryStore()
    uri = table_uri.replace("s3a://", "s3://", 1).replace("gcs://", "gs://", 1)
    return from_url(uri, config=config or None, client_options=client or None, retry_config=options.retry_config)


_probed: dict[str, bool] = {}
_probe_lock = threading.Lock()


def _bucket_of(uri: str) -> str:
    parsed = urlparse(uri)
    return f"{parsed.scheme}://{parsed.netloc}"


def _refused_access(method):
    """Store calls whose credentials are refused or lack a permission raise StoreUnreachableError naming
    the table, the object and the cause (never a secret), instead of the client's own exception."""
    import functools

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

        try:
            return method(self, *args, **kwargs)
        except (PermissionDeniedError, UnauthenticatedError) as exc:
            text = one_line(exc)
            lowered = text.lower()
            cause = next((why for needles, why in _STORE_CAUSES if any(n in lowered for n in needles)),
                         "the store refused the request")
            what = args[0] if args and isinstance(args[0], str) else ""
            raise StoreUnreachableError(redact(
                f"{self.table_uri}: the store refused {method.__name__.replace('_', ' ')} {what}: {cause} "
                f"({text[:300]}).")) from None
    return call


class ObjectLogStore(LogStore):
    """One table's `_delta_log` on an object store."""

    def __init__(self, table_uri: str, storage_options: StorageOptions | dict[str, Any] | None = None,
                 store: Any = None):
        self.table_uri = str(table_uri).rstrip("/")
        self.options = StorageOptions.of(storage_options) if storage_options is not None \
            else storage_options_for(self.table_uri)
        self.single_writer = self.options.single_writer
        self.store = store if store is not None else make_store(self.table_uri, self.options)

    @property
    def storage_options(self) -> dict[str, str]:
        return self.options.as_dict()

    def __repr__(self) -> str:
        return f"ObjectLogStore({self.table_uri!r})"

    def _key(self, name: str) -> str:
        return f"{LOG_DIR}/{name}"

    @_refused_access
    def list_from(self, version: int = 0) -> list[LogFile]:
        import obstore

        out: list[LogFile] = []
        # names sort after the bare digits of `version`: "<version>.json" > "<version>" (longer)
        offset = self._key("%020d" % version) if version > 0 else None
        stream = obstore.list(self.store, prefix=f"{LOG_DIR}/", offset=offset) if offset else \
            obstore.list(self.store, prefix=f"{LOG_DIR}/")
        for chunk in stream:
            for meta in chunk:
                name = meta["path"][len(LOG_DIR) + 1:]
                if "/" in name or name.startswith("."):
                    continue
                v, kind, part, num_parts, v2 = classify(name)
                if kind == "other" or (v is not None and v < version):
                    continue
                mtime = int(meta["last_modified"].timestamp() * 1000)
                out.append(LogFile(name, v, kind, int(meta["size"]), mtime, part, num_parts, v2))
        if not out and not self.exists():
            raise NotATableError(
                f"{self.table_uri} is not a Delta table: it has no {LOG_DIR} objects. Check the URI, or "
                f"create the table by writing to it first.")
        out.sort(key=lambda f: (f.version is None, f.version or 0, f.name))
        return out

    @_refused_access
    def read(self, name: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.store, self._key(name)).bytes())  # FileNotFoundError if absent

    @_refused_access
    def write_if_absent(self, name: str, data: bytes) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError

        from obstore.exceptions import GenericError

        self._check_commit_safety()
        try:
            obstore.put(self.store, self._key(name), data, mode="create")
        except AlreadyExistsError:
            # also when the client retried a create whose first response was lost: the caller reads
            # the object back to tell its own write from another writer's
            raise FileExistsError(f"{self.table_uri}/{LOG_DIR}/{name} already exists") from None
        except (GenericError, TimeoutError, ConnectionError) as exc:
            raise WriteOutcomeUnknown(f"{self.table_uri}/{LOG_DIR}/{name}: the store did not answer the "
                                      f"conditional create ({one_line(exc)})") from exc

    @_refused_access
    def write_atomic(self, name: str, data: bytes) -> None:
        import obstore

        obstore.put(self.store, self._key(name), data)  # objects appear whole

    @_refused_access
    def write_table_file(self, relative: str, data: bytes, if_absent: bool) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError

        if if_absent:
            self._check_commit_safety()
            try:
                obstore.put(self.store, relative, data, mode="create")
            except AlreadyExistsError:
                raise FileExistsError(f"{self.table_uri}/{relative} already exists") from None
        else:
            obstore.put(self.store, relative, data)

    @_refused_access
    def delete(self, name: str) -> None:
        import obstore

        try:
            obstore.delete(self.store, self._key(name))
        except FileNotFoundError:
            pass

    @_refused_access
    def exists(self) -> bool:
        import obstore

        for chunk in obstore.list(self.store, prefix=f"{LOG_DIR}/", chunk_size=1):
            if chunk:
                return True
        return False

    def parquet_source(self, name: str) -> Any:
        return arrow_owned_buffer(self.read(name))

    def open_data_file(self, relative: str) -> BinaryIO:
        return _PendingObject()  # object stores take whole objects: buffered, put on close

    @_refused_access
    def close_data_file(self, handle: BinaryIO, relative: str) -> tuple[int, int]:
        import obstore
        from obstore.exceptions import AlreadyExistsError

        from obstore.exceptions import GenericError

        data = handle.getvalue()
        # The name is fresh (a new UUID): only this write can have created it. A create whose response
        # was lost is retried by the client and then answered "already exists" for its own object.
        for attempt in range(3):
            try:
                obstore.put(self.store, relative, data, mode="create")
                break
            except AlreadyExistsError:
                if self._holds(relative, data):
                    break
                raise FileExistsError(f"{self.table_uri}/{relative} already exists with other bytes than "
                                      f"this write's") from None
            except (GenericError, TimeoutError, ConnectionError):
                if self._holds(relative, data):
                    break
                if attempt == 2:
                    raise
        return len(data), int(time.time() * 1000)

    def _holds(self, relative: str, data: bytes) -> bool:
        """Whether the object at `relative` holds exactly `data` (False when absent or unreadable)."""
        import obstore

        try:
            return bytes(obstore.get(self.store, relative).bytes()) == data
        except Exception:
            return False

    @_refused_access
    def delete_data_file(self, relative: str) -> None:
        import obstore

        try:
            obstore.delete(self.store, relative)
        except FileNotFoundError:
            pass

    @_refused_access
    def read_data_range(self, path: str, offset: int, length: int) -> bytes:
        import obstore

        root = self.table_uri.rstrip("/") + "/"
        if path.startswith(root):
            path = path[len(root):]
        elif "://" in path or path.startswith("/"):
            raise ValueError(f"{path} is outside the table {self.table_uri}; only files of the table are read")
        size = obstore.head(self.store, path)["size"]
        end = min(offset + length, size)
        return bytes(obstore.get_range(self.store, path, start=offset, end=end)) if end > offset else b""


    def _check_commit_safety(self) -> None:
        """Once per bucket and process: a second create of the same key must be refused."""
        bucket = _bucket_of(self.table_uri)
        if self.single_writer or _probed.get(bucket):
            return
        import obstore
        from obstore.exceptions import AlreadyExistsError

        with _probe_lock:
            if _probed.get(bucket):
                return
            key = self._key(f".deltalog-put-if-absent-probe-{uuid.uuid4().hex}")
            obstore.put(self.store, key, b"1", mode="create")
            try:
                obstore.put(self.store, key, b"2", mode="create")
                refused = False
            except AlreadyExistsError:
                refused = True
            finally:
                try:
                    obstore.delete(self.store, key)
                except Exception:
                    pass
            if not refused:
                raise UnsafeStoreError(
                    f"{self.table_uri}: this store overwrote an object that a conditional create "
                    f"(put-if-absent) should have refused, so two concurrent commits could overwrite each "
                    f"other and lose data. Nothing was committed. Use a store with conditional writes "
                    f"(S3, Azure Blob, GCS), or set storage option {SINGLE_WRITER_OPTION}: true if only "
                    f"one writer ever commits to these tables.")
            _probed[bucket] = True


class _PendingObject(io.BytesIO):
    """A data file being written to an object store: kept until the whole object is put."""

    def close(self) -> None:  # pyarrow's writer closes its sink; the bytes are still needed
        pass


# what a store's error says, in words a user acts on
_STORE_CAUSES = (
    (("nosuchbucket", "bucket does not exist", "containernotfound", "the specified container does not exist"),
     "the bucket (container) does not exist: create it, or fix the warehouse URI"),
    (("invalidaccesskeyid", "signaturedoesnotmatch", "unauthenticated", "authenticationfailed",
      "invalid credentials", "expiredtoken", "no credentials"),
     "the store refused the credentials: check the access key and secret (storage_options, or the "
     "AWS_* / AZURE_* / GOOGLE_* variables)"),
    (("accessdenied", "access denied", "permissiondenied", "permission denied", "403", "authorizationfailure"),
     "the credentials may not list or write this prefix: grant list, get, put and delete on it"),
    (("connection refused", "error sending request", "dns error", "failed to lookup", "timed out",
      "timeout", "connect error", "network", "connection reset"),
     "the endpoint does not answer: check the endpoint URL and that the store is running and reachable"),
)
_probed_warehouses: set[str] = set()
_warehouse_probe_lock = threading.Lock()  # a warehouse is probed by one thread; the others wait for it


def probe_warehouse(root: str, storage_options: dict[str, Any] | None = None) -> None:
    """List the warehouse and write and delete a probe object in it, with short timeouts and few
    retries, once per process: StoreUnreachableError naming the warehouse, the endpoint and the cause
    (never a secret) when the store cannot be used, before anything is written."""
    root = str(root).rstrip("/")
    if root in _probed_warehouses:
        return
    with _warehouse_probe_lock:
        if root not in _probed_warehouses:
            _probe(root, storage_options)
            _probed_warehouses.add(root)


def _probe(root: str, storage_options: dict[str, Any] | None) -> None:
    import obstore

    options = StorageOptions.of(storage_options if storage_options is not None else task_storage_options(root))
    config, client = options.obstore_settings()
    client = {"connect_timeout": "5s", "timeout": "30s", **client}
    if urlparse(root).scheme == "memory":
        return
    step = "reach"
    try:
        from obstore.store import from_url

        store = from_url(root.replace("s3a://", "s3://", 1).replace("gcs://", "gs://", 1),
                         config=config or None, client_options=client,
                         retry_config={"max_retries": 1, "retry_timeout": timedelta(seconds=10)})
        step = "list"
        for _ in obstore.list(store, chunk_size=1):
            break
        step = "write"
        key = f".deltalog-probe-{uuid.uuid4().hex}"
        obstore.put(store, key, b"probe")
        step = "delete"
        obstore.delete(store, key)
    except Exception as exc:
        text = " ".join(str(exc).split()).split(" Debug source:", 1)[0]  # obstore's Rust debug dump
        lowered = text.lower()
        cause = next((why for needles, why in _STORE_CAUSES if any(n in lowered for n in needles)),
                     f"the store answered {type(exc).__name__}")
        # options given here, maybe not configured: masked all the same
        raise StoreUnreachableError(options.redact(redact(
            f"warehouse {root} (endpoint {options.endpoint(root)}) cannot be used: {cause}. The probe failed "
            f"to {step} there ({text[:300]}). Nothing was written."))) from None
