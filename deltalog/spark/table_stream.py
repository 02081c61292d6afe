"""A Structured Streaming source over a table of ours (PySpark's Python streaming data source API):
`spark.readStream.format("deltalog_table").load(uri)`.

The stream is a sequence of units, each a list of files: the table as of the version the stream starts
at (or, with `startingVersion`, nothing before that version), then every later commit. A commit's unit
is the files it added; with `readChangeFeed` it is the commit's changes instead (its change data files,
or its added files as inserts and removed files as deletes, as `deltalog.change_data` finds them), with
`_change_type`, `_commit_version` and `_commit_timestamp`, and the first unit is the table's rows as
inserts. Commits that change no data (`dataChange=false`: OPTIMIZE, a DV purge) are empty units.
Without the change feed a commit that deletes or updates rows fails the stream by name, as Delta's
streaming source does, unless `skipChangeCommits` is `true` (then such commits are skipped whole).

An offset is a position in that sequence, `{"version", "index", "snapshot"}`: every unit before
version `version` is read, and the first `index` files of the unit at `version` (the table's snapshot
if `snapshot`, else the commit). `maxFilesPerTrigger` (Delta's default: 1000) and `maxBytesPerTrigger`
bound a micro-batch, also under the availableNow trigger, by ending it inside a unit where needed
(PySpark 4.2's admission control; older PySpark reads everything available per batch and refuses the
options by name). Rows are read through the engine's per-file reader (`scan.read_data_file`), in the
schema the query started with: column mapping, partition values and deletion vectors apply as in every
read; a column the table gained since fails the stream by name until it is started again.
"""
from __future__ import annotations

import json
from typing import Any, Iterator, NamedTuple

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

try:  # PySpark 4.2 and later: read limits, and availableNow that honours them
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable, ReadMaxBytes, ReadMaxFiles, SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadAllAvailable = ReadMaxBytes = ReadMaxFiles = None
    SupportsTriggerAvailableNow = object

from .files_source import SECRET_OPTION, FilesPartition, register_source

SOURCE_NAME = "deltalog_table"
DEFAULT_MAX_FILES = 1000  # Delta's maxFilesPerTrigger when neither limit is given
_BEFORE_SNAPSHOT = {"version": -1, "index": 0, "snapshot": True}


class Position(NamedTuple):
    version: int
    index: int
    snapshot: bool

    @classmethod
    def of(cls, offset: dict[str, Any]) -> "Position":
        return cls(int(offset["version"]), int(offset.get("index", 0)), bool(offset.get("snapshot", False)))

    def offset(self) -> dict[str, Any]:
        return {"version": self.version, "index": self.index, "snapshot": self.snapshot}


class _BatchFiles(FilesPartition):
    """Files of one micro-batch (each `[path, partition values, DV, kind, version, commit ms]`), with the
    table's layout read on the driver once per batch, so that tasks never replay the log."""

    def __init__(self, files: list[list[Any]], layout: dict[str, Any]):
        super().__init__(files)
        self.layout = layout


def _flag(options: dict[str, str], name: str) -> bool:
    return str(options.get(name, "false")).lower() == "true"


def _change_columns() -> list[StructField]:
    from ..change_data import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN

    return [StructField(CHANGE_TYPE_COLUMN, StringType()), StructField(COMMIT_VERSION_COLUMN, LongType()),
            StructField(COMMIT_TIMESTAMP_COLUMN, TimestampType())]


class DeltaTableStreamSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        schema = StructType.fromJson(_open_table(self.options).snapshot().schema_json)
        if _flag(self.options, "readChangeFeed"):
            schema = StructType([*schema.fields, *_change_columns()])
        return schema

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(self.options)


def _open_table(options: dict[str, str]) -> Any:
    """The table a stream reads, with the store options its driver handed over: this runs in Spark's
    Python workers, which know no options configured in the driver's process."""
    from ..table import DeltaTable

    return DeltaTable(options["path"], json.loads(options.get(SECRET_OPTION) or "{}") or None)


OPTIONS = ("startingVersion", "skipChangeCommits", "readChangeFeed", "maxFilesPerTrigger", "maxBytesPerTrigger")


