"""Row tracking (writer feature `rowTracking`, on top of `domainMetadata`): every row of the table has
a row ID, unique in every version, and a row commit version.

Both are "default generated" from the file's `add`: row ID = `baseRowId` + the row's position in the
file, row commit version = `defaultRowCommitVersion`. A writer of a table whose protocol lists the
feature (unless `delta.rowTrackingSuspended`) must therefore, in every commit:
- give each new file a `baseRowId` above the table's high-water mark (the highest row ID ever given,
  kept in the `delta.rowTracking` domain metadata) and raise the mark past its rows;
- set `defaultRowCommitVersion` of a new file to the commit's version;
- carry both unchanged in an `add` or `remove` of a file already in the table (a DV change).

This is done per commit attempt (`assign`), as the version and the mark move when another writer wins.

`delta.enableRowTracking=true` also promises stable row IDs: rows copied or updated "should" keep them
through hidden materialized columns (named by the table's configuration), which take precedence over the
default generated values. OPTIMIZE writes them (`materialized_fields`), so compaction and clustering keep
every row's ID and commit version; DML writes the row IDs of the rows it updates (their commit version
is the DML's) and, copy-on-write, the ID and commit version of every row it copies. Each commit's tags
say whether rewritten rows kept theirs (`delta.rowTracking.preserved`), as the protocol asks.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .actions import AddFile, DomainMetadata, Protocol, RemoveFile
from .errors import InvalidTableError
from .table_configuration import ROW_TRACKING_KEY, ROW_TRACKING_SUSPENDED_KEY, flag

FEATURE = "rowTracking"
ENABLE_KEY = ROW_TRACKING_KEY
SUSPENDED_KEY = ROW_TRACKING_SUSPENDED_KEY
ROW_ID_COLUMN_KEY = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN_KEY = "delta.rowTracking.materializedRowCommitVersionColumnName"
DOMAIN = "delta.rowTracking"
PRESERVED_TAG = "delta.rowTracking.preserved"


def is_enabled(configuration: dict[str, str] | None) -> bool:
    return flag(configuration, ENABLE_KEY)


def is_active(protocol: Protocol | None, configuration: dict[str, str] | None) -> bool:
    """Whether writers must assign row IDs: the protocol lists the feature and it is not suspended."""
    return (protocol is not None and protocol.has_writer_feature(FEATURE)
            and not flag(configuration, SUSPENDED_KEY))


def with_column_names(configuration: dict[str, str], current: dict[str, str] | None,
                      column_names: Iterable[str], table: str) -> dict[str, str]:
    """The configuration with the hidden materialized column names row tracking needs once enabled:
    kept from the table where it has them, else new ones. They may never equal a column's name."""
    if not is_enabled(configuration) and not any(k in configuration for k in (ROW_ID_COLUMN_KEY,
                                                                              ROW_COMMIT_VERSION_COLUMN_KEY)):
        return configuration
    if flag(configuration, SUSPENDED_KEY) and is_enabled(configuration):
        raise InvalidTableError(f"{table}: {ENABLE_KEY}=true and {SUSPENDED_KEY}=true contradict each other: "
                                f"row tracking cannot be enabled while it is suspended. Set one of them to false.")
    out = dict(configuration)
    for key, prefix in ((ROW_ID_COLUMN_KEY, "_row-id-col-"), (ROW_COMMIT_VERSION_COLUMN_KEY,
                                                              "_row-commit-version-col-")):
        if key not in out:
            out[key] = (current or {}).get(key) or f"{prefix}{uuid.uuid4()}"
    names = {n.lower() for n in column_names}
    clash = [out[k] for k in (ROW_ID_COLUMN_KEY, ROW_COMMIT_VERSION_COLUMN_KEY) if out[k].lower() in names]
    if clash or out[ROW_ID_COLUMN_KEY] == out[ROW_COMMIT_VERSION_COLUMN_KEY]:
        raise InvalidTableError(
            f"{table}: the row tracking column name(s) {clash or [out[ROW_ID_COLUMN_KEY]]} must differ from "
            f"each other and from every column of the table. Rename the column.")
    return out


