"""The log store: list, read and atomically create the files of a table's `_delta_log`.

Everything the engine does with the log goes through `LogStore`, which speaks only in file *names*
relative to `_delta_log/`. Object stores fit behind the same five calls: `list_from` maps to a
prefix listing that starts after `%020d` (S3 `ListObjectsV2(StartAfter=...)`, GCS/Azure likewise),
`read` to GET, `write_if_absent` to a conditional create (S3 `PUT If-None-Match: *`, GCS
`ifGenerationMatch=0`, Azure rename-without-overwrite, HDFS rename) and `write_atomic` to a plain
PUT (object stores publish whole objects). A new store subclasses `LogStore` and is returned by
`stores.log_store_for` for its URI scheme.
"""
from __future__ import annotations

import os
import re
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, BinaryIO

from .options import StorageOptions
from ..errors import NotATableError
from .files import check_inside

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
# Temporary files of atomic writes; a writer killed between write and rename leaves one behind.
TEMP_PREFIX = ".tmp-"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CRC = re.compile(r"^(\d{20})\.crc$")
_CHECKPOINT_SINGLE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_CHECKPOINT_MULTI = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_CHECKPOINT_V2 = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)$")


class WriteOutcomeUnknown(OSError):
    """A write the store never answered (a timeout, a reset connection after the request was sent): it
    may have landed or not, and may still land. Only the stored object can tell."""


@dataclass(frozen=True)
class LogFile:
    """One file of `_delta_log`. `kind` is commit, checkpoint, crc, last_checkpoint or other."""
    name: str
    version: int | None
    kind: str
    size: int = 0
    modification_time: int = 0  # ms since the epoch
    part: int | None = None       # multi-part checkpoints: this part (1-based) ...
    num_parts: int | None = None  # ... of how many
    v2: bool = False              # a v2 checkpoint (`<version>.checkpoint.<uuid>.json|parquet`)


def classify(name: str) -> tuple[int | None, str, int | None, int | None, bool]:
    """(version, kind, part, num_parts, v2) for a log file name."""
    if m := _COMMIT.match(name):
        return int(m.group(1)), "commit", None, None, False
    if m := _CHECKPOINT_SINGLE.match(name):
        return int(m.group(1)), "checkpoint", None, None, False
    if m := _CHECKPOINT_MULTI.match(name):
        return int(m.group(1)), "checkpoint", int(m.group(2)), int(m.group(3)), False
    if m := _CHECKPOINT_V2.match(name):
        return int(m.group(1)), "checkpoint", None, None, True
    if m := _CRC.match(name):
        return int(m.group(1)), "crc", None, None, False
    if name == LAST_CHECKPOINT:
        return None, "last_checkpoint", None, None, False
    return None, "other", None, None, False


