"""RESTORE: make the latest version hold exactly the files (and metadata) of an earlier version, in one
commit that re-adds the files missing now (dataChange=true) and removes the ones added since. The
history stays; the protocol is never downgraded."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from ..storage import files as fs
from ..actions import now_ms
from ..errors import InvalidTableError, VersionNotFoundError
from ..paths import absolute_file_path, decode_path
from ..snapshot import Snapshot
from ..table import DeltaTable, as_table


def restore(table: DeltaTable | str, version: int | None = None,
            timestamp: datetime | int | str | None = None) -> int | None:
    """Restore the table to `version` or to the last version at or before `timestamp`. Returns the new
    version, or None when the table already is in that state (nothing committed)."""
    table = as_table(table)
    if (version is None) == (timestamp is None):
        raise InvalidTableError(f"{table.uri}: RESTORE needs exactly one of version or timestamp.")
    txn = table.transaction()
    current = txn.snapshot
    if current is None:
        raise InvalidTableError(f"{table.uri}: RESTORE needs an existing Delta table; none is here.")
    root = current.table_uri
    if version is not None:
        try:
            version = int(version)
        except (TypeError, ValueError):
            raise InvalidTableError(f"{root}: RESTORE version must be an integer, got {version!r}.") from None
        if version < 0 or version > current.version:
            raise VersionNotFoundError(
                f"{root}: cannot RESTORE to version {version}; the table has versions up to "
                f"{current.version}.")
    target = Snapshot.load(root, version=version, timestamp=timestamp, store=txn.store)

    now_paths = {decode_path(p): i for i, p in enumerate(current.files.column("path").to_pylist())}
    then = target.add_files()
    then_paths = {decode_path(a.path) for a in then}
    to_add = [a for a in then if decode_path(a.path) not in now_paths]
    to_remove = [a for a in current.add_files() if decode_path(a.path) not in then_paths]
    missing = []
    for a in to_add:
        if not fs.exists(absolute_file_path(root, a.path), txn.store.options):
            missing.append(decode_path(a.path))
    if missing:
        raise InvalidTableError(
            f"{root}: cannot RESTORE to version {target.version}: {len(missing)} of its data file(s) no "
            f"longer exist (removed by VACUUM), e.g. {missing[0]}. Restore to a later version, within the "
            f"table's retention.")
    md_changed = target.metadata.to_dict() != current.metadata.to_dict()
    if not to_add and not to_remove and not md_changed:
        return None
    txn.read_whole_table()
    if md_changed:
        txn.update_metadata(target.metadata)
    ts = now_ms()
    txn.add_actions(a.remove(ts, data_change=True) for a in to_remove)
    from dataclasses import replace
    txn.add_actions(replace(a, data_change=True, modification_time=a.modification_time) for a in to_add)
    live_after = then
    parameters: dict[str, Any] = {"version": target.version if version is not None else None,
                                  "timestamp": str(timestamp) if timestamp is not None else None}
    metrics = {
        "tableSizeAfterRestore": sum(a.size for a in live_after),
        "numOfFilesAfterRestore": len(live_after),
        "numRemovedFiles": len(to_remove),
        "numRestoredFiles": len(to_add),
        "removedFilesSize": sum(a.size for a in to_remove),
        "restoredFilesSize": sum(a.size for a in to_add),
    }
    return txn.commit(operation="RESTORE", parameters={k: v for k, v in parameters.items() if v is not None},
                      metrics=metrics)
