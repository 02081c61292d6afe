"""Data files, folders and small objects of a table or warehouse, local or on an object store, through
pyarrow's file systems (the log itself goes through `storage.LogStore`).

- `configure(prefix, storage_options)` tells the process which options (the keys delta-rs and
  `object_store` take: `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AZURE_STORAGE_ACCOUNT_NAME`, ...) serve
  every URI under `prefix`, as Hadoop's per-bucket settings do; a log store or file system made for such
  a URI without explicit options uses them. Without any, credentials come from the environment.
- `arrow_filesystem(uri)` gives (pyarrow FileSystem, path inside it), the client made once per store and
  options (`storage_options.StorageOptions`); the same pair works on an executor when it is given the
  options (`task_storage_options`), which Spark tasks receive in their closures and never in a query
  plan or a log.
"""
from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from .. import secrets
from .options import OBJECT_STORE_SCHEMES, StorageOptions

_configured: dict[str, StorageOptions] = {}
_lock = threading.Lock()


def is_object_store_uri(uri: str) -> bool:
    return urlparse(str(uri)).scheme.lower() in OBJECT_STORE_SCHEMES


def join(root: str, *parts: str) -> str:
    """`root/part/...` for paths and URIs alike (never `os.path`: a URI keeps its `//`)."""
    out = str(root).rstrip("/")
    for p in parts:
        out = f"{out}/{str(p).strip('/')}"
    return out


def configure(prefix: str, storage_options: StorageOptions | dict[str, Any] | None) -> None:
    """Use `storage_options` for every URI that starts with `prefix` (the longest prefix wins)."""
    options = StorageOptions.of(storage_options)
    with _lock:
        if options:
            _configured[str(prefix).rstrip("/")] = options
        else:
            _configured.pop(str(prefix).rstrip("/"), None)


def storage_options_for(uri: str) -> StorageOptions:
    """The options `configure` set for the longest prefix of `uri` (none when none)."""
    uri = str(uri)
    best = ""
    with _lock:
        for prefix in _configured:
            if (uri == prefix or uri.startswith(prefix + "/")) and len(prefix) > len(best):
                best = prefix
        return _configured.get(best, StorageOptions())


def task_storage_options(uri: str) -> dict[str, str]:
    """What a Spark task needs to reach `uri` as this driver does: the configured options over the
    cloud variables of this process's environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ...), so
    executors need no credentials of their own."""
    return storage_options_for(uri).over(StorageOptions.from_environment()).as_dict()


def arrow_filesystem(uri: str, storage_options: StorageOptions | dict[str, Any] | None = None
                     ) -> tuple[pafs.FileSystem, str]:
    """(pyarrow FileSystem, path in it) for a local path, a `file:` URI or an object-store URI (with
    `storage_options`, else those configured for it)."""
    uri = str(uri)
    if not is_object_store_uri(uri):
        return pafs.LocalFileSystem(), table_path_from_uri(uri)
    options = StorageOptions.of(storage_options) if storage_options is not None else storage_options_for(uri)
    return options.arrow_filesystem(uri)


def read_bytes(uri: str, storage_options: dict[str, Any] | None = None) -> bytes:
    fs, path = arrow_filesystem(uri, storage_options)
    with fs.open_input_stream(path) as f:
        return f.read()


def write_bytes(uri: str, data: bytes, storage_options: dict[str, Any] | None = None) -> None:
    """The whole object at once: on an object store a reader sees the old or the new bytes, locally the
    bytes go to a temporary file renamed over the target."""
    fs, path = arrow_filesystem(uri, storage_options)
    if isinstance(fs, pafs.LocalFileSystem):
        import uuid
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    with fs.open_output_stream(path) as f:
        f.write(data)


def file_info(uri: str, storage_options: dict[str, Any] | None = None) -> pafs.FileInfo:
    fs, path = arrow_filesystem(uri, storage_options)
    return fs.get_file_info(path)


def exists(uri: str, storage_options: dict[str, Any] | None = None) -> bool:
    return file_info(uri, storage_options).type != pafs.FileType.NotFound


def list_files(uri: str, recursive: bool = True,
               storage_options: dict[str, Any] | None = None) -> list[pafs.FileInfo]:
    """Entries under a folder (none if it does not exist); `path`s relative to `uri`. A recursive
    listing on local disk neither lists symlinks nor descends into symlinked folders: what they point
    at is not the table's (pyarrow's recursive selector follows them, and VACUUM deleted through one)."""
    fs, root = arrow_filesystem(uri, storage_options)
    if recursive and isinstance(fs, pafs.LocalFileSystem):
        return _list_local_tree(root)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=recursive, allow_not_found=True))
    except FileNotFoundError:
        return []
    prefix = root.rstrip("/") + "/"
    return [pafs.FileInfo(i.path[len(prefix):] if i.path.startswith(prefix) else i.path, i.type,
                          mtime=i.mtime, size=i.size) for i in infos]


