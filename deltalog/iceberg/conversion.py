"""Iceberg metadata for a Delta table (Delta's "UniForm"), written after its commits: Iceberg readers then
read the same Parquet files, with no second copy.

Under `<table>/metadata/`: `v<N>.metadata.json` (Iceberg table metadata: format v2 for IcebergCompatV2, v3
for IcebergCompatV3), manifest lists and manifests (Avro), Puffin files holding the deletion vectors of v3
tables (deletion_vectors.py), and `version-hint.text` (N) for readers that open the folder. Each Delta version that
adds or removes files is one Iceberg snapshot: adds only -> append, removes only -> delete, both with a
data change -> overwrite, no data change (OPTIMIZE, compaction) -> replace. The snapshot's summary and the
table's properties name the Delta version (`delta-version`) and its commit time (`delta-timestamp`).
Every location the metadata names (the table's, metadata files, manifests, data and Puffin files) is a full
URI, `file:///...` for a local table (`paths.location_uri`); metadata written before, with bare local paths,
is still read and caught up.

Incremental: a conversion replays only the Delta commits after the version the newest metadata names
(appends write one manifest; a commit that removes files rewrites the manifests that list them). Past
`MAX_CATCH_UP` commits, or when those commits have expired from the log, it writes one snapshot of the
whole table instead. Never backwards: metadata files are created put-if-absent, so of two converters the
second finds `v<N+1>` taken, reads it, and goes on from the Delta version it names."""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from deltalog.lazy_imports import load

load("pyiceberg")  # whole, before any import from it (lazy_imports.py says why)
from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (MANIFEST_ENTRY_SCHEMAS, DataFile, DataFileContent, FileFormat, ManifestContent,
                                ManifestEntry, ManifestEntryStatus, ManifestFile, ManifestListWriterV2,
                                ManifestWriterV2, _inherit_from_manifest)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataUtil, TableMetadataV2, TableMetadataV3
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import (MetadataLogEntry, Operation, Snapshot as IcebergSnapshot, SnapshotLogEntry,
                                       SnapshotSummaryCollector, Summary, update_snapshot_summaries)
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from ..actions import AddFile, CommitInfo, Metadata, RemoveFile, parse_commit
from ..errors import UnsupportedFeatureError
from ..storage.files import is_object_store_uri
from ..paths import ICEBERG_METADATA_DIR, absolute_file_path, location_uri
from ..storage.log_store import LogStore
from . import data_files, deletion_vectors, schema as schemas

log = logging.getLogger(__name__)

METADATA_DIR = ICEBERG_METADATA_DIR
VERSION_HINT = "version-hint.text"
DELTA_VERSION = "delta-version"
DELTA_TIMESTAMP = "delta-timestamp"
NAME_MAPPING = "schema.name-mapping.default"
ENABLED_FORMATS = "delta.universalFormat.enabledFormats"
MAX_CATCH_UP = 100  # Delta commits replayed one snapshot each; more behind, one snapshot of the whole table
_ATTEMPTS = 5


def iceberg_enabled(configuration: dict[str, str] | None) -> bool:
    formats = (configuration or {}).get(ENABLED_FORMATS) or ""
    return "iceberg" in [f.strip().lower() for f in formats.split(",")]


