"""Reader conformance against the tables Delta Lake itself wrote (`../shared/conformance/delta-golden`).

Every folder there is a case: a table (sometimes nested, e.g. `hive/<table>` or
`data-reader-date-types-America/Los_Angeles`) or not a table at all. Each either reads exactly as
delta-rs reads it (version, live files at every version, rows, history) or is refused with the error
listed in EXPECTED_ERRORS — tables that are broken on purpose or need a feature we do not support.
"""
from __future__ import annotations

import os

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.shared_data import GOLDEN, require
from deltalog.errors import (CorruptLogError, DeltaError, NotATableError, UnsupportedFeatureError)
from deltalog.history import history
from deltalog.scan import read_file
from deltalog.snapshot import Snapshot


def delta_rs_rows(dt: deltalake.DeltaTable) -> pa.Table:
    """The table's rows as delta-rs reads them: its DataFusion scan, which applies deletion vectors and
    column mapping and reads v2 checkpoints (`to_pyarrow_table` refuses the first and the last, and
    reads NULLs for every mapped column)."""
    protocol = dt.protocol()
    features = set(protocol.reader_features or [])
    if protocol.min_reader_version != 2 and not features & {"deletionVectors", "columnMapping", "v2Checkpoint",
                                                             "typeWidening", "typeWidening-preview"}:
        return dt.to_pyarrow_table()
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())

_NO_SCHEMA = (CorruptLogError, "has no schemaString")  # test fixtures whose metaData lacks a schema
EXPECTED_ERRORS: dict[str, tuple[type[DeltaError], str]] = {
    # Broken on purpose.
    "versions-not-contiguous": (CorruptLogError, "missing version 1"),
    "deltalog-state-reconstruction-without-metadata": (CorruptLogError, "no metaData"),
    "deltalog-state-reconstruction-without-protocol": (CorruptLogError, "no protocol"),
    "deltalog-state-reconstruction-from-checkpoint-missing-metadata": (CorruptLogError, "no metaData"),
    "deltalog-state-reconstruction-from-checkpoint-missing-protocol": (CorruptLogError, "no protocol"),
    "data-reader-absolute-paths-escaped-chars": (CorruptLogError, "no metaData"),
    "deltalog-invalid-protocol-version": (UnsupportedFeatureError, "minReaderVersion=99"),
    "canonicalized-paths-normal-a": _NO_SCHEMA,
    "canonicalized-paths-normal-b": _NO_SCHEMA,
    "canonicalized-paths-special-a": _NO_SCHEMA,
    "canonicalized-paths-special-b": _NO_SCHEMA,
    "corrupted-last-checkpoint": _NO_SCHEMA,
    "deltalog-commit-info": _NO_SCHEMA,
    "update-deleted-directory": _NO_SCHEMA,
    # Not tables.
    "no-delta-log-folder": (NotATableError, "no _delta_log"),
    "log-store-listFrom": (NotATableError, "no _delta_log"),
    "log-store-read": (NotATableError, "no _delta_log"),
}


def replay_of_commits(path: str, tmp_path, version: int | None = None) -> Snapshot:
    """The table's snapshot rebuilt from its JSON commits alone: a copy of the log without checkpoints,
    `_last_checkpoint` or `.crc` files, under `tmp_path` (data file paths stay relative)."""
    import shutil

    copy = tmp_path / "commits-only"
    log = copy / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(os.path.join(path, "_delta_log")):
        if name.endswith(".json") and ".checkpoint." not in name:
            shutil.copy(os.path.join(path, "_delta_log", name), log / name)
    return Snapshot.load(str(copy), version=version)


def same_state_as_commit_replay(path: str, tmp_path) -> Snapshot:
    """Load the table (through its checkpoints) and check it against `replay_of_commits`: the same
    version, protocol, metadata and live files. Returns the snapshot."""
    snap = Snapshot.load(path)
    replay = replay_of_commits(path, tmp_path)
    assert snap.version == replay.version
    assert snap.protocol == replay.protocol
    assert (snap.metadata.id, snap.schema_json, snap.partition_columns, snap.configuration) == (
        replay.metadata.id, replay.schema_json, replay.partition_columns, replay.configuration)
    key = lambda t: sorted(zip(t.column("path").to_pylist(), map(repr, t.column("deletion_vector").to_pylist())))
    assert key(snap.files) == key(replay.files)
    return snap