class LogStore(ABC):
    """Access to one table's `_delta_log` and its data files: the handle readers and writers of the table
    share. Names are relative to that folder; `options` are the storage options it reaches the table with."""

    table_uri: str
    options: StorageOptions = StorageOptions()

    @abstractmethod
    def list_from(self, version: int = 0) -> list[LogFile]:
        """Versioned log files with version >= `version`, sorted by (version, name); then
        `_last_checkpoint` if present. Raises NotATableError when `_delta_log` does not exist."""

    @abstractmethod
    def read(self, name: str) -> bytes:
        """The whole file; FileNotFoundError if absent."""

    @abstractmethod
    def write_if_absent(self, name: str, data: bytes) -> None:
        """Create `name` with `data` only if it does not exist, atomically and durably; otherwise raise
        FileExistsError and leave the existing file untouched. Safe when several processes race."""

    @abstractmethod
    def write_atomic(self, name: str, data: bytes) -> None:
        """Create or replace `name` so that readers see either the old or the whole new content."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Remove `name`; no error when it is already gone."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether `_delta_log` exists."""

    def task_options(self) -> dict[str, str]:
        """What a Spark task needs to reach this table as this process does: the store's options over
        the cloud variables of this process's environment, so executors need no credentials of their
        own (they travel in task closures, never in a query plan or a log)."""
        return self.options.over(StorageOptions.from_environment()).as_dict()

    def file_path(self, name: str) -> str:
        """A path or URI of the log file that pyarrow can open (used for Parquet checkpoints)."""
        raise NotImplementedError

    def parquet_source(self, name: str) -> Any:
        """What pyarrow reads a Parquet log file (a checkpoint) from: a path, or its bytes."""
        return self.file_path(name)

    # -- the table's data files (paths relative to the table root, decoded)

    @abstractmethod
    def open_data_file(self, relative: str) -> BinaryIO:
        """A new data file for writing; it must not exist yet."""

    @abstractmethod
    def close_data_file(self, handle: BinaryIO, relative: str) -> tuple[int, int]:
        """Finish a file from `open_data_file`, durably; returns (size, modification time in ms)."""

    @abstractmethod
    def delete_data_file(self, relative: str) -> None:
        """Remove a data file; no error when it is already gone."""

    @abstractmethod
    def read_data_range(self, path: str, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` of a table file (relative to the root, or absolute); fewer
        when the file ends first (a deletion vector inside a DV file)."""

    def write_table_file(self, relative: str, data: bytes, if_absent: bool) -> None:
        """Write a small file of the table outside `_delta_log` (Iceberg's metadata), whole: with
        `if_absent`, only when no such file exists (FileExistsError otherwise), else replacing it."""
        raise NotImplementedError


class LocalLogStore(LogStore):
    """The local file system. Atomic create = write a temp file, fsync, `os.link` to the final name
    (link fails if the name exists, so exactly one racing writer wins), fsync the folder."""

    def __init__(self, table_path: str):
        self.table_uri = os.path.abspath(table_path)
        self.log_path = os.path.join(self.table_uri, LOG_DIR)

    def __repr__(self) -> str:
        return f"LocalLogStore({self.table_uri!r})"

    def exists(self) -> bool:
        return os.path.isdir(self.log_path)

    def file_path(self, name: str) -> str:
        return os.path.join(self.log_path, name)

    def list_from(self, version: int = 0) -> list[LogFile]:
        try:
            names = os.listdir(self.log_path)
        except (FileNotFoundError, NotADirectoryError):
            raise NotATableError(
                f"{self.table_uri} is not a Delta table: it has no {LOG_DIR} folder. Check the path, or "
                f"create the table by writing to it first.") from None
        prefix = "%020d" % version
        out: list[LogFile] = []
        for name in names:
            if name.startswith("."):  # Hadoop's `.name.crc` side files, temp files
                continue
            if name < prefix and name[0].isdigit():  # older versions: skip before parsing the name
                continue
            v, kind, part, num_parts, v2 = classify(name)
            if kind == "other":
                continue
            try:
                st = os.stat(os.path.join(self.log_path, name))
            except FileNotFoundError:  # deleted by a concurrent cleanup
                continue
            out.append(LogFile(name, v, kind, st.st_size, st.st_mtime_ns // 1_000_000, part, num_parts, v2))
        out.sort(key=lambda f: (f.version is None, f.version or 0, f.name))
        return out

    def read(self, name: str) -> bytes:
        with open(os.path.join(self.log_path, name), "rb") as f:
            return f.read()

    def _write_temp(self, data: bytes, create_log: bool = False) -> str:
        # Only the commit of version 0 creates `_delta_log`: any later file written into a missing log
        # folder would recreate a table someone deleted, holding that one file (no reader can load it).
        if create_log:
            os.makedirs(self.log_path, exist_ok=True)
        tmp = os.path.join(self.log_path, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            raise NotATableError(
                f"{self.table_uri}: the table's {LOG_DIR} folder is gone (the table was deleted while this "
                f"writer ran); nothing was written. Re-run to create the table anew.") from None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        return tmp

    def _fsync_dir(self) -> None:
        fsync_dir(self.log_path)

    def write_if_absent(self, name: str, data: bytes) -> None:
        tmp = self._write_temp(data, create_log=classify(name)[:2] == (0, "commit"))
        try:
            os.link(tmp, os.path.join(self.log_path, name))  # FileExistsError when another writer won
        finally:
            os.unlink(tmp)
        self._fsync_dir()

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = self._write_temp(data)
        try:
            os.replace(tmp, os.path.join(self.log_path, name))
        except BaseException:
            os.unlink(tmp)
            raise
        self._fsync_dir()

    def delete(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.log_path, name))
        except FileNotFoundError:
            pass

    def _data_path(self, relative: str) -> str:
        return os.path.join(self.table_uri, *relative.split("/"))

    def open_data_file(self, relative: str) -> BinaryIO:
        full = self._data_path(relative)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        return open(full, "xb")

    def close_data_file(self, handle: BinaryIO, relative: str) -> tuple[int, int]:
        handle.flush()
        os.fsync(handle.fileno())  # data files are durable before the commit that names them
        handle.close()
        full = self._data_path(relative)
        fsync_dir(os.path.dirname(full))
        st = os.stat(full)
        return st.st_size, st.st_mtime_ns // 1_000_000

    def delete_data_file(self, relative: str) -> None:
        check_inside(self._data_path(relative), self.table_uri)  # never through a symlink out of the table
        try:
            os.unlink(self._data_path(relative))
        except FileNotFoundError:
            pass

    def write_table_file(self, relative: str, data: bytes, if_absent: bool) -> None:
        full = self._data_path(relative)
        check_inside(full, self.table_uri)
        folder = os.path.dirname(full)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            if if_absent:
                os.link(tmp, full)  # FileExistsError when another writer made it first
            else:
                os.replace(tmp, full)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        fsync_dir(folder)

    def read_data_range(self, path: str, offset: int, length: int) -> bytes:
        from ..paths import file_path_of

        with open(file_path_of(self.table_uri, path), "rb") as f:
            f.seek(offset)
            return f.read(length)


def arrow_owned_buffer(data: bytes) -> Any:
    """`data` copied into memory Arrow owns. A buffer wrapping a Python object (`pa.py_buffer`) must take
    the GIL when Arrow frees it; freed by one of Arrow's pool threads as the process exits, that waits
    forever on the GIL the exiting thread holds (seen: a process that never ended)."""
    import pyarrow as pa

    out = pa.BufferOutputStream()
    out.write(data)
    return out.getvalue()




def fsync_dir(path: str) -> None:
    """Make a folder's new entries durable (a created or renamed file is durable only then)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on folders
        pass
    finally:
        os.close(fd)
