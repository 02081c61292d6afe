"""Row IDs of a row-tracked table as a reader reconstructs them, and what the protocol asks of each
version (shared by the row tracking and the row-level concurrency tests)."""
from __future__ import annotations

import os

from deltalog import row_tracking
from deltalog.actions import AddFile, CommitInfo, RemoveFile, parse_commit
from deltalog.column_mapping import physical_names
from deltalog.deletion_vectors import deleted_rows
from deltalog.paths import file_path_of
from deltalog.snapshot import Snapshot


def commit_actions(uri: str, version: int) -> list:
    with open(os.path.join(uri, "_delta_log", "%020d.json" % version), "rb") as f:
        return parse_commit(f.read(), "test")


def row_ids(uri: str, version: int, commit_versions: bool = False) -> dict[int, int]:
    """Row ID (or row commit version) of every live row, by the row's `id` column, as a reader finds
    it: the file's hidden materialized column where it holds a value, else baseRowId + the row's
    position in its file (defaultRowCommitVersion)."""
    import pyarrow.parquet as pq

    snap = Snapshot.load(uri, version=version)
    key = row_tracking.ROW_COMMIT_VERSION_COLUMN_KEY if commit_versions else row_tracking.ROW_ID_COLUMN_KEY
    hidden = snap.configuration.get(key)
    out: dict[int, int] = {}
    for a in snap.add_files():
        path = file_path_of(uri, a.path)
        stored = pq.read_schema(path).names
        id_column = physical_names(snap.schema_json, snap.configuration).get("id", "id")
        t = pq.read_table(path, columns=[id_column] + ([hidden] if hidden in stored else []))
        ids = t.column(id_column).to_pylist()
        materialized = t.column(hidden).to_pylist() if hidden in stored else [None] * len(ids)
        gone = set(deleted_rows(snap.store, a.deletion_vector).tolist()) if a.deletion_vector else set()
        for position, (k, value) in enumerate(zip(ids, materialized)):
            if position not in gone:
                assert k not in out, f"version {version}: row {k} appears twice"
                default = a.default_row_commit_version if commit_versions else a.base_row_id + position
                out[k] = value if value is not None else default
    return out


def check_version(uri: str, version: int) -> None:
    """What the protocol asks of one version of a row-tracked table."""
    snap = Snapshot.load(uri, version=version)
    adds = snap.add_files()
    assert all(a.base_row_id is not None and a.default_row_commit_version is not None for a in adds), version
    spans = sorted((a.base_row_id, a.base_row_id + a.num_records) for a in adds)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), f"version {version}: overlap"
    mark = row_tracking.high_water_mark(snap.domain_metadata.values())
    assert all(end - 1 <= mark for _, end in spans)
    ids = row_ids(uri, version)
    assert len(set(ids.values())) == len(ids)
    actions = commit_actions(uri, version)
    previous = {a.path: a for a in Snapshot.load(uri, version=version - 1).add_files()} if version else {}
    for a in actions:
        if isinstance(a, AddFile) and a.path in previous and previous[a.path].base_row_id is not None:
            # marked rows: the file keeps its IDs
            assert (a.base_row_id, a.default_row_commit_version) == (
                previous[a.path].base_row_id, previous[a.path].default_row_commit_version)
        elif isinstance(a, AddFile):  # a new file, or one given row IDs as row tracking is enabled
            assert a.default_row_commit_version == version and a.base_row_id > (
                row_tracking.high_water_mark(Snapshot.load(uri, version=version - 1).domain_metadata.values())
                if version else -1)
        elif isinstance(a, RemoveFile):
            assert (a.base_row_id, a.default_row_commit_version) == (
                previous[a.path].base_row_id, previous[a.path].default_row_commit_version)
    info = next(a for a in actions if isinstance(a, CommitInfo))
    assert info.extra["tags"][row_tracking.PRESERVED_TAG] in ("true", "false")
