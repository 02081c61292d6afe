"""The latest snapshot of a small table, reused while its log is unchanged.

A reader that loads the same few small tables again and again in one process (a dbt build's data tests,
each reading its tables' latest version) replays their logs each time. Here the log is listed and its
newest commit read on every call, as a load does; the snapshot is replayed only when the newest version,
the bytes of its commit (which name the commit's transaction: a table dropped and made again differs)
or the checkpoint it starts from changed. For reading: a writer's transaction loads its own snapshot."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Optional, Tuple

from .snapshot import list_log, load_listed

_MAX_TABLES = 256
_MAX_FILES = 1000  # tables of more files are loaded every time: their snapshots are large to keep
_kept: "OrderedDict[str, tuple[tuple, Any]]" = OrderedDict()
_lock = threading.Lock()


def latest_snapshot(table: Any) -> Any:
    """`table.snapshot()` (a DeltaTable's latest version), reused while its log is unchanged."""
    store = table.store
    listed, key = _log_state(store)  # the one listing: a miss loads from it
    if key is None:
        return load_listed(store, listed)  # nothing to know it by (or no table: the load says so)
    with _lock:
        kept = _kept.get(store.table_uri)
        if kept is not None and kept[0] == key:
            _kept.move_to_end(store.table_uri)
            return kept[1]
    snapshot = load_listed(store, listed)
    if snapshot.version == key[0] and snapshot.num_files <= _MAX_FILES:
        with _lock:
            _kept[store.table_uri] = (key, snapshot)
            while len(_kept) > _MAX_TABLES:
                _kept.popitem(last=False)
    return snapshot


def latest_version_key(table: Any) -> Optional[Tuple[int, str]]:
    """The table's latest version and a digest that stays the same exactly while its log does (the
    same key `latest_snapshot` reuses by); None when its log has no commit to know it by."""
    _, key = _log_state(table.store)
    if key is None:
        return None
    return key[0], hashlib.sha256(repr(key).encode()).hexdigest()


def _log_state(store: Any) -> Tuple[Any, Optional[tuple]]:
    """One listing of the log, and its key: the newest version, the digest of that commit's bytes and
    the checkpoint the listing starts from."""
    listed = list_log(store)
    latest = listed.listing.latest()
    commit = listed.listing.commits.get(latest) if latest is not None else None
    if commit is None:
        return listed, None
    return listed, (latest, hashlib.sha256(store.read(commit.name)).digest(),
                    tuple(sorted((f.name, f.size) for f in listed.listing.checkpoints.get(listed.start, ()))))
