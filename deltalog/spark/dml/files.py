"""File tables (rows of `snapshot.files`) as the actions and counts a commit of an operation needs, and the
commit of an operation that changed no row but records what it consumed."""
from __future__ import annotations

import json
from urllib.parse import unquote, urlparse
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame

from ...actions import AddFile, RemoveFile, SetTransaction, now_ms



def sum_records(adds: Sequence[AddFile]) -> int:
    return sum(a.num_records or 0 for a in adds)


def record_count(files: pa.Table) -> int | None:
    """Total live rows of some of the snapshot's files: numRecords less what their deletion vectors
    delete (None when a file lacks stats)."""
    total = 0
    for s, dv in zip(files.column("stats").to_pylist(), files.column("deletion_vector").to_pylist()):
        if not s:
            return None
        n = json.loads(s).get("numRecords")
        if n is None:
            return None
        total += int(n) - int((dv or {}).get("cardinality") or 0)
    return total


def add_files_of(files: pa.Table) -> list[AddFile]:
    out = []
    for row in files.to_pylist():
        out.append(AddFile(path=row["path"], partition_values=dict(row["partition_values"] or []),
                           size=row["size"], modification_time=row["modification_time"],
                           data_change=row["data_change"], stats=row["stats"],
                           tags=dict(row["tags"]) if row.get("tags") is not None else None,
                           deletion_vector=row.get("deletion_vector")))
    return out


def removes_of(files: pa.Table, timestamp: int | None = None) -> list[RemoveFile]:
    ts = timestamp or now_ms()
    return [a.remove(deletion_timestamp=ts) for a in add_files_of(files)]


def byte_count(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


def take_rows(files: pa.Table, rows: Sequence[int]) -> pa.Table:
    return files.take(pa.array(sorted(rows), pa.int64())) if rows else files.slice(0, 0)


def target_files_read(df: DataFrame, snapshot: Any) -> pa.Table | None:
    """The target's live files that `df` scans (all files of each scanned relation, before pruning), or
    None when it reads none of them."""
    try:
        scanned = {unquote(urlparse(u).path) if u.startswith("file:") else u for u in df.inputFiles()}
    except Exception:  # a plan Spark cannot list files for: treat it as not reading the target
        return None
    if not scanned:
        return None
    mask = pa.array([u in scanned for u in snapshot.file_uris()], pa.bool_())
    read = snapshot.files.filter(mask)
    return read if read.num_rows else None


def set_transactions(app_transactions: dict[str, int] | None) -> list[SetTransaction]:
    return [SetTransaction(app, int(v), now_ms()) for app, v in (app_transactions or {}).items()]


def record_only(txn: Any, app_transactions: dict[str, int] | None, operation: str,
                 extra_commit_info: dict[str, Any] | None) -> int | None:
    """A write that changed no rows still records what it consumed, when asked to: the next run must
    not read it again. Otherwise nothing is committed (None)."""
    if not app_transactions:
        return None
    txn.add_actions(set_transactions(app_transactions))
    return txn.commit(operation=operation, extra_commit_info=extra_commit_info)
