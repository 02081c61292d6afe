"""Helpers for engine tests: write Delta logs by hand (commit files from `actions.commit_to_bytes`)
and small real Parquet data files, so that replay cases are exact and delta-rs can read the result."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # run from anywhere without installing the package
    sys.path.insert(0, str(REPO_ROOT))

from deltalog.actions import (AddFile, CommitInfo, Metadata, Protocol, RemoveFile, commit_to_bytes,
                              now_ms)

from tests.support.shared_data import GOLDEN  # noqa: E402,F401  (engine tests import it from here)

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "part", "type": "string", "nullable": True, "metadata": {}},
]}


class LogWriter:
    """Writes a table's commits exactly as given, plus data files that really exist."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.log = self.path / "_delta_log"
        self.log.mkdir(parents=True, exist_ok=True)

    def commit(self, version: int, actions, mtime_ms: int | None = None,
               operation: str = "WRITE") -> Path:
        if not any(isinstance(a, CommitInfo) for a in actions):
            actions = [CommitInfo(timestamp=mtime_ms or now_ms(), operation=operation,
                                  read_version=version - 1 if version else None), *actions]
        f = self.log / ("%020d.json" % version)
        f.write_bytes(commit_to_bytes(actions))
        if mtime_ms is not None:
            os.utime(f, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        return f

    def create(self, partition_columns=(), configuration=None, mtime_ms=None,
               protocol: Protocol | None = None) -> Metadata:
        md = Metadata(schema_string=json.dumps(SCHEMA), partition_columns=list(partition_columns),
                      configuration=dict(configuration or {}))
        self.commit(0, [protocol or Protocol(1, 2), md], mtime_ms=mtime_ms, operation="CREATE TABLE")
        return md

    def data_file(self, rel_path: str, ids: list[int], part: str | None = None) -> AddFile:
        """Write a real Parquet file (column `id`; `part` lives in the path) and return its add."""
        full = self.path / rel_path
        full.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), full)
        stats = json.dumps({"numRecords": len(ids), "minValues": {"id": min(ids)},
                            "maxValues": {"id": max(ids)}, "nullCount": {"id": 0}})
        from urllib.parse import quote
        return AddFile(quote(rel_path), {"part": part} if part is not None else {},
                       full.stat().st_size, now_ms(), True, stats)


def add(path: str, size: int = 100, **kw) -> AddFile:
    return AddFile(path, kw.pop("partition_values", {}), size, kw.pop("modification_time", 1), **kw)


def remove(path: str, deletion_timestamp: int | None = None, **kw) -> RemoveFile:
    return RemoveFile(path, deletion_timestamp if deletion_timestamp is not None else now_ms(), **kw)


@pytest.fixture
def log_writer(tmp_path) -> LogWriter:
    return LogWriter(tmp_path / "table")
