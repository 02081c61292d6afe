"""The files added between two versions: what a consumer that read the table at `start_version` has
not seen yet at `end_version`.

Counted: `add` actions with dataChange=true in commits start_version+1 .. end_version, unless a later
dataChange=true `remove` in that range dropped them again (their rows were deleted or rewritten; the
rewrite's own new files count instead). OPTIMIZE's dataChange=false rewrites are ignored: the added
files they replaced still hold the rows on disk until VACUUM. Rows of files rewritten by UPDATE, MERGE
or DELETE come back as added (the log records files, not rows).
"""
from __future__ import annotations

import copy
import os

import pyarrow as pa

from ..checkpoint import FILES_SCHEMA, STRING_MAP
from ..actions import commit_objects
from ..errors import InvalidTableError, UnsupportedFeatureError, VersionNotFoundError
from ..paths import decode_path, is_absolute_path
from ..snapshot import Snapshot
from ..storage import log_store_for


def _commit_name(version: int) -> str:
    return "%020d.json" % version


def added_files(table_uri: str, start_version: int, end_version: int | None = None) -> pa.Table:
    """The files (Snapshot.files columns) added in (start_version, end_version]; end defaults to the
    latest version."""
    store = log_store_for(table_uri)
    root = store.table_uri
    latest = Snapshot.load(root).version if end_version is None else None
    end = latest if end_version is None else int(end_version)
    start = int(start_version)
    if start < -1 or end < start:
        raise InvalidTableError(
            f"{root}: changes between versions need -1 <= start_version <= end_version; got "
            f"{start_version}..{end}.")
    added: dict[str, dict] = {}
    for v in range(start + 1, end + 1):
        try:
            data = store.read(_commit_name(v))
        except FileNotFoundError:
            raise VersionNotFoundError(
                f"{root}: the commit of version {v} is no longer in the log (cleaned up after "
                f"delta.logRetentionDuration) or does not exist yet; read changes from a later version.") from None
        for _, obj in commit_objects(data, f"{root}/_delta_log/{_commit_name(v)}"):
            if "add" in obj and obj["add"].get("dataChange", True):
                a = obj["add"]
                added[decode_path(a["path"])] = a
            elif "remove" in obj and obj["remove"].get("dataChange", True):
                added.pop(decode_path(obj["remove"]["path"]), None)
    adds = list(added.values())
    marked = [a["path"] for a in adds if a.get("deletionVector")]
    if marked:
        # A file re-added with a new deletion vector is the same rows minus some: counting files
        # would return its old rows as new ones.
        raise UnsupportedFeatureError(
            f"{root}: the changes after version {start} include files with deletion vectors (e.g. "
            f"{decode_path(marked[0])}); added rows are counted by file, which is only right for tables "
            f"without deletion vectors. Nothing was read.")
    missing = []
    for a in adds:
        p = decode_path(a["path"])
        if not os.path.exists(p if is_absolute_path(p) else os.path.join(root, p)):
            missing.append(p)
    if missing:
        raise VersionNotFoundError(
            f"{root}: {len(missing)} file(s) added after version {start} were deleted by VACUUM (e.g. "
            f"{missing[0]}); read changes from a later version.")
    return pa.Table.from_arrays([
        pa.array([a["path"] for a in adds], pa.string()),
        pa.array([list((a.get("partitionValues") or {}).items()) for a in adds], STRING_MAP),
        pa.array([a.get("size") or 0 for a in adds], pa.int64()),
        pa.array([a.get("modificationTime") or 0 for a in adds], pa.int64()),
        pa.array([True] * len(adds), pa.bool_()),
        pa.array([a.get("stats") for a in adds], pa.string()),
        pa.array([list((a.get("tags") or {}).items()) if a.get("tags") else None for a in adds], STRING_MAP),
        pa.nulls(len(adds), FILES_SCHEMA.field("deletion_vector").type),
    ], schema=FILES_SCHEMA)


def changes_snapshot(table_uri: str, start_version: int, end_version: int | None = None) -> Snapshot:
    """The snapshot at `end_version` restricted to the files added since `start_version`: give it to
    `deltalog.spark.reader.snapshot_dataframe` to read the added rows with the end version's schema."""
    end_snapshot = Snapshot.load(table_uri, version=end_version)
    files = added_files(table_uri, start_version, end_snapshot.version)
    view = copy.copy(end_snapshot)
    view.files = files
    return view
