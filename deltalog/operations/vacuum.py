"""VACUUM: delete data files that no retained version of the table needs.

Kept: the live files and their deletion vector files, and every file (and DV file) removed less than
the retention ago (time travel to versions in
the retention window still reads them). Deleted: other files under the table older than the cutoff —
expired tombstones and orphans of failed writers. Names starting with `_` or `.` are not the table's
data (the log, checkpoints, Hadoop side files) and are left alone, except partition folders
(`_col=value`) and this engine's own write staging area. The retention defaults to the table's
`delta.deletedFileRetentionDuration` (1 week); a shorter one is refused unless forced, because a
concurrent reader or writer of an older version may still need the files.
"""
from __future__ import annotations

import logging
import os
import time

import pyarrow.fs as pafs

from ..storage import files as fs
from ..actions import commit_objects
from ..change_data import CHANGE_DATA_DIR
from ..deletion_vectors import dv_file_path
from ..errors import CorruptLogError, InvalidTableError, UnsafePathError, UnsupportedFeatureError
from ..paths import ICEBERG_METADATA_DIR, decode_path, is_absolute_path
from ..snapshot import Snapshot, tombstone_retention_ms
from ..storage.log_store import LOG_DIR, TEMP_PREFIX
from ..storage.log_store import LogStore
from ..storage.options import StorageOptions
from ..table import DeltaTable, as_table

log = logging.getLogger(__name__)

STAGING_DIR = "_delta_staging"  # the Spark writer's staging folder (deltalog/spark/writer.py)


def _removed_since(snapshot: Snapshot, cutoff_ms: int) -> set[str]:
    """Decoded relative paths of files removed after `cutoff_ms`, from the snapshot's tombstones and
    from every commit file still in the log (the snapshot drops tombstones older than the table's
    retention, which may be shorter than the one asked for)."""
    out = set()
    t = snapshot.tombstones
    for path, ts, dv in zip(t.column("path").to_pylist(), t.column("deletion_timestamp").to_pylist(),
                            t.column("deletion_vector").to_pylist()):
        if (ts or 0) > cutoff_ms:
            out.add(decode_path(path))
            dv_file = dv_file_path(dv)
            if dv_file:
                out.add(dv_file)
    store = snapshot.store
    for f in store.list_from(0):
        if f.kind != "commit" or f.version is None or f.version > snapshot.version:
            continue
        if f.modification_time and f.modification_time < cutoff_ms - 86_400_000:
            continue  # a commit written long before the cutoff holds no remove after it
        try:
            data = store.read(f.name)
        except FileNotFoundError:
            continue
        if b'"remove"' not in data:
            continue
        try:
            objects = [obj for _, obj in commit_objects(data, f.name)]
        except CorruptLogError:
            continue
        for obj in objects:
            r = obj.get("remove") if isinstance(obj, dict) else None
            if r and (r.get("deletionTimestamp") or 0) > cutoff_ms:
                out.add(decode_path(r["path"]))
                dv_file = dv_file_path(r.get("deletionVector"))
                if dv_file:  # versions in the retention read the file with the rows its DV deleted
                    out.add(dv_file)
    return out


def _is_partition_folder(name: str) -> bool:
    return "=" in name and not name.startswith(".")


def _considered(dirs: list[str], name: str) -> bool:
    """Whether vacuum looks at a file in these folders: data files (also in partition folders and the
    change data folder) and what a killed writer left in a staging folder; never the log, nor other
    hidden files."""
    if dirs[:1] == [STAGING_DIR] or dirs[:2] == [CHANGE_DATA_DIR, STAGING_DIR]:
        return True  # a killed writer's staging folder, at the root or under the change data folder
    if dirs[:1] == [ICEBERG_METADATA_DIR]:
        return False  # Iceberg's metadata (table_format: iceberg): expired with its snapshots below
    if name.startswith((".", "_")):
        return False
    # change data files are in no version's file list: like removed files, they go once older
    # than the retention (reading the changes of such old versions is then refused by name)
    return all((i == 0 and d == CHANGE_DATA_DIR) or not d.startswith(("_", ".")) or _is_partition_folder(d)
               for i, d in enumerate(dirs))


# A `.tmp-*` file in the log younger than this may belong to a commit being written right now.
LOG_TEMP_MIN_AGE_MS = 3_600_000


def _candidates(root: str, options: StorageOptions):
    """(relative path, URI or path, mtime ms, size) of every file vacuum may consider: one listing of
    the table, on local disk or an object store."""
    now = time.time() * 1000
    for info in fs.list_files(root, recursive=True, storage_options=options):
        if info.type != pafs.FileType.File:
            continue
        *dirs, name = info.path.split("/")
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0
        if dirs[:1] == [LOG_DIR]:
            # temporary files a killed writer left in `_delta_log` (never part of any version)
            if len(dirs) == 1 and name.startswith(TEMP_PREFIX) and now - mtime >= LOG_TEMP_MIN_AGE_MS:
                yield info.path, fs.join(root, info.path), mtime, info.size or 0
            continue
        if _considered(dirs, name):
            yield info.path, fs.join(root, info.path), mtime, info.size or 0


def _empty_staging_dirs(root: str, cutoff_ms: int) -> list[str]:
    """Empty folders a killed Spark writer left in a staging area (it creates its folder before the
    executors write anything), older than the cutoff; deepest first."""
    out = []
    for area in (STAGING_DIR, f"{CHANGE_DATA_DIR}/{STAGING_DIR}"):
        for folder, subdirs, files in os.walk(os.path.join(root, area), topdown=False):
            if not files and all(not os.path.isdir(os.path.join(folder, d)) for d in subdirs) \
                    and not os.path.islink(folder) and os.stat(folder).st_mtime * 1000 < cutoff_ms:
                out.append(os.path.relpath(folder, root) + "/")
    return out


