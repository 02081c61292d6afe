"""Expired-log cleanup, as Delta does it at checkpoint time: commits, checkpoints and checksums older than
`delta.logRetentionDuration` (default 30 days, cut to the start of that day) go, but only below the
newest checkpoint that is itself that old, so the log always starts at a checkpoint and no commit newer
than the oldest checkpoint kept is ever removed. Time travel reaches back to that checkpoint.

File modification times decide age (also for tables with in-commit timestamps: the files are written at
commit time). V2 checkpoint sidecars (`_sidecars/`) and `_last_checkpoint` are left alone. Optional for
correctness: a failure is logged by the caller and never touches the commit that triggered it.
"""
from __future__ import annotations

import time

from .log_segment import LogListing
from .storage.log_store import LogStore

DAY_MS = 86_400_000


def expired_log_files(listing: LogListing, upto: int, retention_ms: int, now_ms: int) -> list[str]:
    """The names of the log files cleanup may remove once version `upto` is checkpointed."""
    cutoff = (now_ms - retention_ms) // DAY_MS * DAY_MS
    old_checkpoints = [v for v, parts in listing.complete_checkpoints(upto)
                       if all(f.modification_time <= cutoff for f in parts)]
    if not old_checkpoints:
        return []
    keep_from = max(old_checkpoints)
    files = [*listing.commits.values(), *listing.crcs.values(),
             *(f for parts in listing.checkpoints.values() for f in parts)]
    return sorted(f.name for f in files if f.version < keep_from and f.modification_time <= cutoff)


def clean_expired_logs(store: LogStore, upto: int, retention_ms: int, now_ms: int | None = None) -> list[str]:
    """Remove the expired log files (oldest first, so that an interrupted cleanup leaves a log that
    still starts at a contiguous run of versions); their names."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    names = expired_log_files(LogListing(store.list_from(0)), upto, retention_ms, now_ms)
    by_version = sorted(names, key=lambda n: (int(n[:20]), n))
    for name in by_version:
        store.delete(name)
    return by_version
