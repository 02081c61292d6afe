"""The table state at one version: log segment (checkpoint + contiguous commits) and its replay.

Live files and tombstones are kept as Arrow tables (`file_actions.FILES_SCHEMA`,
`file_actions.TOMBSTONES_SCHEMA`). Reconciliation is columnar: a checkpoint is already reconciled, so
only the paths the later commits touch need deciding, and among those the action with the highest
sequence number (last in log order) wins, found with an Arrow group-by.
"""
from __future__ import annotations

import bisect
import copy
import json
import contextlib
import gc
import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Iterable
from urllib.parse import unquote

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from .actions import (SUPPORTED_READER_FEATURES, AddFile, DomainMetadata, Metadata, Protocol, check_action_fields,
                      commit_objects)
from .checkpoint_read import read_checkpoint, read_last_checkpoint
from .checksum import verify_checksum
from .errors import (ChecksumMismatchError, CorruptLogError, DataFileNotFoundError, NotATableError,
                     UnsupportedFeatureError, VersionNotFoundError)
from .deletion_vectors import file_keys
from .file_actions import (ADD_LINE_PREFIX, FILES_SCHEMA, TOMBSTONES_SCHEMA, FileActionTypeError, adds_from_json,
                           files_table, remove_deletion_vectors, removes_table)
from .paths import file_path_of
from .log_segment import LogListing
from .storage.log_store import LogStore
from .table_configuration import parse_interval_ms, TableConfiguration
from .storage import log_store_for

log = logging.getLogger(__name__)

DEFAULT_TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000

def tombstone_retention_ms(configuration: dict[str, str]) -> int:
    raw = configuration.get("delta.deletedFileRetentionDuration")
    if raw is None:
        return DEFAULT_TOMBSTONE_RETENTION_MS
    try:
        return parse_interval_ms(raw)
    except ValueError:
        return DEFAULT_TOMBSTONE_RETENTION_MS


def _to_ms(ts: datetime | int | float | str) -> int:
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=timezone.utc)
        return int(ts.timestamp() * 1000)
    return int(ts)


def decode_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array:
    """URI-decode log paths, vectorised for the common case of paths without any `%`."""
    arr = paths.combine_chunks() if isinstance(paths, pa.ChunkedArray) else paths
    has_escape = pc.match_substring(arr, "%")
    if not pc.any(has_escape).as_py():
        return arr
    return pa.array([unquote(p) if e else p for p, e in zip(arr.to_pylist(), has_escape.to_pylist())],
                    pa.string())




def reconcile(base_files: pa.Table, base_tombstones: pa.Table,
              new_adds: pa.Table, removes: list[dict[str, Any]],
              add_seq: list[int], remove_seq: list[int]) -> tuple[pa.Table, pa.Table]:
    """Apply later file actions (adds as `files_table` gives them, removes as dicts, with their log-order
    sequence numbers) to a reconciled state."""
    if not new_adds.num_rows and not removes:
        return base_files, base_tombstones
    new_removes = removes_table(removes)
    # A file is its path together with its deletion vector: an update of a file's DV removes
    # (path, old DV) and adds (path, new DV) in one commit.
    add_keys = file_keys(decode_paths(new_adds.column("path")), new_adds.column("deletion_vector"))
    if not removes and pc.count_distinct(add_keys, mode="all").as_py() == len(add_keys):
        touched = add_keys  # appends only, no file added twice: every add wins
    else:
        remove_keys = file_keys(decode_paths(new_removes.column("path")), remove_deletion_vectors(removes))
        keys = pa.table({
            "key": pa.concat_arrays([add_keys, remove_keys]),
            "seq": pa.array(add_seq + remove_seq, pa.int64()),
        })
        winners = keys.group_by("key").aggregate([("seq", "max")]).column("seq_max")
        new_adds = new_adds.filter(pc.is_in(pa.array(add_seq, pa.int64()), value_set=winners))
        new_removes = new_removes.filter(pc.is_in(pa.array(remove_seq, pa.int64()), value_set=winners))
        touched = keys.column("key")
    files = _compact(pa.concat_tables([_untouched(base_files, touched), new_adds]))
    tombstones = _compact(pa.concat_tables([_untouched(base_tombstones, touched), new_removes]))
    return files, tombstones