def high_water_mark(domains: Iterable[DomainMetadata]) -> int:
    """The highest row ID given so far (-1 for none) in the last `delta.rowTracking` domain of `domains`."""
    mark = -1
    for d in domains:
        if d.domain == DOMAIN and not d.removed:
            try:
                mark = int(json.loads(d.configuration)["rowIdHighWaterMark"])
            except (ValueError, KeyError, TypeError) as e:
                raise InvalidTableError(f"the {DOMAIN} domain metadata {d.configuration!r} holds no "
                                        f"integer rowIdHighWaterMark ({e})") from None
    return mark


def live_row_ids(files: pa.Table, paths: Iterable[str]) -> dict[str, tuple[int | None, int | None]]:
    """(`baseRowId`, `defaultRowCommitVersion`) of those of `paths` that are live files (rows of a
    snapshot's `files`), by path as the log spells it."""
    wanted = pa.array(sorted(set(paths)), pa.string())
    if not len(wanted) or not files.num_rows:
        return {}
    hit = files.filter(pc.is_in(files.column("path"), value_set=wanted))
    return {p: (b, v) for p, b, v in zip(hit.column("path").to_pylist(), hit.column("base_row_id").to_pylist(),
                                         hit.column("default_row_commit_version").to_pylist())}


def assign(actions: list[Any], version: int, mark: int, live: dict[str, tuple[int | None, int | None]],
           enabling: bool = False, backfill: Iterable[AddFile] = (), table: str = "") -> tuple[list[Any], bool]:
    """The commit's actions with row IDs, and whether every row it rewrote kept its row ID.

    New files get fresh `baseRowId`s above `mark` (the high-water mark) and `defaultRowCommitVersion`
    = `version`. Files already in the table (`live`, by path: see `live_row_ids`) keep theirs in both
    their `add` and `remove`. When the commit is `enabling` row tracking, live files without row IDs
    get fresh ones: those it adds back (with a new DV) and `backfill`, the others, added back
    unchanged (dataChange=false) but for their row IDs. A `delta.rowTracking` domain with the new
    mark is added when it moved. Rows are rewritten when the commit both removes (or marks) rows and adds new ones."""
    mark_before = mark
    backfill = list(backfill)

    def fresh(a: AddFile, commit_version: int) -> AddFile:
        nonlocal mark
        records = a.num_records
        if records is None:
            raise InvalidTableError(
                f"{table}: the file {a.path!r} has no numRecords in its stats, so it cannot be given row "
                f"IDs (row tracking, {FEATURE}). Nothing was committed.")
        a = replace(a, base_row_id=mark + 1, default_row_commit_version=commit_version)
        mark += records
        return a

    out: list[Any] = []
    new_rows = False
    for a in actions:
        if isinstance(a, DomainMetadata) and a.domain == DOMAIN:
            continue  # the mark is this function's to write
        if isinstance(a, (AddFile, RemoveFile)) and a.path in live:
            base, commit_version = live[a.path]
            if isinstance(a, AddFile) and base is None and enabling:
                a = fresh(a, commit_version if commit_version is not None else version)
            else:
                a = replace(a, base_row_id=base, default_row_commit_version=commit_version)
        elif isinstance(a, AddFile):
            a = fresh(a, version)
            new_rows = new_rows or bool(a.num_records)
        out.append(a)
    for b in backfill:
        commit_version = live.get(b.path, (None, None))[1]
        out.append(fresh(replace(b, data_change=False), commit_version if commit_version is not None else version))
    if mark != mark_before:
        out.append(DomainMetadata(DOMAIN, json.dumps({"rowIdHighWaterMark": mark}, separators=(",", ":"))))
    rewritten = new_rows and any(isinstance(a, RemoveFile) for a in actions)
    return out, not rewritten