def has_checkpoint_and_all_commits(path: str) -> bool:
    """Whether the log has a checkpoint and every commit from 0 to its latest."""
    names = os.listdir(os.path.join(path, "_delta_log"))
    versions = {int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit() and len(n) == 25}
    return any(".checkpoint." in n for n in names) and bool(versions) and versions == set(range(max(versions) + 1))


def _cases() -> list[str]:
    if not GOLDEN.is_dir():
        return []
    cases = []
    for entry in sorted(os.listdir(GOLDEN)):
        top = GOLDEN / entry
        if not top.is_dir():
            continue
        nested = sorted(os.path.relpath(dp, GOLDEN) for dp, dn, _ in os.walk(top) if "_delta_log" in dn)
        cases.extend(nested or [entry])
    return cases


CASES = _cases()


def test_golden_folder_present_and_outcomes_cover_it():
    require(GOLDEN)
    assert len(CASES) > 100, f"conformance tables not found under {GOLDEN}"
    unknown = set(EXPECTED_ERRORS) - set(CASES)
    assert not unknown, f"EXPECTED_ERRORS names tables that do not exist: {unknown}"


def _uris(dt: deltalake.DeltaTable) -> list[str]:
    return sorted(u.removeprefix("file://") for u in dt.file_uris())


def _canonical_rows(table: pa.Table) -> list[str]:
    table = table.select(sorted(table.column_names))
    return sorted(map(repr, table.to_pylist()))


@pytest.mark.parametrize("case", CASES)
def test_golden_table(case, tmp_path):
    path = str(GOLDEN / case)
    if case in EXPECTED_ERRORS:
        error, words = EXPECTED_ERRORS[case]
        with pytest.raises(error) as e:
            Snapshot.load(path)
        assert words in str(e.value) and path in str(e.value)
        return
    if has_checkpoint_and_all_commits(path):
        same_state_as_commit_replay(path, tmp_path)  # checkpoints agree with the commits they sum up

    snap = Snapshot.load(path)
    dt = deltalake.DeltaTable(path)
    assert snap.version == dt.version()
    assert sorted(snap.file_uris()) == _uris(dt)
    assert snap.metadata.id == dt.metadata().id
    assert snap.partition_columns == list(dt.metadata().partition_columns)

    # Every earlier version that delta-rs can load, we load identically; where it cannot, we refuse.
    for v in range(snap.version):
        try:
            expected = _uris(deltalake.DeltaTable(path, version=v))
        except Exception:  # noqa: BLE001 - delta-rs refuses: so must we
            with pytest.raises(DeltaError):
                Snapshot.load(path, version=v)
            continue
        assert sorted(Snapshot.load(path, version=v).file_uris()) == expected, f"version {v}"

    # History: same commits and operations as delta-rs sees.
    ours = history(path)
    theirs = dt.history()
    assert [h["version"] for h in ours] == [h["version"] for h in theirs]
    assert [h["operation"] for h in ours] == [h.get("operation") for h in theirs]

    # Rows: our live files, read with pyarrow minus the rows their deletion vectors delete, hold the
    # rows delta-rs returns.
    try:
        expected = delta_rs_rows(dt)
    except Exception:  # noqa: BLE001 - fake data files or a feature delta-rs cannot read
        return
    data_columns = [c for c in expected.column_names if c not in snap.partition_columns]
    parts = []
    for i in range(snap.num_files):
        t = read_file(snap, i)
        parts.append(pa.table({c: t.column(c).cast(expected.schema.field(c).type) if c in t.column_names
                               else pa.nulls(t.num_rows, expected.schema.field(c).type)
                               for c in data_columns}))
    ours_rows = pa.concat_tables(parts) if parts else expected.select(data_columns).slice(0, 0)
    assert ours_rows.num_rows == expected.num_rows
    if expected.num_rows <= 20_000:
        assert _canonical_rows(ours_rows) == _canonical_rows(expected.select(data_columns))