def convert(snapshot: Any, store: LogStore) -> int | None:
    """Iceberg metadata up to the Delta `snapshot`'s version: the number N of the `v<N>.metadata.json`
    written, or None when the newest metadata already reflects that version (or a later one)."""
    io = _file_io(snapshot.table_uri, store)
    for _ in range(_ATTEMPTS):
        number, current = latest_metadata(snapshot.table_uri, store, io)
        done = int(current.properties.get(DELTA_VERSION, -1)) if current is not None else -1
        if done >= snapshot.version:
            return None
        builder = _Builder(snapshot.table_uri, io, current, number, store,
                           3 if snapshot.table_configuration.iceberg_compat_v3 else 2)
        commits = _commits(store, done + 1, snapshot.version) if current is not None else None
        if commits is not None and not any(isinstance(a, Metadata) for _, actions in commits for a in actions):
            builder.unchanged_metadata = snapshot.metadata  # what every commit of the batch was written with
        if commits is None or snapshot.version - done > MAX_CATCH_UP:
            builder.whole_table(snapshot)
        else:
            for version, actions in commits:
                builder.commit(version, actions)
        data = builder.metadata_json(snapshot)
        try:
            store.write_table_file(f"{METADATA_DIR}/v{number + 1}.metadata.json", data, if_absent=True)
        except FileExistsError:
            continue  # another writer converted first: go on from what it wrote
        store.write_table_file(f"{METADATA_DIR}/{VERSION_HINT}", str(number + 1).encode(), if_absent=False)
        return number + 1
    raise RuntimeError(f"{snapshot.table_uri}: Iceberg metadata kept being written by others; gave up after "
                       f"{_ATTEMPTS} attempts (the next write converts again)")


def catch_up(table: Any) -> tuple[int | None, int]:
    """Convert a table's Delta versions that have no Iceberg metadata yet (after a failed conversion, or
    for a table that turned Iceberg on without a write since): (the metadata number written or None,
    the Delta version the newest metadata names). `table`: a `DeltaTable` or a location."""
    from ..snapshot import Snapshot  # not table.as_table: table.py imports the commit path, which converts

    snapshot = Snapshot.load(os.fspath(table)) if isinstance(table, (str, os.PathLike)) else table.snapshot()
    store = snapshot.store
    written = convert(snapshot, store)
    return written, converted_version(snapshot.table_uri, store)


def converted_version(table_uri: str, store: LogStore) -> int | None:
    """The Delta version the newest Iceberg metadata of the table names (None: it has none)."""
    _, metadata = latest_metadata(table_uri, store)
    return int(metadata.properties[DELTA_VERSION]) if metadata is not None else None


def metadata_location(table_uri: str, number: int) -> str:
    """The `v<N>.metadata.json` of a table, named as its metadata names it (`paths.location_uri`)."""
    return f"{location_uri(table_uri).rstrip('/')}/{METADATA_DIR}/v{number}.metadata.json"


def latest_metadata(table_uri: str, store: LogStore, io: Any = None) -> tuple[int, Any]:
    """(N, table metadata) of the newest `v<N>.metadata.json`, or (0, None) when there is none. The hint
    may lag behind a writer that stopped between the two files: later numbers are tried after it."""
    io = io or _file_io(table_uri, store)
    try:
        number = int(_read(io, f"{table_uri.rstrip('/')}/{METADATA_DIR}/{VERSION_HINT}").strip() or 0)
    except (FileNotFoundError, ValueError):
        number = 0
    found = None
    while True:
        try:
            data = _read(io, metadata_location(table_uri, number + 1))
        except FileNotFoundError:
            break
        number, found = number + 1, data
    if found is None and number > 0:
        found = _read(io, metadata_location(table_uri, number))
    return (number, TableMetadataUtil.parse_raw(found)) if found is not None else (0, None)


def _read(io: Any, location: str) -> bytes:
    with io.new_input(location).open() as f:
        return f.read()


def _commits(store: LogStore, first: int, last: int) -> list[tuple[int, list]] | None:
    """The actions of Delta commits first..last, or None when one of them is no longer in the log."""
    out = []
    for version in range(first, last + 1):
        name = f"{version:020d}.json"
        try:
            out.append((version, parse_commit(store.read(name), name)))
        except FileNotFoundError:
            return None
    return out