def materialized_fields(configuration: dict[str, str]) -> list[dict[str, Any]] | None:
    """The schema fields (Spark StructType JSON) of the hidden columns that keep rewritten rows' row IDs
    and row commit versions, or None where row tracking is not active with its column names."""
    from .column_mapping import mode_of

    names = [(configuration or {}).get(k) for k in (ROW_ID_COLUMN_KEY, ROW_COMMIT_VERSION_COLUMN_KEY)]
    if not all(names):
        return None
    # Under column mapping they are found by name (their physical name), in `id` mode too: no field id.
    metadata = (lambda n: {"delta.columnMapping.physicalName": n}) if mode_of(configuration) in ("name", "id") \
        else (lambda n: {})
    return [{"name": n, "type": "long", "nullable": True, "metadata": metadata(n)} for n in names]


def keeps_row_ids(protocol: Protocol | None, configuration: dict[str, str], files: pa.Table) -> bool:
    """Whether a rewrite of `files` (rows of a snapshot's `files`) can keep their rows' IDs: row tracking
    is active, its hidden columns can be written, and every file has row IDs to carry over."""
    return (is_active(protocol, configuration) and materialized_fields(configuration) is not None
            and not files.column("base_row_id").null_count
            and not files.column("default_row_commit_version").null_count)


def with_materialized_fields(schema_json: dict[str, Any], configuration: dict[str, str]) -> dict[str, Any]:
    """The table's schema with the hidden row tracking columns at its end: what a rewrite that keeps row
    IDs reads and writes."""
    return {**schema_json, "fields": [*schema_json["fields"], *(materialized_fields(configuration) or [])]}


def without_hidden_stats(stats: str | None, configuration: dict[str, str]) -> str | None:
    """A file's stats JSON without the hidden columns' entries: they are no column of the table."""
    if not stats:
        return stats
    hidden = {f["name"] for f in materialized_fields(configuration) or []}
    parsed = json.loads(stats)
    for key in ("minValues", "maxValues", "nullCount"):
        if isinstance(parsed.get(key), dict):
            parsed[key] = {k: v for k, v in parsed[key].items() if k not in hidden}
    return json.dumps(parsed, separators=(",", ":"))


def file_row_ids(store: Any, file: AddFile | RemoveFile, configuration: dict[str, str]) -> np.ndarray:
    """The row ID of every row of one data file, by position (deleted rows too): the hidden materialized
    column's value where the file holds one, else `baseRowId` + the row's position, as readers find it."""
    from .storage.files import read_parquet
    from .paths import absolute_file_path

    column = (configuration or {}).get(ROW_ID_COLUMN_KEY)
    data = read_parquet(absolute_file_path(store.table_uri, file.path), columns=[column] if column else [],
                        storage_options=store.options, missing_ok=True)
    stored = data.column(0).combine_chunks() if data.num_columns else pa.nulls(data.num_rows, pa.int64())
    if not stored.null_count:
        return stored.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if file.base_row_id is None:
        raise InvalidTableError(f"{store.table_uri}: the file {file.path!r} has no baseRowId, so its rows "
                                f"have no row IDs ({FEATURE}).")
    ids = np.arange(file.base_row_id, file.base_row_id + data.num_rows, dtype=np.int64)
    if stored.null_count < len(stored):
        ids = np.where(stored.is_valid().to_numpy(zero_copy_only=False),
                       stored.fill_null(0).to_numpy(zero_copy_only=False), ids)
    return ids


def locate_rows(store: Any, files: list[AddFile], configuration: dict[str, str], row_ids: np.ndarray,
                threads: int = 4) -> list[tuple[AddFile, np.ndarray]]:
    """Where the rows with `row_ids` are among `files`: (file, positions) for each file holding some.
    Rows deleted by a file's DV are found too; the caller decides what a row found twice or not at all means."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = np.unique(np.asarray(row_ids, dtype=np.int64))

    def find(file: AddFile) -> tuple[AddFile, np.ndarray]:
        return file, np.flatnonzero(np.isin(file_row_ids(store, file, configuration), wanted, assume_unique=False))

    if not len(wanted) or not files:
        return []
    with ThreadPoolExecutor(max(1, min(threads, len(files)))) as pool:
        return [(f, p) for f, p in pool.map(find, files) if len(p)]
