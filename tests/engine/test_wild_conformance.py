"""Reader conformance against tables other engines wrote (`../shared/conformance/wild`: Databricks,
delta-rs, delta-kernel-rs, duckdb, dask, the Delta acceptance tables). Each table either reads as
delta-rs reads it (version, live files, rows) or is refused with the reason listed below. Where delta-rs
itself cannot read a table we can (listed with its reason), the state from the checkpoints is checked
against our replay of the JSON commits alone, and the rows are read."""
from __future__ import annotations

import os

import deltalake
import pytest

from deltalog.errors import DeltaError
from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from tests.engine.test_conformance import (delta_rs_rows, has_checkpoint_and_all_commits,
                                          same_state_as_commit_replay)
from tests.support.shared_data import WILD, require


def _cases() -> list[str]:
    if not WILD.is_dir():
        return ["<conformance data missing>"]
    found = []
    for dirpath, dirnames, _ in os.walk(WILD):
        if "_delta_log" in dirnames:
            found.append(os.path.relpath(dirpath, WILD))
            dirnames[:] = []
    return sorted(found)


CASES = _cases()

# Refused, with words the error must contain: features not implemented yet, and broken logs.
REFUSED = {
    "deltars/simple_table_features": "minReaderVersion=5",
    "deltars/spark-shredded-variant-preview-delta": "variantShredding-preview",  # delta-rs refuses it too
    "kernel/table-with-geo": "geospatial",
    "kernel_uc/catalog_managed_0": "catalogManaged",
    "deltars_err/table_c": "missing version 12",
    "deltars_err/table_d": "catalogOwned",
    "deltars_err/table_e": "catalogOwned",
    "deltars_err/table_f": "catalogOwned",
    "deltars_err/table_h": "catalogOwned",
    "deltars_err/table_i": "catalogOwned",
    "kernel/crc-full": "disagrees with the table state",  # its .crc counts 10 files, its log adds none
    "kernel/crc-malformed": "holds no commit",
}

# delta-rs 1.6.6 cannot read these at all: their rows are checked against the raw Parquet values,
# widened to the table's types
DELTA_RS_CANNOT = {"kernel/type-widening": "TypeWideningPreview"}
# A test fixture whose checkpoint holds another table id and protocol than its commits
CHECKPOINT_OF_ANOTHER_TABLE = {"kernel/parquet_row_group_skipping"}
# delta-rs loads the log but cannot give the rows: negative decimal partition values (a delta-rs bug)
DELTA_RS_NO_ROWS = {"kernel/basic-decimal-table": "not a valid decimal128"}
# delta-rs gives wrong rows: INT96 timestamps past 2262 read as nanoseconds wrap (9999-12-31 becomes
# 1816-03-29); the protocol's timestamps are microseconds. Compared with the values Spark wrote instead.
DELTA_RS_WRAPS_INT96 = {"deltars/table_with_edge_timestamps": {
    1: ("9999-12-31 00:00:00+00:00", "2022-01-01 00:00:00+00:00"),
    2: ("9999-12-30 00:00:00+00:00", "2022-02-01 00:00:00+00:00")}}


def _canonical(table) -> list[str]:
    table = table.select(sorted(table.column_names))
    return sorted(map(repr, table.to_pylist()))


def test_wild_folder_present_and_lists_cover_it():
    require(WILD)
    assert len(CASES) > 100, CASES
    unknown = (set(REFUSED) | set(DELTA_RS_CANNOT) | set(DELTA_RS_NO_ROWS) | set(DELTA_RS_WRAPS_INT96) | CHECKPOINT_OF_ANOTHER_TABLE) - set(CASES)
    assert not unknown, f"lists name tables that do not exist: {unknown}"


