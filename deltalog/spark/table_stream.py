"""A Structured Streaming source over a table of ours (PySpark's Python streaming data source API):
`spark.readStream.format("deltalog_table").load(uri)`.

Offsets are table versions. The first batch is the table as of the version the stream starts at (or,
with `startingVersion`, the rows added from that version on); every later batch holds the rows the
commits after the last one added. Commits that change no data (`dataChange=false`: OPTIMIZE, a DV
purge) are skipped. A commit that deletes or updates rows fails the stream by name, as Delta's
streaming source does, unless `skipChangeCommits` is `true` (then such commits are skipped whole).
Rows are read through the engine's per-file reader (`scan.read_data_file`): column mapping, partition
values and deletion vectors apply as in every read.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .files_source import FilesPartition

SOURCE_NAME = "deltalog_table"


class _BatchFiles(FilesPartition):
    """Files of one micro-batch, with the table's layout at the batch's last version (read on the
    driver once per batch, so that tasks never replay the log)."""

    def __init__(self, files: list[list[Any]], layout: dict[str, Any]):
        super().__init__(files)
        self.layout = layout


class DeltaTableStreamSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        from ..snapshot import Snapshot

        return StructType.fromJson(Snapshot.load(self.options["path"]).schema_json)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(self.options)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]):
        self.table_uri = options["path"]
        self.starting_version = int(options["startingVersion"]) if options.get("startingVersion") else None
        self.skip_change_commits = str(options.get("skipChangeCommits", "false")).lower() == "true"

    def initialOffset(self) -> dict[str, int]:
        # -1: nothing read yet; the first batch then reads the snapshot (or from startingVersion)
        return {"version": -1}

    def latestOffset(self) -> dict[str, int]:
        from ..log_segment import latest_version
        from ..stores import log_store_for

        latest = latest_version(log_store_for(self.table_uri))
        return {"version": -1 if latest is None else latest}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        from ..snapshot import Snapshot

        first, last = int(start["version"]), int(end["version"])
        if last <= first:
            return []
        snapshot = Snapshot.load(self.table_uri, version=last)
        if first == -1 and self.starting_version is None:
            files = snapshot.files
            entries = [[p, dict(v or []), dv] for p, v, dv in zip(files.column("path").to_pylist(),
                                                                   files.column("partition_values").to_pylist(),
                                                                   files.column("deletion_vector").to_pylist())]
        else:
            entries = self._added_since(max(first + 1, self.starting_version or 0), last)
        layout = {"schema": snapshot.schema_json, "configuration": dict(snapshot.configuration),
                  "partition_columns": list(snapshot.partition_columns)}
        return [_BatchFiles(entries[i:i + 16], layout) for i in range(0, len(entries), 16)]

    def _added_since(self, begin: int, last: int) -> list[list[Any]]:
        from ..committer import commit_file_name
        from ..errors import InvalidTableError
        from ..actions import AddFile, RemoveFile, parse_commit
        from ..stores import log_store_for

        store = log_store_for(self.table_uri)
        out: list[list[Any]] = []
        for v in range(begin, last + 1):
            name = commit_file_name(v)
            actions = parse_commit(store.read(name), f"{self.table_uri}/_delta_log/{name}")
            if any(isinstance(a, RemoveFile) and a.data_change for a in actions):
                if self.skip_change_commits:
                    continue
                raise InvalidTableError(
                    f"{self.table_uri}: version {v} deletes or updates rows; a stream of this table reads the rows "
                    f"commits add, and cannot take back rows it already passed on. Set the option "
                    f"skipChangeCommits=true to skip such commits.")
            out += [[a.path, dict(a.partition_values or {}), a.deletion_vector] for a in actions
                    if isinstance(a, AddFile) and a.data_change]
        return out

    def read(self, partition: _BatchFiles) -> Iterator[Any]:
        from ..scan import read_data_file
        from ..stores import log_store_for

        store, layout = log_store_for(self.table_uri), partition.layout
        for log_path, values, dv in partition.files:
            table = read_data_file(store, layout["schema"], layout["configuration"], layout["partition_columns"],
                                   log_path, values, dv, skip_deleted=True, row_index=False)
            yield from table.to_batches()

    def commit(self, end: dict[str, int]) -> None:
        pass


def stream_table(spark: Any, table_uri: str, **options: Any) -> Any:
    """The table as a streaming DataFrame (options: startingVersion, skipChangeCommits)."""
    spark.dataSource.register(DeltaTableStreamSource)
    return spark.readStream.format(SOURCE_NAME).options(**{k: json.dumps(v) if not isinstance(v, str) else v
                                                            for k, v in options.items()}).load(table_uri)
