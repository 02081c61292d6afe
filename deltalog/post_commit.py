"""After a commit landed: the snapshot of the new version, its `.crc` checksum, the Iceberg metadata of a
table that asks for it (`iceberg/`), and, every
`delta.checkpointInterval` commits, a checkpoint followed by expired-log cleanup (`log_cleanup`). The commit is durable already, so nothing here raises:
a failure is logged and readers replay the JSON commits instead."""
from __future__ import annotations

import logging
from typing import Any

from .actions import Action
from . import checkpoint_write, checksum
from .committer import WinningCommit
from .errors import one_line
from .snapshot import Snapshot
from .storage.log_store import LogStore

log = logging.getLogger(__name__)


def after_commit(table_uri: str, store: LogStore, read_snapshot: Any, version: int, actions: list[Action],
                 winners: list[WinningCommit], timestamp: int, txn_id: str) -> Any:
    """The snapshot of the new version (None when it could not be had), after writing its `.crc` and, when
    due, a checkpoint. `winners`: the commits that landed between `read_snapshot` and this one."""
    snap = None
    try:
        if read_snapshot is not None:
            snap = read_snapshot
            for w in winners:
                snap = snap.apply(w.version, w.actions, w.timestamp)
            snap = snap.apply(version, actions, timestamp)
    except Exception:
        log.warning("%s: could not derive the snapshot of version %d in memory; reloading it",
                    table_uri, version, exc_info=True)
        snap = None
    if snap is None:
        try:
            snap = Snapshot.load(table_uri, version=version, store=store)
        except Exception:
            log.warning("%s: could not load version %d after committing it; no checksum or "
                        "checkpoint written", table_uri, version, exc_info=True)
            return None
    try:
        checksum.write_checksum(store, snap, txn_id=txn_id)
    except Exception as exc:
        log.warning("%s: writing the checksum of version %d failed (the commit stands): %s",
                    table_uri, version, one_line(exc), exc_info=log.isEnabledFor(logging.DEBUG))
    if snap.table_configuration.writes_iceberg:
        try:
            from .iceberg import convert as convert_to_iceberg  # pyiceberg: only for tables that ask

            convert_to_iceberg(snap, store)
        except Exception as exc:
            log.warning("%s: writing the Iceberg metadata of version %d failed (the commit stands; Iceberg "
                        "readers see the version before until the next write converts it): %s",
                        table_uri, version, one_line(exc), exc_info=log.isEnabledFor(logging.DEBUG))
    try:
        if read_snapshot is not None and read_snapshot.stale_last_checkpoint:
            checkpoint_write.repair_last_checkpoint(store, version)
        if checkpoint_write.should_checkpoint(version, snap.table_configuration.checkpoint_interval):
            checkpoint_write.write_checkpoint(store, snap)
        else:
            return snap
    except Exception as exc:
        log.warning("%s: writing the checkpoint of version %d failed (the commit stands; readers "
                    "replay the JSON commits): %s", table_uri, version, one_line(exc),
                    exc_info=log.isEnabledFor(logging.DEBUG))
        return snap
    if snap.table_configuration.expired_log_cleanup:
        from .log_cleanup import clean_expired_logs

        try:
            removed = clean_expired_logs(store, version, snap.table_configuration.log_retention_ms)
            if removed:
                log.info("%s: removed %d log file(s) older than delta.logRetentionDuration", table_uri, len(removed))
        except Exception as exc:
            log.warning("%s: expired-log cleanup after version %d failed (the commit stands): %s", table_uri,
                        version, one_line(exc), exc_info=log.isEnabledFor(logging.DEBUG))
    return snap