def _untouched(state: pa.Table, touched: pa.Array) -> pa.Table:
    """The rows of a reconciled state whose file the later actions do not touch."""
    if not state.num_rows:
        return state
    keys = file_keys(decode_paths(state.column("path")), state.column("deletion_vector"))
    return _keep(state, pc.invert(pc.is_in(keys, value_set=touched)))


def _keep(table: pa.Table, mask: pa.Array) -> pa.Table:
    # Appends touch no existing path: skip copying the whole state.
    return table if not table.num_rows or pc.all(mask).as_py() else table.filter(mask)


def _compact(table: pa.Table) -> pa.Table:
    # Snapshots built by many `apply` calls would otherwise carry one chunk per commit, which makes
    # every compute call on them slow.
    return table.combine_chunks() if table.num_rows and table.column(0).num_chunks > 16 else table


# ------------------------------------------------------------------------------------- snapshot

class Snapshot:
    """An immutable view of a table at one version. Build it with `Snapshot.load`."""

    # Set by `load`: `_last_checkpoint` named a checkpoint the log lacks (the next commit removes it).
    stale_last_checkpoint = False

    def __init__(self, store: LogStore, version: int, timestamp: int, protocol: Protocol,
                 metadata: Metadata, files: pa.Table, tombstones: pa.Table,
                 app_transactions: dict[str, int], app_transaction_updated: dict[str, int | None],
                 domain_metadata: dict[str, DomainMetadata]):
        self.store = store
        self.table_uri = store.table_uri
        self.version = version
        self.timestamp = timestamp
        self.protocol = protocol
        self.metadata = metadata
        self.files = files
        # Expired tombstones are dropped here (vacuum may delete their files); the cut only moves
        # forward, so `apply` can start from this already-filtered table.
        self.tombstones = _unexpired(tombstones, metadata.configuration)
        self.app_transactions = app_transactions
        self.app_transaction_updated = app_transaction_updated
        self.domain_metadata = domain_metadata

    def __repr__(self) -> str:
        return f"Snapshot({self.table_uri!r}, version={self.version}, files={self.num_files})"

    # ---- loading

    @classmethod
    def load(cls, table_uri: str, version: int | None = None,
             timestamp: datetime | int | float | str | None = None, *,
             storage_options: dict[str, Any] | None = None, store: LogStore | None = None) -> "Snapshot":
        """The table at its latest version, at `version`, or at the last commit at or before
        `timestamp` (datetime, ISO string or ms since the epoch). An object-store URI takes delta-rs
        style `storage_options`; `store` reuses a table's store."""
        store = store or log_store_for(table_uri, storage_options)
        if version is not None and timestamp is not None:
            raise ValueError("give either version or timestamp, not both")
        if timestamp is not None:
            from .history import version_at_timestamp
            version = version_at_timestamp(store, _to_ms(timestamp))
        return _load(store, version)

    # ---- views of the same version

    def restricted_to(self, files: pa.Table) -> "Snapshot":
        """This snapshot as if `files` (rows of `files`) were its only live files: for reading just those."""
        view = copy.copy(self)
        view.files = files
        return view

    def with_metadata(self, metadata: Metadata) -> "Snapshot":
        """This snapshot read under other metadata (the one a commit writes, a schema with more columns):
        readers then read its files in that schema, with nulls where a file lacks a column."""
        view = copy.copy(self)
        view.metadata = metadata
        return view

    def with_extra_columns(self, fields: list[dict[str, Any]]) -> "Snapshot":
        """This snapshot with `fields` (Spark StructField JSON) after its columns, e.g. hidden row tracking
        columns, so that every reader reads them too."""
        schema = {**self.schema_json, "fields": [*self.schema_json["fields"], *fields]}
        return self.with_metadata(replace(self.metadata, schema_string=json.dumps(schema)))

    # ---- derived

    @property
    def schema_json(self) -> dict[str, Any]:
        return self.metadata.schema_json

    @property
    def arrow_schema(self) -> pa.Schema:
        from .schema import to_arrow_schema  # written by the schema module's owner
        return to_arrow_schema(self.schema_json)

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.metadata.configuration)

    @property
    def table_configuration(self) -> TableConfiguration:
        """What the table is configured to do (its features, properties and protocol needs)."""
        return TableConfiguration(self.metadata, self.protocol)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    @property
    def size_bytes(self) -> int:
        return int(pc.sum(self.files.column("size")).as_py() or 0) if self.files.num_rows else 0

    def add_files(self) -> list[AddFile]:
        out = []
        for row in self.files.to_pylist():
            out.append(AddFile(
                path=row["path"], partition_values=dict(row["partition_values"] or []),
                size=row["size"], modification_time=row["modification_time"],
                data_change=row["data_change"], stats=row["stats"],
                tags=dict(row["tags"]) if row["tags"] is not None else None,
                deletion_vector=row["deletion_vector"], base_row_id=row["base_row_id"],
                default_row_commit_version=row["default_row_commit_version"]))
        return out

    def file_uris(self) -> list[str]:
        """Absolute, URI-decoded local paths of the live files."""
        root = self.table_uri
        return [file_path_of(root, p) for p in decode_paths(self.files.column("path")).to_pylist()]

    def missing_file_error(self, path: str) -> DataFileNotFoundError:
        """What to tell a reader of this version whose data file `path` is gone."""
        try:
            latest = max(f.version for f in self.store.list_from(self.version) if f.version is not None)
        except Exception:
            latest = self.version
        hours = tombstone_retention_ms(self.configuration) / 3_600_000
        if latest > self.version:
            why = (f"VACUUM removed it: a later version (the latest is {latest}) no longer needs it, and VACUUM "
                   f"deletes such files once they are older than the table's retention, "
                   f"delta.deletedFileRetentionDuration = {hours:g} hours (or a shorter retention it was "
                   f"forced to). Versions older than the retention cannot be read. Read a later version, or "
                   f"raise the retention before the next VACUUM to keep older versions readable.")
        else:
            why = ("It is the table's latest version, whose files VACUUM never deletes: the file was deleted or "
                   "moved outside the table's log. Restore it, or RESTORE the table to a version whose files "
                   "all exist.")
        return DataFileNotFoundError(f"{self.table_uri}: version {self.version} needs data file {path}, which no "
                                     f"longer exists. {why}")

    # ---- next version without re-reading the log

    def apply(self, version: int, actions: Iterable[Any], timestamp_ms: int | None = None) -> "Snapshot":
        """The snapshot at `version` = this one plus one commit's `actions` (dataclasses from actions.py)."""
        if version != self.version + 1:
            raise ValueError(f"apply: version {version} does not follow {self.version}")
        replay = _Replay()
        replay.protocol, replay.metadata = self.protocol.to_dict(), self.metadata.to_dict()
        replay.txns = {k: (v, self.app_transaction_updated.get(k)) for k, v in self.app_transactions.items()}
        replay.domains = {k: d.to_dict() for k, d in self.domain_metadata.items()}
        replay.add_action_dicts(((a.KEY, a.to_dict()) for a in actions), version)
        return replay.build(self.store, version, timestamp_ms if timestamp_ms is not None else
                            int(time.time() * 1000), self.files, self.tombstones)