@pytest.mark.parametrize("case", CASES)
def test_wild_table(case, tmp_path):
    path = str(require(WILD / case))
    if case in REFUSED:
        with pytest.raises(DeltaError, match=REFUSED[case]):
            read_table(Snapshot.load(path))
        return
    snap = Snapshot.load(path)
    if has_checkpoint_and_all_commits(path) and case not in CHECKPOINT_OF_ANOTHER_TABLE:
        same_state_as_commit_replay(path, tmp_path)  # the checkpoints agree with the commits
    if case in DELTA_RS_CANNOT:
        with pytest.raises(Exception, match=DELTA_RS_CANNOT[case]):
            delta_rs_rows(deltalake.DeltaTable(path))  # once delta-rs reads it, compare with it instead
        _rows_are_the_widened_parquet_values(snap)
        return
    dt = deltalake.DeltaTable(path)
    assert snap.version == dt.version()
    assert sorted(snap.file_uris()) == sorted(u.removeprefix("file://") for u in dt.file_uris())
    if case in DELTA_RS_NO_ROWS:
        with pytest.raises(Exception, match=DELTA_RS_NO_ROWS[case]):
            delta_rs_rows(dt)
        assert read_table(snap).num_rows == sum(f.get("numRecords", 0) for f in _stats(snap))
        return
    if case in DELTA_RS_WRAPS_INT96:
        # delta-rs: its Arrow read refuses the table, its DataFusion scan wraps the values
        with pytest.raises(Exception, match="would lose data"):
            dt.to_pyarrow_table()
        wrapped = deltalake.QueryBuilder().register("t", dt).execute("select BIG_DATE from t").read_all()
        assert min(str(v) for v in wrapped.column(0).to_pylist()).startswith("1816-03-2")
        assert edge_timestamps(read_table(snap)) == DELTA_RS_WRAPS_INT96[case]
        return
    if not all(os.path.exists(p) for p in snap.file_uris()):
        return  # a log-only fixture: the data files were never part of it
    theirs = delta_rs_rows(dt)
    ours = read_table(snap)
    assert ours.num_rows == theirs.num_rows
    if theirs.num_rows <= 20_000:
        assert _canonical(ours.select(theirs.column_names).cast(theirs.schema)) == _canonical(theirs)


def edge_timestamps(table) -> dict:
    """deltars/table_with_edge_timestamps as {SOME_VALUE: (BIG_DATE, NORMAL_DATE)} strings."""
    return {row["SOME_VALUE"]: (str(row["BIG_DATE"]), str(row["NORMAL_DATE"])) for row in table.to_pylist()}


def _stats(snap) -> list[dict]:
    import json

    out = []
    for text, dv in zip(snap.files.column("stats").to_pylist(), snap.files.column("deletion_vector").to_pylist()):
        stats = json.loads(text) if text else {}
        stats["numRecords"] = stats.get("numRecords", 0) - ((dv or {}).get("cardinality") or 0)
        out.append(stats)
    return out


def _rows_are_the_widened_parquet_values(snap) -> None:
    import pyarrow.parquet as pq

    from deltalog.scan import read_file

    assert snap.num_files
    for i, path in enumerate(snap.file_uris()):
        ours = read_file(snap, i)
        assert ours.schema.types == snap.arrow_schema.types
        raw = pq.read_table(path)
        for name in raw.column_names:
            assert ours.column(name).to_pylist() == raw.column(name).cast(ours.schema.field(name).type).to_pylist()


def _dat_cases() -> list[tuple[str, str]]:
    root = WILD / "dat002"
    if not root.is_dir():
        return [("<conformance data missing>", "")]
    return [(t, v) for t in sorted(os.listdir(root)) if (root / t / "expected").is_dir()
            for v in sorted(os.listdir(root / t / "expected"))]


@pytest.mark.parametrize("table, version", _dat_cases())
def test_dat_tables_read_their_expected_rows(table, version):
    """The Delta Acceptance Tests (wild/dat002): each version's rows, protocol and properties are
    the ones its `expected/` folder holds."""
    import json

    import pyarrow.parquet as pq

    expected_dir = require(WILD / "dat002") / table / "expected" / version
    info = json.loads((expected_dir / "table_version_metadata.json").read_text())
    # "latest" names its version too (in basic_append one below the log's last: read that one)
    snap = Snapshot.load(str(WILD / "dat002" / table / "delta"), version=int(info["version"]))
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == \
        (info["min_reader_version"], info["min_writer_version"])
    assert snap.configuration == info["properties"]
    want = pq.read_table(expected_dir / "table_content.parquet")
    got = read_table(snap).select(want.column_names)

    def rows(t):
        return sorted((tuple(r.items()) for r in t.cast(want.schema, safe=False).to_pylist()), key=repr)
    assert rows(got) == rows(want)