def _snapshot_id(table_id: str, delta_version: int) -> int:
    """The same Iceberg snapshot id for a Delta version, whoever converts it."""
    digest = hashlib.sha256(f"{table_id}/{delta_version}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1 or 1


class _TableFileIO(PyArrowFileIO):
    """pyiceberg's file IO over the table's own store: an object store through the pyarrow client its
    storage options already make (one per store and options in the process)."""

    def __init__(self, options: Any):
        super().__init__()
        self._options = options

    def _initialize_fs(self, scheme: str, netloc: str | None = None) -> Any:
        if scheme in ("file", ""):
            return super()._initialize_fs(scheme, netloc)
        return self._options.arrow_filesystem(f"{scheme}://{netloc}/")[0]


def _file_io(table_uri: str, store: LogStore) -> Any:
    return _TableFileIO(store.options) if is_object_store_uri(table_uri) else PyArrowFileIO()


class _ManifestWriter(ManifestWriterV2):
    """A data or delete manifest of format v2 or v3. pyiceberg 0.12 writes v2 data manifests only; a v3
    one is the same with the v3 fields (first_row_id, referenced_data_file, content_offset and size),
    which pyiceberg knows but leaves out of what it writes."""

    def __init__(self, format_version: int, content: ManifestContent, spec: PartitionSpec, schema: Schema,
                 output: Any, snapshot_id: int):
        super().__init__(spec, schema, output, snapshot_id, "deflate")
        self._format_version, self._content = format_version, content

    def content(self) -> ManifestContent:
        return self._content

    @property
    def version(self) -> Any:
        return self._format_version

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes" if self._content == ManifestContent.DELETES else "data"}

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        schema = self._with_partition(self._format_version)  # entries are built in the v3 layout
        return AvroOutputFile[ManifestEntry](output_file=self._output_file, file_schema=schema,
                                             record_schema=schema, schema_name="manifest_entry",
                                             metadata=self._meta)


class _ManifestListWriterV3(ManifestListWriterV2):
    """pyiceberg 0.12 writes v2 manifest lists only; v3's adds `first-row-id` (and an optional field per
    manifest, left empty: every data file here names its own first row ID)."""

    def __init__(self, output: Any, snapshot_id: int, parent: int | None, sequence: int, first_row_id: int):
        super().__init__(output, snapshot_id, parent, sequence, "deflate")
        self._format_version = 3
        self._meta = {**self._meta, "format-version": "3", "first-row-id": str(first_row_id)}


def _live_entries(io: Any, manifest: ManifestFile) -> list:
    """A manifest's live entries, read with the v3 fields (pyiceberg's own reader drops them)."""
    with AvroFile[ManifestEntry](io.new_input(manifest.manifest_path), MANIFEST_ENTRY_SCHEMAS[3],
                                 read_types={-1: ManifestEntry, 2: DataFile},
                                 read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}) as reader:
        return [_inherit_from_manifest(e, manifest) for e in reader if e.status != ManifestEntryStatus.DELETED]


@dataclass
class _Layout:
    """The Delta metadata of the versions being converted, as Iceberg schema and partition spec."""
    metadata: Metadata
    schema: Schema
    spec: PartitionSpec
    leaves: list = field(default_factory=list)