def _unexpired(tombstones: pa.Table, configuration: dict[str, str]) -> pa.Table:
    if not tombstones.num_rows:
        return tombstones
    cutoff = int(time.time() * 1000) - tombstone_retention_ms(configuration)
    return tombstones.filter(pc.greater(tombstones.column("deletion_timestamp"), cutoff))


def _bad_action(source: str, lineno: int, why: Exception) -> CorruptLogError:
    return CorruptLogError(f"{source}, line {lineno}: not a valid Delta action ({why}). The commit file is "
                           f"corrupt or truncated.")


# A commit with at least this many add lines has them parsed by Arrow's JSON reader (file_actions):
# below it, starting the reader costs more than parsing the lines one by one (measured: 300,000 adds with
# stats load in 1.5 s line by line and 2.2 s by the reader at 1,000 adds a commit, 1.7 s and 1.7 s at
# 3,000, 2.4 s and 1.1 s at 30,000).
_ADDS_READ_AS_COLUMNS = 2048


class _Replay:
    """Accumulates commits after the checkpoint, in log order."""

    def __init__(self):
        self.protocol: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None
        self.txns: dict[str, tuple[int, int | None]] = {}
        self.domains: dict[str, dict[str, Any]] = {}
        self.add_tables: list[pa.Table] = []  # adds already in FILES_SCHEMA, in log order
        self.adds: list[dict[str, Any]] = []  # adds read as dicts, after those in add_tables
        self.removes: list[dict[str, Any]] = []
        self.add_seq: list[int] = []  # one per add (add_tables' rows, then self.adds), in that order
        self.remove_seq: list[int] = []
        # where each add read as a dict came from: (its index, file) per commit, its line per add
        self.add_sources: list[tuple[int, str]] = []
        self.add_lines: list[int] = []
        self.seq = 0
        self.commit_info: dict[str, Any] | None = None  # of the last commit read

    def add_action_dicts(self, pairs: Iterable[tuple[str, dict[str, Any]]], version: int) -> None:
        self.commit_info = None
        for key, value in pairs:
            self.seq += 1
            self._take(self.seq, key, value)

    def _take(self, seq: int, key: str, value: dict[str, Any]) -> None:
        if key == "add":
            self.adds.append(value)
            self.add_seq.append(seq)
        elif key == "remove":
            self.removes.append(value)
            self.remove_seq.append(seq)
        elif key == "metaData":
            self.metadata = value
        elif key == "protocol":
            self.protocol = value
        elif key == "txn":
            self.txns[value["appId"]] = (int(value["version"]), value.get("lastUpdated"))
        elif key == "domainMetadata":
            if value.get("removed"):
                self.domains.pop(value["domain"], None)
            else:
                self.domains[value["domain"]] = value
        elif key == "commitInfo":
            self.commit_info = value

    def add_commit(self, data: bytes, source: str, version: int) -> None:
        """One commit file's actions; an action's sequence number is its line's place in the log."""
        self.commit_info = None
        base = self.seq
        self.seq += data.count(b"\n") + 1
        if data.count(ADD_LINE_PREFIX) >= _ADDS_READ_AS_COLUMNS and self._add_commit_as_columns(data, source, base):
            return
        self._add_objects(commit_objects(data, source), source, base)

    def _add_objects(self, objects: Iterable[tuple[int, Any]], source: str, base: int) -> None:
        self.add_sources.append((len(self.adds), source))
        for lineno, obj in objects:
            try:
                key, value = next(iter(obj.items()))
                if key == "add":  # checked all at once, as a column (_flush_adds)
                    self.add_lines.append(lineno)
                else:
                    check_action_fields(key, value)
            except (ValueError, TypeError, AttributeError, StopIteration) as e:
                raise _bad_action(source, lineno, e) from None
            self._take(base + lineno, key, value)

    def _add_commit_as_columns(self, data: bytes, source: str, base: int) -> bool:
        """The commit's add lines read by Arrow's JSON reader, its other lines as dicts. False, having
        taken nothing, where that reading does not decide (then the commit is read line by line)."""
        text = np.frombuffer(data, np.uint8)
        newlines = np.flatnonzero(text == ord("\n"))
        starts = np.concatenate([[0], newlines + 1])
        ends = np.concatenate([newlines, [len(data)]])
        is_add = ends - starts >= len(ADD_LINE_PREFIX)
        for i, byte in enumerate(ADD_LINE_PREFIX):
            is_add &= text[np.minimum(starts + i, len(data) - 1)] == byte
        others = []
        for i in np.flatnonzero(~is_add & (ends > starts)).tolist():
            line = data[starts[i]:ends[i]]
            if line.strip():
                try:
                    others.append((i + 1, orjson.loads(line)))
                except ValueError:  # or a value spread over lines: commit_objects decides
                    return False
        if others:  # blank them: the JSON reader skips blank lines
            buffer = bytearray(data)
            for lineno, _ in others:
                buffer[starts[lineno - 1]:ends[lineno - 1]] = b" " * int(ends[lineno - 1] - starts[lineno - 1])
            adds = adds_from_json(bytes(buffer))
        else:
            adds = adds_from_json(data)
        add_lines = np.flatnonzero(is_add)
        if adds is None or adds.num_rows != len(add_lines):
            return False
        self._add_objects(others, source, base)
        self._flush_adds()
        self.add_tables.append(adds)
        self.add_seq.extend((add_lines + 1 + base).tolist())
        return True

    def _flush_adds(self) -> None:
        """The adds read as dicts into add_tables, naming the first bad one by its file and line."""
        if not self.adds:
            return
        try:
            self.add_tables.append(files_table(self.adds))
        except FileActionTypeError as e:
            for i, value in enumerate(self.adds):  # name the first add at fault, where it came from
                try:
                    check_action_fields("add", value)  # says which field
                    files_table([value])
                except (ValueError, TypeError) as why:
                    e = why
                    break
            else:
                i = 0
            if not self.add_lines:  # actions applied in memory, not read from a file
                raise CorruptLogError(f"an add action is invalid ({e})") from None
            first = [start for start, _ in self.add_sources]
            source = self.add_sources[bisect.bisect_right(first, i) - 1][1]
            raise _bad_action(source, self.add_lines[i], e) from None
        self.adds, self.add_sources, self.add_lines = [], [], []

    def _files_table(self) -> pa.Table:
        self._flush_adds()
        if not self.add_tables:
            return FILES_SCHEMA.empty_table()
        return self.add_tables[0] if len(self.add_tables) == 1 else pa.concat_tables(self.add_tables)

    def build(self, store: LogStore, version: int, timestamp: int, base_files: pa.Table,
              base_tombstones: pa.Table) -> Snapshot:
        where = f"{store.table_uri} at version {version}"
        if self.protocol is None:
            raise CorruptLogError(f"{where}: the log holds no protocol action; the table is corrupt.")
        if self.metadata is None:
            raise CorruptLogError(f"{where}: the log holds no metaData action; the table is corrupt.")
        try:
            protocol = Protocol.from_dict(self.protocol)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptLogError(f"{where}: invalid protocol action {self.protocol} ({e})") from None
        unsupported = protocol.unsupported_reader_features()
        if unsupported:
            raise UnsupportedFeatureError(
                f"{store.table_uri} needs reader feature(s) {', '.join(unsupported)} (protocol "
                f"minReaderVersion={protocol.min_reader_version}, readerFeatures="
                f"{protocol.reader_features or []}), which this engine does not support. Supported reader "
                f"features: reader versions 1 and 3 with {', '.join(sorted(SUPPORTED_READER_FEATURES))}. "
                f"Read it with an engine that supports them.")
        if not self.metadata.get("schemaString"):
            raise CorruptLogError(f"{where}: the metaData action has no schemaString; the table is corrupt.")
        try:
            metadata = Metadata.from_dict(self.metadata)
            schema = metadata.schema_json
            if not (isinstance(schema, dict) and isinstance(schema.get("fields"), list) and all(
                    isinstance(f, dict) and isinstance(f.get("name"), str) for f in schema["fields"])):
                raise ValueError("its schemaString is not a struct of named fields")
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptLogError(f"{where}: invalid metaData action ({e}); the table is corrupt.") from None
        files, tombstones = reconcile(base_files, base_tombstones, self._files_table(), self.removes,
                                      self.add_seq, self.remove_seq)
        return Snapshot(
            store, version, timestamp, protocol, metadata, files, tombstones,
            {k: v for k, (v, _) in self.txns.items()}, {k: u for k, (_, u) in self.txns.items()},
            {k: DomainMetadata.from_dict(d) for k, d in self.domains.items()})


