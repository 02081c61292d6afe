"""Commit history (one row per commit, from its commitInfo) and commit timestamps.

A commit's time is its file's modification time made monotonic (each commit at least 1 ms after the
previous one), or its `commitInfo.inCommitTimestamp` when in-commit timestamps are on.
"""
from __future__ import annotations

from typing import Any

from .actions import commit_objects
from .committer import commit_file_name
from .errors import CorruptLogError, NotATableError, VersionNotFoundError
from .storage.log_store import LogFile, LogStore
from .storage import store_of

_HISTORY_KEYS = ("operation", "operationParameters", "readVersion", "isolationLevel", "isBlindAppend",
                 "operationMetrics", "userMetadata", "engineInfo")


def _monotonic_times(commits: list[LogFile]) -> dict[int, int]:
    out, prev = {}, None
    for f in sorted(commits, key=lambda f: f.version):
        t = f.modification_time if prev is None else max(f.modification_time, prev + 1)
        out[f.version] = prev = t
    return out


def commit_timestamp(listing: Any, version: int, commit_info: dict[str, Any] | None) -> int:
    """The time of `version` for a snapshot: its in-commit timestamp, else the monotonic file time
    over the commits the listing holds (a checkpoint's file time when the commit file is gone)."""
    if isinstance(commit_info, dict) and isinstance(commit_info.get("inCommitTimestamp"), int):
        return commit_info["inCommitTimestamp"]
    commits = [f for v, f in listing.commits.items() if v <= version]
    if version in listing.commits:
        return _monotonic_times(commits)[version]
    parts = listing.checkpoints.get(version)
    return max(p.modification_time for p in parts) if parts else 0


def _first_commit_info(data: bytes) -> dict[str, Any] | None:
    try:
        for _, obj in commit_objects(data, "commit"):
            if isinstance(obj, dict) and "commitInfo" in obj:
                return obj["commitInfo"]
    except CorruptLogError:
        return None
    return None


def commit_times(store: LogStore) -> dict[int, int]:
    """Time of every commit file still in the log, by version."""
    commits = [f for f in store.list_from(0) if f.kind == "commit"]
    times = _monotonic_times(commits)
    if commits:
        # In-commit timestamps (when the newest commit has one) replace file times where present.
        last_info = _first_commit_info(store.read(commits[-1].name))
        if last_info and "inCommitTimestamp" in last_info:
            for f in commits:
                info = _first_commit_info(store.read(f.name))
                if info and isinstance(info.get("inCommitTimestamp"), int):
                    times[f.version] = info["inCommitTimestamp"]
    return times


def version_at_timestamp(store: LogStore, timestamp_ms: int) -> int:
    """The last version committed at or before `timestamp_ms`."""
    times = commit_times(store)
    if not times:
        raise NotATableError(f"{store.table_uri} is not a Delta table: its _delta_log holds no commit.")
    candidates = [v for v, t in times.items() if t <= timestamp_ms]
    if not candidates:
        first = min(times)
        raise VersionNotFoundError(
            f"{store.table_uri}: timestamp {timestamp_ms} ms is before the earliest available commit "
            f"(version {first} at {times[first]} ms); pick a later timestamp.")
    return max(candidates)


def history(table: str | LogStore, limit: int | None = None) -> list[dict[str, Any]]:
    """One dict per commit still in the log, newest first: version, timestamp and commitInfo fields. The
    table by its location or its store."""
    store = store_of(table)
    commits = sorted((f for f in store.list_from(0) if f.kind == "commit"),
                     key=lambda f: f.version, reverse=True)
    if limit is not None:
        commits = commits[:limit]
    file_times = _monotonic_times(commits)
    rows = []
    for f in commits:
        try:
            data = store.read(f.name)
        except FileNotFoundError:  # removed by a concurrent log cleanup
            continue
        info = _first_commit_info(data) or {}
        ts = info.get("inCommitTimestamp", info.get("timestamp", file_times[f.version]))
        row = {"version": f.version, "timestamp": ts}
        for key in _HISTORY_KEYS:
            row[key] = info.get(key)
        rows.append(row)
    return rows


def commit_info(table: str | LogStore, version: int) -> dict[str, Any] | None:
    """The commitInfo of one commit; None when it has none or its file is gone (a log cleanup)."""
    try:
        return _first_commit_info(store_of(table).read(commit_file_name(version)))
    except FileNotFoundError:
        return None


def last_commit_time(store: LogStore) -> tuple[int, int]:
    """(latest version, its time in ms): the newest commit's in-commit timestamp when it has one, else
    its file time made monotonic over the log (a checkpoint's file time when only that is left).
    NotATableError when the location holds no log."""
    files = store.list_from(0)
    commits = [f for f in files if f.kind == "commit"]
    checkpoints = [f for f in files if f.kind == "checkpoint"]
    latest = max([f.version for f in commits + checkpoints if f.version is not None], default=None)
    if latest is None:
        raise NotATableError(f"{store.table_uri}: no commit in its _delta_log")
    newest = next((f for f in commits if f.version == latest), None)
    if newest is None:
        return latest, max(f.modification_time for f in checkpoints if f.version == latest)
    info = _first_commit_info(store.read(newest.name))
    if info and isinstance(info.get("inCommitTimestamp"), int):
        return latest, info["inCommitTimestamp"]
    return latest, _monotonic_times(commits)[latest]