def _list_local_tree(root: str) -> list[pafs.FileInfo]:
    out: list[pafs.FileInfo] = []
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel_dir) if rel_dir else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted while listed
            if entry.is_dir(follow_symlinks=False):
                out.append(pafs.FileInfo(rel, pafs.FileType.Directory, mtime_ns=st.st_mtime_ns))
                pending.append(rel)
            elif entry.is_file(follow_symlinks=False):
                out.append(pafs.FileInfo(rel, pafs.FileType.File, mtime_ns=st.st_mtime_ns, size=st.st_size))
    return out


def check_inside(path: str, root: str) -> None:
    """UnsafePathError unless the local `path`, with every symlink on the way resolved, is under
    `root` (also resolved). Object-store keys have no links: a key under the root's prefix is inside."""
    from ..errors import UnsafePathError

    if is_object_store_uri(root):
        if not (str(path).rstrip("/") + "/").startswith(str(root).rstrip("/") + "/"):
            raise UnsafePathError(f"{path} is outside {root}; nothing was deleted there.")
        return
    real_root = os.path.realpath(table_path_from_uri(root))
    real = os.path.realpath(table_path_from_uri(path))
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePathError(
            f"refusing to delete {path}: it resolves (through a symlink) to {real}, outside {real_root}. "
            f"Nothing outside a table is ever deleted; remove the link by hand if it is no longer needed.")


def delete_file(uri: str, storage_options: dict[str, Any] | None = None, *, within: str | None = None) -> None:
    """Delete one file (gone already is fine). With `within` (a table or warehouse root), a path that
    resolves outside it is refused with UnsafePathError, whatever symlink leads there."""
    if within is not None:
        check_inside(uri, within)
    fs, path = arrow_filesystem(uri, storage_options)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def delete_tree(uri: str, storage_options: dict[str, Any] | None = None) -> None:
    """Delete a folder and what is in it. Symlinks inside are removed, never followed; a folder that is
    itself a symlink loses only the link, never what it points at."""
    fs, path = arrow_filesystem(uri, storage_options)
    if isinstance(fs, pafs.LocalFileSystem) and os.path.islink(path):
        os.unlink(path)
        return
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass


def read_parquet(uri: str, columns: list[str] | None = None, storage_options: dict[str, Any] | None = None,
                 missing_ok: bool = False):
    """A Parquet file as an Arrow table (only its top-level `columns`, when given; with `missing_ok`,
    those the file lacks are left out instead of failing the read)."""
    import pyarrow.parquet as pq

    fs, path = arrow_filesystem(uri, storage_options)
    # Delta timestamps are microseconds; INT96 (Spark's legacy encoding) read as nanoseconds wraps
    # dates past 2262 (9999-12-31 became 1816-03-29)
    if columns is None or not missing_ok:
        return pq.read_table(path, columns=columns, filesystem=fs, coerce_int96_timestamp_unit="us")
    with fs.open_input_file(path) as f:
        file = pq.ParquetFile(f, coerce_int96_timestamp_unit="us")
        present = set(file.schema_arrow.names)
        return file.read(columns=[c for c in columns if c in present])


def parquet_metadata(uri: str, storage_options: dict[str, Any] | None = None):
    """A Parquet file's footer."""
    import pyarrow.parquet as pq

    fs, path = arrow_filesystem(uri, storage_options)
    with fs.open_input_file(path) as f:
        return pq.ParquetFile(f).metadata


def redact(text: str) -> str:
    """`text` with the values of every configured option that holds a credential replaced by `****`:
    errors from a store may echo its configuration."""
    with _lock:
        values = [v for options in _configured.values() for v in options.secrets()]
    return secrets.redact(text, values)


def table_path_from_uri(table_uri: str) -> str:
    """A local absolute path for a plain path or a `file:` URI; ValueError for other schemes."""
    parsed = urlparse(table_uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{table_uri}: file URIs with a host are not supported")
        return os.path.abspath(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:  # `C:` drive letters are paths, not schemes
        raise ValueError(
            f"{table_uri}: this operation needs a local table (a path or a file:// URI); storage "
            f"scheme {parsed.scheme!r} is not supported here yet")
    return os.path.abspath(table_uri)
