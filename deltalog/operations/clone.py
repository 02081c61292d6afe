"""Shallow CLONE: a table whose files are another table's files, named by absolute URI, so no data is
copied (delta-spark's `CREATE TABLE ... SHALLOW CLONE`). One commit: version 0 of a new table, or an
overwrite of an existing one (history kept).

The clone's own later writes go to its own folder. VACUUM of the clone only ever considers files
under the clone's folder, so it never deletes the source's files. VACUUM of the *source* may delete
files the clone still reads once the source no longer needs them, as in Delta: a clone is for
development and tests, not a backup.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from ..actions import AddFile, Metadata, now_ms
from ..deletion_vectors import relative_path as dv_relative_path, unique_id
from ..paths import decode_path, encode_path, is_absolute_path
from ..table import DeltaTable, as_table


def _absolute_uri(root: str, path: str) -> str:
    """An add's path (URI-encoded, maybe relative to `root`) as an absolute URI."""
    decoded = decode_path(path)
    if is_absolute_path(decoded):
        return path if "://" in path or path.startswith("file:") else "file://" + encode_path(decoded)
    if "://" in root:
        return root.rstrip("/") + "/" + path
    return "file://" + encode_path(root.rstrip("/") + "/" + decoded)


def _absolute_dv(root: str, dv: dict[str, Any] | None) -> dict[str, Any] | None:
    """A deletion vector stored next to the source (`u`) as an absolute-path one (`p`)."""
    if not dv or dv.get("storageType") != "u":
        return dv
    return {**dv, "storageType": "p", "pathOrInlineDv": _absolute_uri(root, encode_path(dv_relative_path(dv)))}


def _dv_key(dv: dict[str, Any] | None) -> str:
    return unique_id(dv) if dv else ""


def shallow_clone(source: DeltaTable | str, target: DeltaTable | str, version: int | None = None,
                  timestamp: datetime | int | str | None = None,
                  extra_commit_info: dict[str, Any] | None = None) -> int:
    """Make `target` a shallow clone of the `source` table (at `version` / `timestamp`, default its
    latest). Returns the target's new version."""
    source = as_table(source).snapshot(version=version, timestamp=timestamp)
    root = source.table_uri
    txn = as_table(target).transaction()
    current = txn.snapshot
    # The files' rows satisfied the same constraints in the source table.
    txn.constraints_enforced = True
    metadata = replace(source.metadata, id=current.metadata.id if current is not None else Metadata().id,
                       created_time=current.metadata.created_time if current is not None else now_ms())
    if current is None or (metadata.schema_json, metadata.partition_columns, metadata.configuration,
                           metadata.description) != (current.metadata.schema_json, current.metadata.partition_columns,
                                                     current.metadata.configuration, current.metadata.description):
        txn.update_metadata(metadata)
    if current is None or current.protocol != source.protocol:
        txn.update_protocol(source.protocol)  # an existing target's protocol is never downgraded: that fails
    adds = [AddFile(path=_absolute_uri(root, a.path), partition_values=a.partition_values, size=a.size,
                    modification_time=a.modification_time, data_change=True, stats=a.stats, tags=a.tags,
                    deletion_vector=_absolute_dv(root, a.deletion_vector))
            for a in source.add_files()]
    removes = []
    if current is not None:
        # cloning again: only what differs (a file both have stays, untouched)
        txn.read_whole_table()
        have = {(decode_path(a.path), _dv_key(a.deletion_vector)): a for a in current.add_files()}
        wanted = {(decode_path(a.path), _dv_key(a.deletion_vector)) for a in adds}
        ts = now_ms()
        removes = [a.remove(ts, data_change=True) for k, a in have.items() if k not in wanted]
        adds = [a for a in adds if (decode_path(a.path), _dv_key(a.deletion_vector)) not in have]
        if not adds and not removes and not txn.metadata_changed:
            return current.version
    txn.add_actions([*removes, *adds])
    return txn.commit(
        operation="CLONE",
        parameters={"source": root, "sourceVersion": source.version, "isShallow": True},
        metrics={"sourceTableSize": sum(a.size for a in adds), "sourceNumOfFiles": len(adds),
                 "numRemovedFiles": len(removes), "numCopiedFiles": 0, "copiedFilesSize": 0},
        extra_commit_info=extra_commit_info)