@contextlib.contextmanager
def _collector_paused():
    """Replay makes a dict per action, hundreds of thousands of them, none in a reference cycle; the
    cyclic collector would otherwise walk all of them again every few hundred allocations (measured:
    a third of a 300,000-add load)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load(store: LogStore, version: int | None) -> Snapshot:
    if version is not None and version < 0:
        raise VersionNotFoundError(f"{store.table_uri}: version {version} does not exist (versions "
                                   f"start at 0)")
    return load_listed(store, list_log(store, version), version)


@dataclass(frozen=True)
class ListedLog:
    """What a load of the latest version (or of `version`) lists: the log from the checkpoint
    `_last_checkpoint` names (`start`), or from 0 when that checkpoint is gone (`stale`)."""
    listing: LogListing
    start: int
    stale: bool


def list_log(store: LogStore, version: int | None = None) -> ListedLog:
    last = read_last_checkpoint(store)
    start = last["version"] if last and (version is None or last["version"] <= version) else 0
    listing = LogListing(store.list_from(start))
    stale = start > 0 and (start not in listing.checkpoints or listing.latest() is None)
    if stale:
        # `_last_checkpoint` points at a checkpoint that is gone: list the whole log.
        listing, start = LogListing(store.list_from(0)), 0
    return ListedLog(listing, start, stale)


def load_listed(store: LogStore, listed: ListedLog, version: int | None = None) -> Snapshot:
    """The snapshot `listed` leads to (its latest version, or `version`)."""
    with _collector_paused():
        try:
            snapshot = _load_from(store, listed.listing, version)
        except ChecksumMismatchError:
            raise
        except CorruptLogError:
            if listed.start == 0:
                raise
            # A corrupt checkpoint may need an earlier one (or commits from 0) outside this listing.
            snapshot = _load_from(store, LogListing(store.list_from(0)), version)
    snapshot.stale_last_checkpoint = listed.stale
    return snapshot


def _load_from(store: LogStore, listing: LogListing, version: int | None) -> Snapshot:
    latest = listing.latest()
    if latest is None:
        raise NotATableError(
            f"{store.table_uri} is not a Delta table: {store.table_uri}/_delta_log holds no commit "
            f"(no NNN.json file). Check the path, or create the table by writing to it first.")
    target = latest if version is None else version
    if target > latest:
        raise VersionNotFoundError(
            f"{store.table_uri}: version {target} does not exist; the latest version is {latest}.")

    state, errors = None, []
    for cp_version, parts in listing.complete_checkpoints(target):
        try:
            state = read_checkpoint(store, parts)
            break
        except CorruptLogError as e:
            # Fall back to an earlier checkpoint or to the commits from 0.
            log.warning("%s; using an earlier checkpoint or the commits instead", e)
            errors.append(str(e))
    start = state.version + 1 if state else 0
    first_commit = min(listing.commits) if listing.commits else None
    if state is None and first_commit != 0:
        if not errors and (version is not None or listing.checkpoints):
            raise VersionNotFoundError(
                f"{store.table_uri}: version {target} cannot be reconstructed: commits before "
                f"{first_commit} were cleaned up and no checkpoint at or before {target} exists.")
        raise CorruptLogError(
            f"{store.table_uri}: commit 0 ({'%020d' % 0}.json) is missing and no usable checkpoint "
            f"exists" + (f" ({'; '.join(errors)})" if errors else "") + ".")

    replay = _Replay()
    if state is not None:
        replay.protocol, replay.metadata = state.protocol, state.metadata
        replay.txns, replay.domains = dict(state.txns), dict(state.domains)
    for v in range(start, target + 1):
        f = listing.commits.get(v)
        if f is None:
            raise CorruptLogError(
                f"{store.table_uri}: the log is missing version {v} ({'%020d' % v}.json) between "
                f"{start} and {target}; versions must be contiguous. The table is corrupt.")
        replay.add_commit(store.read(f.name), f"{store.table_uri}/_delta_log/{f.name}", v)

    from .history import commit_timestamp
    timestamp = commit_timestamp(listing, target, replay.commit_info)
    base_files = state.files if state else FILES_SCHEMA.empty_table()
    base_tombs = state.tombstones if state else TOMBSTONES_SCHEMA.empty_table()
    snap = replay.build(store, target, timestamp, base_files, base_tombs)
    if target in listing.crcs:
        verify_checksum(store, snap)
    return snap
