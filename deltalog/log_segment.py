"""The log segment: what one listing of `_delta_log` holds, and which files a snapshot loads from.

A listing is taken once per load (from the version `_last_checkpoint` names, or from 0): the newest
version is the highest commit or checkpoint in it; a checkpoint is usable when all of its parts are
there (a classic single file before a multi-part set, a v2 checkpoint last). Snapshot loading, the
adapter's staleness check and history read the log through it.
"""
from __future__ import annotations

from .errors import NotATableError
from .storage.log_store import LogFile, LogStore


class LogListing:
    """One listing of `_delta_log`: its commits, checkpoints (by version, every part) and checksums."""

    def __init__(self, files: list[LogFile]):
        self.commits: dict[int, LogFile] = {}
        self.checkpoints: dict[int, list[LogFile]] = {}
        self.crcs: dict[int, LogFile] = {}
        for f in files:
            if f.kind == "commit":
                self.commits[f.version] = f
            elif f.kind == "checkpoint":
                self.checkpoints.setdefault(f.version, []).append(f)
            elif f.kind == "crc":
                self.crcs[f.version] = f

    def latest(self) -> int | None:
        """The newest version a commit or checkpoint names (None for an empty log)."""
        versions = list(self.commits) + list(self.checkpoints)
        return max(versions) if versions else None

    def complete_checkpoints(self, upto: int) -> list[tuple[int, list[LogFile]]]:
        """Usable checkpoints <= upto, newest first; classic single-part before multi-part sets."""
        out = []
        for v in sorted((v for v in self.checkpoints if v <= upto), reverse=True):
            group = self.checkpoints[v]
            single = [f for f in group if f.num_parts is None and not f.v2]
            if single:
                out.append((v, single[:1]))
                continue
            by_count: dict[int, dict[int, LogFile]] = {}
            for f in group:
                if f.num_parts is not None:
                    by_count.setdefault(f.num_parts, {})[f.part] = f
            complete = [parts for n, parts in by_count.items() if set(parts) == set(range(1, n + 1))]
            if complete:
                parts = complete[0]
                out.append((v, [parts[i] for i in sorted(parts)]))
            elif any(f.v2 for f in group):
                out.append((v, [f for f in group if f.v2][:1]))
        return out


def latest_version(store: LogStore) -> int | None:
    """The newest version in a table's log by one listing (no snapshot load); None without a log."""
    try:
        return LogListing(store.list_from(0)).latest()
    except NotATableError:
        return None