def _remove_empty_dirs(root: str, rel_files: list[str], cutoff_ms: int) -> int:
    """Local folders emptied by the deletes, and empty staging folders older than the cutoff (an
    object store has no folders to remove)."""
    if fs.is_object_store_uri(root):
        return 0
    removed = 0
    dirs = sorted({os.path.dirname(p) for p in rel_files + _empty_staging_dirs(root, cutoff_ms)
                   if os.path.dirname(p)}, key=len, reverse=True)
    for d in dirs:
        while d:
            full = os.path.join(root, d)
            try:
                os.rmdir(full)  # only succeeds when empty
                removed += 1
            except OSError:
                break
            d = os.path.dirname(d)
    return removed


def _expire_iceberg_snapshots(store: LogStore, deleted: list[str]) -> None:
    """Iceberg snapshots that name a file VACUUM deleted can no longer be read: expire them (a new
    metadata version without them) and delete the manifests only they used. A failure is logged; the
    files are gone either way, and the latest snapshot never names one."""
    root = store.table_uri
    try:
        from ..iceberg.expire import expire_snapshots_naming

        expired = expire_snapshots_naming(root, store, [fs.join(root, r) for r in deleted])
        if expired:
            log.info("%s: VACUUM expired %d Iceberg snapshot(s) whose files it deleted", root, expired)
    except Exception as exc:
        log.warning("%s: VACUUM could not expire the Iceberg snapshots naming the files it deleted: %s",
                    root, exc, exc_info=log.isEnabledFor(logging.DEBUG))


def vacuum(table: DeltaTable | str, retain_hours: float | None = None, dry_run: bool = False, force: bool = False,
           log_commits: bool = False) -> list[str]:
    """Delete the files no retained version needs; return their paths relative to the table (what
    would be deleted, with dry_run). With `log_commits`, a real run records VACUUM START and VACUUM END
    commits (commitInfo only), as delta-spark does when vacuum logging is on (off by default there too)."""
    table = as_table(table)
    snapshot = table.snapshot()
    root, options = snapshot.table_uri, table.store.options
    unsupported = snapshot.protocol.unsupported_writer_features(snapshot.metadata)
    if unsupported:
        # e.g. deletion vectors: their files are not data files this vacuum knows to keep
        raise UnsupportedFeatureError(
            f"{root}: VACUUM needs writer feature(s) {unsupported}, which this engine does not implement; "
            f"nothing was deleted.")
    table_retention = tombstone_retention_ms(snapshot.configuration)
    if retain_hours is None:
        retention = table_retention
    else:
        try:
            retention = int(float(retain_hours) * 3_600_000)
        except (TypeError, ValueError):
            raise InvalidTableError(f"{root}: VACUUM retain_hours must be a number of hours, got "
                                    f"{retain_hours!r}.") from None
        if retention < 0:
            raise InvalidTableError(f"{root}: VACUUM retain_hours must be >= 0, got {retain_hours}.")
        if retention < table_retention and not force:
            raise InvalidTableError(
                f"{root}: VACUUM with a retention of {retain_hours} hours is below the table's "
                f"delta.deletedFileRetentionDuration ({table_retention / 3_600_000:g} hours). Files "
                f"removed in that window may still be read by running queries or time travel. Use at "
                f"least {table_retention / 3_600_000:g} hours, lower the table property, or pass "
                f"force=true if no one reads older versions.")
    now = int(time.time() * 1000)
    cutoff = now - retention
    keep = {decode_path(p) for p in snapshot.files.column("path").to_pylist()}
    keep |= {p for p in map(dv_file_path, snapshot.files.column("deletion_vector").to_pylist()) if p}
    keep |= _removed_since(snapshot, cutoff)
    keep = {p for p in keep if not is_absolute_path(p)}
    doomed = [(rel, full, size) for rel, full, mtime, size in _candidates(root, options)
              if rel not in keep and mtime < cutoff]
    rels = sorted(r for r, _, _ in doomed)
    if dry_run:
        return rels
    size = sum(s for _, _, s in doomed)
    parameters = {"retentionCheckEnabled": not force, "defaultRetentionMillis": table_retention}
    if retain_hours is not None:
        parameters["specifiedRetentionMillis"] = retention
    if log_commits:
        txn = table.transaction()
        txn.commit(operation="VACUUM START", parameters=parameters,
                   metrics={"numFilesToDelete": len(doomed), "sizeOfDataToDelete": size})
    deleted = []
    for rel, full, _ in doomed:
        try:
            fs.delete_file(full, options, within=root)
            deleted.append(rel)
        except UnsafePathError as e:
            log.warning("%s: VACUUM left %s alone: %s", root, rel, e)
        except OSError as e:
            log.warning("%s: VACUUM could not delete %s: %s", root, rel, e)
    dirs = _remove_empty_dirs(root, deleted, cutoff)
    if deleted and (snapshot.table_configuration.writes_iceberg
                    or fs.exists(fs.join(root, ICEBERG_METADATA_DIR, "version-hint.text"), options)):
        _expire_iceberg_snapshots(table.store, deleted)
    if log_commits:
        txn = table.transaction()
        txn.commit(operation="VACUUM END", parameters={"status": "COMPLETED"},
                   metrics={"numDeletedFiles": len(deleted), "numVacuumedDirectories": dirs})
    return sorted(deleted)
