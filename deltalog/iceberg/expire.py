"""Expiring the Iceberg snapshots that name data files VACUUM deleted: a new metadata version without
them (the current snapshot never names a deleted file: VACUUM keeps every live one), then the manifests,
manifest lists and deletion-vector Puffin files only those snapshots used are deleted. Metadata files
themselves stay: each is a version readers may hold, and the metadata log names them."""

from __future__ import annotations

from deltalog.lazy_imports import load

load("pyiceberg")  # whole, before any import from it (lazy_imports.py says why)
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType  # noqa: E402
from pyiceberg.table.snapshots import MetadataLogEntry  # noqa: E402

from ..paths import location_uri  # noqa: E402
from ..storage.log_store import LogStore  # noqa: E402
from .deletion_vectors import PUFFIN_SUFFIX  # noqa: E402
from .conversion import (METADATA_DIR, VERSION_HINT, _file_io, latest_metadata, metadata_json,  # noqa: E402
                         metadata_location)


def expire_snapshots_naming(table_uri: str, store: LogStore, deleted: list[str]) -> int:
    """Expire the snapshots whose files include one of `deleted` (paths or URIs: locations are compared as
    `location_uri`s, so metadata that names local files bare, as it was written before, matches too);
    the number expired."""
    io = _file_io(table_uri, store)
    number, current = latest_metadata(table_uri, store, io)
    if current is None:
        return 0
    gone = {location_uri(d) for d in deleted}
    doomed, kept, named = [], [], {}
    for snapshot in current.snapshots:
        names = {location_uri(entry.data_file.file_path) for manifest in snapshot.manifests(io)
                 for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)}
        named[snapshot.snapshot_id] = names
        (doomed if names & gone and snapshot.snapshot_id != current.current_snapshot_id else kept).append(snapshot)
    if not doomed:
        return 0
    kept_ids = {s.snapshot_id for s in kept}
    location = location_uri(table_uri.rstrip("/"))
    updated = current.model_copy(update={
        "location": location,
        "snapshots": kept,
        "snapshot_log": [e for e in current.snapshot_log if e.snapshot_id in kept_ids],
        "metadata_log": [*current.metadata_log, MetadataLogEntry(metadata_file=metadata_location(location, number),
                                                                 timestamp_ms=current.last_updated_ms)],
        "refs": {"main": SnapshotRef(snapshot_id=current.current_snapshot_id,
                                     snapshot_ref_type=SnapshotRefType.BRANCH)},
    })
    store.write_table_file(f"{METADATA_DIR}/v{number + 1}.metadata.json",
                           metadata_json(updated), if_absent=True)
    store.write_table_file(f"{METADATA_DIR}/{VERSION_HINT}", str(number + 1).encode(), if_absent=False)
    still_used = ({location_uri(s.manifest_list) for s in kept}
                  | {location_uri(m.manifest_path) for s in kept for m in s.manifests(io)}
                  | {name for s in kept for name in named[s.snapshot_id]})
    for snapshot in doomed:
        puffins = [n for n in named[snapshot.snapshot_id]
                   if n.endswith(PUFFIN_SUFFIX) and n.startswith(f"{location}/{METADATA_DIR}/")]
        for path in [snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(io)), *puffins]:
            if location_uri(path) not in still_used:
                io.delete(path)
                still_used.add(location_uri(path))  # listed by two expired snapshots: deleted once
    return len(doomed)