def read_limits(table_uri: str, options: dict[str, Any]) -> dict[str, int]:
    """The read limits among `options`, checked: positive whole numbers, on a PySpark that has them."""
    from ..errors import InvalidTableError

    limits = {}
    for name in ("maxFilesPerTrigger", "maxBytesPerTrigger"):
        if options.get(name) is not None:
            try:
                limits[name] = int(options[name])
                assert limits[name] > 0
            except (ValueError, AssertionError):
                raise InvalidTableError(f"stream of {table_uri}: {name}={options[name]!r} is not a positive whole "
                                        f"number (of files, or of bytes).") from None
    if limits and ReadAllAvailable is None:
        import pyspark

        raise InvalidTableError(f"stream of {table_uri}: {', '.join(limits)} needs PySpark 4.2 or later (its read "
                                f"limits for Python sources); this is PySpark {pyspark.__version__}.")
    return limits


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]):
        self.options = options
        self.table_uri = options["path"]
        self.starting_version = int(options["startingVersion"]) if options.get("startingVersion") else None
        self.skip_change_commits = _flag(options, "skipChangeCommits")
        self.changes = _flag(options, "readChangeFeed")
        limits = read_limits(self.table_uri, options)
        self.max_files = limits.get("maxFilesPerTrigger", None if "maxBytesPerTrigger" in limits else DEFAULT_MAX_FILES)
        self.max_bytes = limits.get("maxBytesPerTrigger")
        self.declared = self.table.snapshot().schema_json  # the schema the query is planned with
        self.target: int | None = None  # availableNow: the last version this run reads
        self._units: dict[tuple[int, bool], list[tuple[list[Any], int]]] = {}

    @property
    def table(self) -> Any:
        """The table's handle, made once per process: the reader travels to executors pickled, without it."""
        if self.__dict__.get("_table") is None:
            self._table = _open_table(self.options)
        return self._table

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_table"}

    # -- offsets --------------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        if self.starting_version is not None:
            return Position(self.starting_version, 0, False).offset()
        return dict(_BEFORE_SNAPSHOT)  # the snapshot's version is fixed by the first latestOffset

    def getDefaultReadLimit(self) -> Any:
        # both limits apply in latestOffset; this tells Spark that the source limits its batches
        return ReadMaxFiles(self.max_files) if self.max_files else ReadMaxBytes(self.max_bytes)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest()

    def _latest(self) -> int | None:
        from ..log_segment import latest_version

        return latest_version(self.table.store)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        last = self.target if self.target is not None else self._latest()
        if start is None:  # PySpark before 4.2: no start, no limits, everything available
            return (Position(last + 1, 0, False).offset() if last is not None
                    else dict(_BEFORE_SNAPSHOT))
        position = Position.of(start)
        if last is None:
            return start
        if position.version == -1:
            position = Position(last, 0, True)
        elif position.version > last:
            return start
        if limit is None or (ReadAllAvailable and isinstance(limit, ReadAllAvailable)):
            return Position(last + 1, 0, False).offset()
        files = size = 0
        while position.version <= last:
            unit = self._unit(position.version, position.snapshot)
            for i in range(position.index, len(unit)):
                if files and ((self.max_files and files >= self.max_files) or (self.max_bytes and size >= self.max_bytes)):
                    return Position(position.version, i, position.snapshot).offset()
                files, size = files + 1, size + unit[i][1]
            position = Position(position.version + 1, 0, False)
        return position.offset()

    # -- batches --------------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        from ..errors import InvalidTableError

        begin, stop = Position.of(start), Position.of(end)
        if begin.version == -1:  # the first batch: the snapshot the end position names
            begin = Position(stop.version if stop.snapshot else stop.version - 1, 0, True)
        entries: list[list[Any]] = []
        position = begin
        while position.version < stop.version and (position.version, position.snapshot) != (stop.version, stop.snapshot):
            entries += [e for e, _ in self._unit(position.version, position.snapshot)[position.index:]]
            position = Position(position.version + 1, 0, False)
        if stop.index > position.index:  # (an end at index 0 needs nothing of its unit, which may not exist yet)
            entries += [e for e, _ in self._unit(stop.version, stop.snapshot)[position.index:stop.index]]
        last = stop.version if stop.index or stop.snapshot else stop.version - 1
        snapshot = self.table.snapshot(version=max(last, 0))
        known = {f["name"].lower(): f["type"] for f in self.declared["fields"]}
        grown = [f["name"] for f in snapshot.schema_json["fields"] if known.get(f["name"].lower()) != f["type"]]
        if grown:
            raise InvalidTableError(
                f"{self.table_uri}: by version {snapshot.version} the table's columns changed ({', '.join(grown)}) since "
                f"this stream was started; start the stream again to read them (in dbt: run the model again).")
        layout = {"schema": self.declared, "configuration": dict(snapshot.configuration),
                  "partition_columns": list(snapshot.partition_columns), "changes": self.changes}
        return [_BatchFiles(entries[i:i + 16], layout) for i in range(0, len(entries), 16)]

    def _unit(self, version: int, snapshot: bool) -> list[tuple[list[Any], int]]:
        """The files of one unit, each as (entry for a task, size in bytes); kept on the driver."""
        key = (version, snapshot)
        if key not in self._units:
            self._units[key] = self._snapshot_unit(version) if snapshot else self._commit_unit(version)
        return self._units[key]

    def _snapshot_unit(self, version: int) -> list[tuple[list[Any], int]]:
        snapshot = self.table.snapshot(version=version)
        files = snapshot.files
        kind = "insert" if self.changes else "add"
        rows = sorted(zip(files.column("modification_time").to_pylist(), files.column("path").to_pylist(),
                          files.column("partition_values").to_pylist(), files.column("deletion_vector").to_pylist(),
                          files.column("size").to_pylist()), key=lambda r: (r[0] or 0, r[1]))
        return [([path, dict(values or []), dv, kind, version, snapshot.timestamp], size or 0)
                for _, path, values, dv, size in rows]

    def _commit_unit(self, version: int) -> list[tuple[list[Any], int]]:
        store = self.table.store
        if self.changes:
            from ..change_data import commit_changes

            _, (commit,) = commit_changes(store, version, version)
            out = []
            for kind, files in (("cdc", commit.cdc), ("delete", commit.deleted), ("insert", commit.inserted)):
                for path, values, dv, size in zip(files.column("path").to_pylist(),
                                                  files.column("partition_values").to_pylist(),
                                                  files.column("deletion_vector").to_pylist(),
                                                  files.column("size").to_pylist()):
                    out.append(([path, dict(values or []), dv, kind, version, commit.timestamp], size or 0))
            return out
        from ..actions import AddFile, RemoveFile, parse_commit
        from ..committer import commit_file_name
        from ..errors import InvalidTableError

        name = commit_file_name(version)
        actions = parse_commit(store.read(name), f"{self.table_uri}/_delta_log/{name}")
        if any(isinstance(a, RemoveFile) and a.data_change for a in actions):
            if self.skip_change_commits:
                return []
            raise InvalidTableError(
                f"{self.table_uri}: version {version} deletes or updates rows; a stream of this table reads the "
                f"rows commits add, and cannot take back rows it already passed on. Set the option "
                f"skipChangeCommits=true to skip such commits, or readChangeFeed=true to read the changes.")
        return [([a.path, dict(a.partition_values or {}), a.deletion_vector, "add", version, 0], a.size or 0)
                for a in actions if isinstance(a, AddFile) and a.data_change]

    def read(self, partition: _BatchFiles) -> Iterator[Any]:
        import pyarrow as pa

        from ..change_data import CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN, with_change_type
        from ..scan import read_data_file

        store, layout = self.table.store, partition.layout
        for log_path, values, dv, kind, version, millis in partition.files:
            schema = with_change_type(layout["schema"]) if kind == "cdc" else layout["schema"]
            table = read_data_file(store, schema, layout["configuration"], layout["partition_columns"],
                                   log_path, values, dv, skip_deleted=True, row_index=False)
            if layout["changes"]:
                n = table.num_rows
                if kind != "cdc":
                    table = table.append_column(CHANGE_TYPE_COLUMN, pa.array([kind] * n, pa.string()))
                table = table.append_column(COMMIT_VERSION_COLUMN, pa.array([version] * n, pa.int64()))
                table = table.append_column(COMMIT_TIMESTAMP_COLUMN,
                                            pa.array([millis * 1000] * n, pa.timestamp("us", tz="UTC")))
            yield from table.to_batches()

    def commit(self, end: dict[str, Any]) -> None:
        done = Position.of(end).version
        self._units = {k: v for k, v in self._units.items() if k[0] >= done}  # units read in full go


def stream_table(spark: Any, table: Any, **options: Any) -> Any:
    """The table (a `DeltaTable` or a location) as a streaming DataFrame (options as Delta names them:
    startingVersion, skipChangeCommits, readChangeFeed, maxFilesPerTrigger, maxBytesPerTrigger)."""
    from ..errors import InvalidTableError
    from ..table import as_table

    table = as_table(table)
    table_uri = table.uri

    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidTableError(f"stream of {table_uri}: option(s) {', '.join(unknown)} unknown; a stream of a table "
                                f"takes {', '.join(OPTIONS)}.")
    read_limits(table_uri, {k: str(v) for k, v in options.items()})
    register_source(spark, DeltaTableStreamSource)
    return (spark.readStream.format(SOURCE_NAME)
            .options(**{k: json.dumps(v) if not isinstance(v, str) else v for k, v in options.items()})
            .option(SECRET_OPTION, json.dumps(table.store.task_options())).load(table_uri))
