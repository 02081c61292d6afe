"""Change data feed (`delta.enableChangeDataFeed`): which rows each commit inserted, updated or deleted.

Write side: a commit that rewrites files (DELETE of some rows of a file, MERGE, replace_where) also
writes the rows it changed, each with `_change_type` (insert, update_preimage, update_postimage,
delete), into `_change_data/` files named by `cdc` actions. Commits that only add whole files or
remove whole files need none: their adds are the inserts and their removes the deletes.

Read side (`commit_changes`): per commit, its `cdc` files when it has any, otherwise its data-changing
adds (inserts) and removes (deletes), with the commit's version and timestamp. A commit of another
writer that marked rows in deletion vectors without writing change data (a `remove` and an `add` of the
same file with different DVs) changed exactly the rows in one DV and not the other: they are given as
that file read through an inline DV that deletes every other row (`by_rows`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .actions import commit_objects
from .file_actions import FILES_SCHEMA
from .errors import InvalidTableError, UnsupportedFeatureError, VersionNotFoundError
from .paths import decode_path
from .file_actions import files_table
from .snapshot import Snapshot
from .storage.log_store import LogStore
from .table_configuration import CHANGE_DATA_FEED_KEY, flag

ENABLE_KEY = CHANGE_DATA_FEED_KEY
CHANGE_TYPE_COLUMN = "_change_type"
COMMIT_VERSION_COLUMN = "_commit_version"
COMMIT_TIMESTAMP_COLUMN = "_commit_timestamp"
CHANGE_DATA_DIR = "_change_data"
INSERT, DELETE = "insert", "delete"
UPDATE_PREIMAGE, UPDATE_POSTIMAGE = "update_preimage", "update_postimage"


def is_enabled(configuration: dict[str, str] | None) -> bool:
    return flag(configuration, ENABLE_KEY)


def with_change_type(schema_json: dict[str, Any]) -> dict[str, Any]:
    """The schema of change data files: the table's columns plus `_change_type`."""
    return {**schema_json, "fields": [*schema_json["fields"],
                                      {"name": CHANGE_TYPE_COLUMN, "type": "string", "nullable": True,
                                       "metadata": {}}]}


@dataclass
class CommitChanges:
    """One commit's changed rows, as files: change data files (`cdc`, each row carries its change
    type), or else whole files inserted (`inserted`) and deleted (`deleted`). Tables in FILES_SCHEMA."""
    version: int
    timestamp: int
    cdc: pa.Table = field(default_factory=FILES_SCHEMA.empty_table)
    inserted: pa.Table = field(default_factory=FILES_SCHEMA.empty_table)
    deleted: pa.Table = field(default_factory=FILES_SCHEMA.empty_table)
    # some file of `inserted` / `deleted` stands for some of its rows (a DV selects them): the same
    # path may appear in several commits, so each such commit is read on its own
    by_rows: bool = False


def _enabled_at(store: LogStore, version: int) -> bool:
    try:
        return is_enabled(Snapshot.load(store.table_uri, version=version, store=store).configuration)
    except VersionNotFoundError:
        return False


def commit_changes(store: LogStore, start_version: int, end_version: int | None = None
                   ) -> tuple[Snapshot, list[CommitChanges]]:
    """The snapshot at `end_version` (default: the latest) and the changes of every commit from
    `start_version` to it, both included. Refuses, naming the version, a range that reaches back past
    the log's retention, a commit that rewrote rows while the feed was off (its rows could not be told
    apart from copies), and files whose deletion vectors would make whole-file changes wrong."""
    root = store.table_uri
    end_snapshot = Snapshot.load(root, version=end_version, store=store)
    end = end_snapshot.version
    start = int(start_version)
    if start < 0 or start > end:
        raise InvalidTableError(
            f"{root}: changes need 0 <= start_version <= end_version (the latest version is "
            f"{end_snapshot.version}); got {start_version}..{end}.")
    enabled: bool | None = False if start == 0 else None  # None: as at start-1, looked up if needed
    file_times = {f.version: f.modification_time for f in store.list_from(start) if f.kind == "commit"}
    out = []
    for v in range(start, end + 1):
        name = "%020d.json" % v
        try:
            data = store.read(name)
        except FileNotFoundError:
            raise VersionNotFoundError(
                f"{root}: the commit of version {v} is no longer in the log (cleaned up after "
                f"delta.logRetentionDuration) or does not exist; read changes from a later version.") from None
        commit = CommitChanges(v, 0)
        cdc, adds, removes = [], [], []
        for _, obj in commit_objects(data, f"{root}/_delta_log/{name}"):
            key, value = next(iter(obj.items()))
            if key == "commitInfo":
                commit.timestamp = int(value.get("inCommitTimestamp") or value.get("timestamp") or 0)
            elif key == "metaData":
                enabled = is_enabled(value.get("configuration"))
            elif key == "cdc":
                cdc.append(value)
            elif key == "add" and value.get("dataChange", True):
                adds.append(value)
            elif key == "remove" and value.get("dataChange", True):
                removes.append(value)
        if not commit.timestamp:  # no commitInfo time (as delta-rs reads it): the file's
            commit.timestamp = file_times.get(v, 0)
        if cdc:
            commit.cdc = files_table(cdc)
        else:
            if any(a.get("deletionVector") for a in adds + removes):
                adds, removes = _row_changes(store, adds, removes)
                commit.by_rows = True
            if removes and enabled is None:
                enabled = _enabled_at(store, start - 1)
            if removes and not enabled:
                raise UnsupportedFeatureError(
                    f"{root}: version {v} removed files while the change data feed was off "
                    f"({ENABLE_KEY} was not true), so the rows it changed are not recorded; read changes "
                    f"from a version after the feed was switched on.")
            commit.inserted, commit.deleted = files_table(adds), files_table(removes)
        out.append(commit)
    return end_snapshot, out


def _row_changes(store: LogStore, adds: list[dict[str, Any]], removes: list[dict[str, Any]]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A commit's inserted and deleted rows as (adds, removes) read through their DVs: a file added
    with a DV inserted its rows the DV keeps, a file removed with one deleted its live rows, and a file
    both removed and added (its DV replaced) deleted the rows only the new DV holds and brought back
    the rows only the old one held."""
    from pyroaring import BitMap64

    from .deletion_vectors import inline_descriptor, read_deletion_vector
    from .storage.files import parquet_metadata
    from .paths import absolute_file_path

    removed = {decode_path(r["path"]): r for r in removes}
    out_adds, out_removes, paired = [], [], set()
    for a in adds:
        path = decode_path(a["path"])
        r = removed.get(path)
        if r is None:
            out_adds.append(a)
            continue
        paired.add(path)
        old = read_deletion_vector(store, r["deletionVector"]) if r.get("deletionVector") else BitMap64()
        new = read_deletion_vector(store, a["deletionVector"]) if a.get("deletionVector") else BitMap64()
        rows = _num_records(a) or _num_records(r)
        if rows is None:
            rows = parquet_metadata(absolute_file_path(store.table_uri, path),
                                    store.options).num_rows
        every = BitMap64()
        every.add_range(0, rows)
        for changed, bucket in ((new - old, out_removes), (old - new, out_adds)):
            if len(changed):
                # read the file keeping only the changed rows: the DV deletes all the others
                bucket.append({**a, "deletionVector": inline_descriptor(every - changed)})
    out_removes += [r for r in removes if decode_path(r["path"]) not in paired]
    return out_adds, out_removes


def _num_records(action: dict[str, Any]) -> int | None:
    import json

    try:
        return json.loads(action.get("stats") or "{}").get("numRecords")
    except ValueError:
        return None