class _Builder:
    """The next metadata file: the current one's snapshots plus one per converted Delta version."""

    def __init__(self, table_uri: str, io: Any, current: Any, number: int, store: LogStore, format_version: int):
        self.table_uri = table_uri.rstrip("/")
        self.location = location_uri(self.table_uri)  # every location this metadata names starts so
        self.io = io
        self.store = store
        # Iceberg allows upgrading a table's format, never going back: a table that leaves V3 stays v3
        self.format_version = max(format_version, current.format_version if current else 2)
        self.next_row_id = getattr(current, "next_row_id", None) or 0
        self.number = number
        self.current = current
        self.snapshots: list = list(current.snapshots) if current else []
        self.snapshot_log: list = list(current.snapshot_log) if current else []
        self.metadata_log: list = list(current.metadata_log) if current else []
        if current is not None:
            self.metadata_log.append(MetadataLogEntry(metadata_file=metadata_location(self.location, number),
                                                      timestamp_ms=current.last_updated_ms))
        self.schemas: list = list(current.schemas) if current else []
        self.specs: list = list(current.partition_specs) if current else []
        self.head = current.current_snapshot_id if current else None
        self.sequence = current.last_sequence_number if current else 0
        self.layout: _Layout | None = None
        self.unchanged_metadata: Metadata | None = None
        self.mapping: str | None = current.properties.get(NAME_MAPPING) if current else None
        self.manifests: list[ManifestFile] | None = None  # the head snapshot's, read when first needed
        self.entries: dict[str, list] = {}  # manifest path -> its live entries
        self.delta_version, self.delta_timestamp = -1, 0

    # -- Delta metadata as Iceberg schema and spec

    def _use(self, metadata: Metadata) -> _Layout:
        schema_json = metadata.schema_json
        schema = schemas.iceberg_schema(schema_json)
        known = next((s for s in self.schemas if s.as_struct() == schema.as_struct()), None)
        if known is None:
            known = Schema(*schema.fields, schema_id=max((s.schema_id for s in self.schemas), default=-1) + 1)
            self.schemas.append(known)
        spec = schemas.partition_spec(known, list(metadata.partition_columns))
        same = next((s for s in self.specs if s.fields == spec.fields), None)
        if same is None:
            same = PartitionSpec(*spec.fields, spec_id=max((s.spec_id for s in self.specs), default=-1) + 1)
            self.specs.append(same)
        self.layout = _Layout(metadata, known, same, schemas.leaves(schema_json, known))
        self.mapping = schemas.name_mapping(schema_json, known, self.mapping,
                                            schemas.row_tracking_columns(metadata.configuration))
        return self.layout

    # -- snapshots

    def whole_table(self, snapshot: Any) -> None:
        """One snapshot holding every live file of `snapshot` (a first conversion, or a gap)."""
        layout = self._use(snapshot.metadata)
        adds = snapshot.add_files()
        self.manifests = []
        op = Operation.APPEND if self.head is None else Operation.OVERWRITE
        self._snapshot(snapshot.version, snapshot.timestamp, op, adds, [], layout, replace_all=True)

    def commit(self, version: int, actions: Iterable[Any]) -> None:
        actions = list(actions)
        metadata = next((a for a in actions if isinstance(a, Metadata)), None)
        if metadata is not None or self.layout is None:
            self._use(metadata if metadata is not None else self._metadata_before(version))
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        timestamp = (info.extra.get("inCommitTimestamp") or info.timestamp) if info else None
        adds = [a for a in actions if isinstance(a, AddFile)]
        removes = [a for a in actions if isinstance(a, RemoveFile)]
        self.delta_version, self.delta_timestamp = version, timestamp or self.delta_timestamp
        if not adds and not removes:
            return  # a metadata-only commit: the metadata file names its version, no snapshot
        changes = any(a.data_change for a in adds + removes)
        new_files = {a.path for a in adds} - {r.path for r in removes}  # the others changed their DV only
        op = (Operation.APPEND if not removes
              else (Operation.OVERWRITE if new_files else Operation.DELETE) if changes else Operation.REPLACE)
        self._snapshot(version, self.delta_timestamp, op, adds, removes, self.layout)

    def _metadata_before(self, version: int) -> Metadata:
        if self.unchanged_metadata is not None:
            return self.unchanged_metadata
        from ..snapshot import Snapshot  # a batch that changes the metadata after this commit: rare

        return Snapshot.load(self.table_uri, version=version, store=self.store).metadata

    def _head_manifests(self) -> list[ManifestFile]:
        if self.manifests is None:
            head = next((s for s in self.snapshots if s.snapshot_id == self.head), None)
            self.manifests = list(head.manifests(self.io)) if head is not None else []
        return self.manifests

    def _live_entries(self, manifest: ManifestFile) -> list:
        if manifest.manifest_path not in self.entries:
            self.entries[manifest.manifest_path] = _live_entries(self.io, manifest)
        return self.entries[manifest.manifest_path]

    def _file_location(self, path: str) -> str:
        return location_uri(absolute_file_path(self.table_uri, path))

    def _snapshot(self, version: int, timestamp: int, op: Operation, adds: list, removes: list,
                  layout: _Layout, replace_all: bool = False) -> None:
        snapshot_id = _snapshot_id(layout.metadata.id, version)
        self.sequence += 1
        summary = SnapshotSummaryCollector()
        removed = {self._file_location(r.path) for r in removes}
        # A path removed and added again in one commit is the same data file with a new deletion vector:
        # its data entry stays, its old DV entry goes and the new one comes.
        gone = removed - {self._file_location(a.path) for a in adds}
        new_files = [a for a in adds if self._file_location(a.path) not in removed]
        with_dvs = [a for a in adds if a.deletion_vector]
        if with_dvs and self.format_version < 3:
            raise UnsupportedFeatureError(
                f"{with_dvs[0].path}: a file with a deletion vector cannot be given to Iceberg v2 readers "
                f"(IcebergCompatV2 tables are written without deletion vectors; IcebergCompatV3 allows them)")
        manifests: list[ManifestFile] = []
        carried: list[ManifestFile] = []
        for manifest in ([] if replace_all else self._head_manifests()):
            deletes = manifest.content == ManifestContent.DELETES
            targets = removed if deletes else gone  # a removed file's DV goes, whether or not the file does
            # an append reads no manifest: it lists the head's as they are, by reference
            entries = self._live_entries(manifest) if targets else []
            # as `_file_location` names them: metadata written before file:// URIs names local files bare
            names = [location_uri(data_files.v3_field(e.data_file, "referenced_data_file") if deletes
                                  else e.data_file.file_path) for e in entries]
            if not targets.intersection(names):
                manifests.append(manifest)
                carried.append(manifest)
                continue
            spec = next(s for s in self.specs if s.spec_id == manifest.partition_spec_id)
            with self._writer(manifest.content, spec, layout.schema, snapshot_id) as writer:
                for entry, name in zip(entries, names):
                    if name in targets:
                        writer.delete(entry)
                        summary.remove_file(entry.data_file, layout.schema, spec)
                    else:
                        writer.existing(entry)
            rewritten = writer.to_manifest_file()
            manifests.append(rewritten)
            kept = [e for e, name in zip(entries, names) if name not in targets]
            if kept:  # a manifest of only deleted entries is listed by this snapshot, not the next
                carried.append(rewritten)
                self.entries[rewritten.manifest_path] = [
                    ManifestEntry.from_args(status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id,
                                            sequence_number=e.sequence_number,
                                            file_sequence_number=e.file_sequence_number, data_file=e.data_file)
                    for e in kept]
        described = {a.path: data_files.data_file(a, self._file_location(a.path), layout.schema,
                                                  layout.metadata.schema_json, layout.leaves, layout.spec)
                     for a in new_files + with_dvs}
        added_files = [described[a.path] for a in new_files]
        if with_dvs:
            dvs = deletion_vectors.write_puffin(self.store, self.io, f"{self.location}/{METADATA_DIR}",
                                                [(described[a.path], a.deletion_vector) for a in with_dvs])
        for content, files in ((ManifestContent.DATA, added_files),
                               (ManifestContent.DELETES, dvs if with_dvs else [])):
            if not files:
                continue
            with self._writer(content, layout.spec, layout.schema, snapshot_id) as writer:
                for data in files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                                       data_file=data))
                    summary.add_file(data, layout.schema, layout.spec)
            added = writer.to_manifest_file()
            manifests.append(added)
            carried.append(added)
        # row lineage (v3): the snapshot's row IDs run from the table's next one past every baseRowId it adds
        first_row_id = self.next_row_id
        starts = [(data_files.v3_field(f, "first_row_id"), f.record_count) for f in added_files]
        self.next_row_id = max([first_row_id] + [start + n for start, n in starts if start is not None])
        manifest_list = self._output("snap", snapshot_id)
        if self.format_version >= 3:
            lister: Any = _ManifestListWriterV3(manifest_list, snapshot_id, self.head, self.sequence, first_row_id)
        else:
            lister = ManifestListWriterV2(manifest_list, snapshot_id, self.head, self.sequence, "deflate")
        with lister as writer:
            writer.add_manifests(manifests)
        previous = next((s.summary for s in self.snapshots if s.snapshot_id == self.head), None)
        properties = {DELTA_VERSION: str(version), DELTA_TIMESTAMP: str(timestamp)}
        # pyiceberg totals a replace as it totals an overwrite (it refuses to total a replace itself)
        totalled = update_snapshot_summaries(
            Summary(operation=Operation.OVERWRITE if op == Operation.REPLACE else op, **summary.build(),
                    **properties), None if replace_all else previous)
        lineage = ({"first_row_id": first_row_id, "added_rows": self.next_row_id - first_row_id}
                   if self.format_version >= 3 else {})
        self.snapshots.append(IcebergSnapshot(
            snapshot_id=snapshot_id, parent_snapshot_id=self.head, sequence_number=self.sequence,
            timestamp_ms=timestamp, manifest_list=manifest_list.location,
            summary=Summary(operation=op, **totalled.additional_properties), schema_id=layout.schema.schema_id,
            **lineage))
        self.snapshot_log.append(SnapshotLogEntry(snapshot_id=snapshot_id, timestamp_ms=timestamp))
        self.head, self.manifests = snapshot_id, carried
        self.delta_version, self.delta_timestamp = version, timestamp

    def _writer(self, content: ManifestContent, spec: PartitionSpec, schema: Schema, snapshot_id: int) -> Any:
        return _ManifestWriter(self.format_version, content, spec, schema, self._output("m"), snapshot_id)

    def _output(self, kind: str, snapshot_id: int | None = None) -> Any:
        name = (f"snap-{snapshot_id}-{uuid.uuid4()}.avro" if kind == "snap" else f"{uuid.uuid4()}-m0.avro")
        return self.io.new_output(f"{self.location}/{METADATA_DIR}/{name}")

    # -- the metadata file

    def metadata_json(self, snapshot: Any) -> bytes:
        if self.layout is None:
            self._use(snapshot.metadata)
        layout = self.layout
        version = max(self.delta_version, snapshot.version)
        timestamp = self.delta_timestamp if self.delta_version == version else snapshot.timestamp
        lineage = {"next_row_id": self.next_row_id} if self.format_version >= 3 else {}
        metadata = (TableMetadataV3 if self.format_version >= 3 else TableMetadataV2)(
            location=self.location, table_uuid=uuid.UUID(layout.metadata.id), last_updated_ms=timestamp,
            last_column_id=max(s.highest_field_id for s in self.schemas), schemas=self.schemas,
            current_schema_id=layout.schema.schema_id, partition_specs=self.specs,
            default_spec_id=layout.spec.spec_id,
            last_partition_id=max([f.field_id for s in self.specs for f in s.fields],
                                  default=schemas.PARTITION_FIELD_START - 1),
            properties={DELTA_VERSION: str(version), DELTA_TIMESTAMP: str(timestamp),
                        NAME_MAPPING: self.mapping},
            current_snapshot_id=self.head, snapshots=self.snapshots, snapshot_log=self.snapshot_log,
            metadata_log=self.metadata_log, sort_orders=[UNSORTED_SORT_ORDER], default_sort_order_id=0,
            refs={"main": SnapshotRef(snapshot_id=self.head, snapshot_ref_type=SnapshotRefType.BRANCH)}
            if self.head is not None else {},
            last_sequence_number=self.sequence, **lineage)
        return metadata_json(metadata)


def metadata_json(metadata: Any) -> bytes:
    """Table metadata as JSON. pyiceberg 0.12 refuses to serialize v3 metadata (it does not write v3
    tables itself); its model's own serialization, which it uses for v2, writes the v3 fields as well."""
    return super(type(metadata), metadata).model_dump_json(exclude_none=True).encode()
