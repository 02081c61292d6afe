"""What a user checks after a crash or a race, shared by the robustness tests and bench/stress.py.

- the log: versions 0..N contiguous, one commit file each, every txnId once;
- every version loads (its `.crc`, when present and readable, is verified on load);
- the rows read by deltalog (Snapshot.load + the live Parquet files) and by delta-rs are the same;
- which data files on disk no commit references (orphans of dead or losing transactions), and that
  none of them is live in any version.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from deltalog import Snapshot
from deltalog.checksum import checksum_name, verify_checksum
from deltalog.paths import decode_path

LOG_DIR = "_delta_log"


@dataclass
class TableCheck:
    version: int
    commit_infos: list[dict]
    referenced: set[str]            # absolute paths of every data file any commit added
    orphans: set[str]               # data files on disk that no commit references
    ids_deltalog: list[int]
    ids_deltalake: list[int]
    crc_verified: list[int] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)  # `.tmp-*` left in _delta_log by a crash


def commit_names(uri: str) -> list[str]:
    log = os.path.join(uri, LOG_DIR)
    return sorted(n for n in os.listdir(log) if n.endswith(".json") and not n.startswith("."))


def read_commit(uri: str, version: int) -> list[dict]:
    with open(os.path.join(uri, LOG_DIR, "%020d.json" % version), "rb") as f:
        return [json.loads(line) for line in f.read().splitlines() if line.strip()]


def data_files_on_disk(uri: str) -> set[str]:
    out = set()
    for dirpath, dirs, names in os.walk(uri):
        if os.path.basename(dirpath) == LOG_DIR:
            dirs[:] = []
            continue
        for n in names:
            if n.endswith(".parquet") and not n.startswith("."):
                out.add(os.path.join(dirpath, n))
    return out


def live_ids(snapshot: Snapshot, column: str = "id") -> list[int]:
    ids: list[int] = []
    for path in snapshot.file_uris():
        ids.extend(pq.read_table(path, columns=[column]).column(column).to_pylist())
    return sorted(ids)


def deltalake_ids(uri: str, column: str = "id") -> tuple[int, list[int], set[str]]:
    import deltalake
    dt = deltalake.DeltaTable(uri)
    ids = dt.to_pyarrow_table(columns=[column]).column(column).to_pylist()
    files = {p[len("file://"):] if p.startswith("file://") else p for p in dt.file_uris()}
    return dt.version(), sorted(ids), files


def check_table(uri: str, expected_ids: list[int] | None = None, every_version: bool = True,
                compare_deltalake: bool = True, column: str = "id") -> TableCheck:
    """Assert the table is consistent (see the module doc) and return what was found."""
    names = commit_names(uri)
    latest = len(names) - 1
    assert names == ["%020d.json" % v for v in range(latest + 1)], f"{uri}: versions not contiguous: {names}"
    infos, referenced = [], set()
    for v in range(latest + 1):
        actions = read_commit(uri, v)
        infos.append(next((a["commitInfo"] for a in actions if "commitInfo" in a), {}))
        for a in actions:
            if "add" in a:
                referenced.add(os.path.join(uri, decode_path(a["add"]["path"])))
    txn_ids = [i.get("txnId") for i in infos if i.get("txnId")]
    assert len(set(txn_ids)) == len(txn_ids), f"{uri}: a transaction committed twice"

    snap = Snapshot.load(uri)
    assert snap.version == latest, f"{uri}: latest snapshot {snap.version}, log ends at {latest}"
    orphans = data_files_on_disk(uri) - referenced
    crc_verified = []
    for v in (range(latest + 1) if every_version else [latest]):
        s = snap if v == latest else Snapshot.load(uri, version=v)  # load verifies the .crc
        live = set(s.file_uris())
        assert not (live & orphans), f"{uri}: orphan files live at version {v}: {live & orphans}"
        assert all(os.path.exists(p) for p in live), f"{uri}: version {v} names a missing data file"
        if verify_checksum(s.store, s):
            crc_verified.append(v)
    ours = live_ids(snap, column)
    theirs = ours
    if compare_deltalake:
        their_version, theirs, their_files = deltalake_ids(uri, column)
        assert their_version == latest, f"{uri}: delta-rs reads version {their_version}, deltalog {latest}"
        assert ours == theirs, f"{uri}: deltalog and delta-rs read different rows"
        assert not (their_files & orphans), f"{uri}: delta-rs reads orphan files {their_files & orphans}"
        assert their_files == set(snap.file_uris())
    if expected_ids is not None:
        assert ours == sorted(expected_ids), (
            f"{uri}: rows differ from the landed commits: missing {sorted(set(expected_ids) - set(ours))[:10]}, "
            f"unexpected {sorted(set(ours) - set(expected_ids))[:10]}, {len(ours)} vs {len(expected_ids)} rows")
    temps = sorted(n for n in os.listdir(os.path.join(uri, LOG_DIR)) if n.startswith(".tmp-"))
    return TableCheck(latest, infos, referenced, orphans, ours, theirs, crc_verified, temps)


def has_crc(uri: str, version: int) -> bool:
    return os.path.exists(os.path.join(uri, LOG_DIR, checksum_name(version)))
