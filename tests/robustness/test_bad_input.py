"""Bad input at the engine level: each case gets a clear error that names the file or table, says what
was wrong and what is allowed, and leaves the table exactly as it was (same log files, same data files).

Model-level bad input (bad model config, null or duplicate merge keys) is in test_bad_input_dbt.py.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pyarrow as pa
import pytest

from deltalog import (
    CorruptLogError, DeltaTable, InvalidTableError, NotATableError, SchemaMismatchError, Snapshot,
    UnsupportedFeatureError, VersionNotFoundError, write_deltalake,
)
from deltalog.actions import Protocol, commit_to_bytes, CommitInfo, now_ms

from tests.support.table_checks import data_files_on_disk


def table_state(uri: str) -> tuple:
    """Everything a failed operation must not change: log files (name, size, content) and data files."""
    log = os.path.join(uri, "_delta_log")
    entries = []
    if os.path.isdir(log):
        for n in sorted(os.listdir(log)):
            if n.startswith("."):
                continue
            with open(os.path.join(log, n), "rb") as f:
                entries.append((n, f.read()))
    return tuple(entries), frozenset(data_files_on_disk(uri)) if os.path.isdir(uri) else frozenset()


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": pa.array([f"n{i}" for i in range(start, start + n)])})


@pytest.fixture
def table(tmp_path) -> str:
    uri = str(tmp_path / "people")
    write_deltalake(uri, rows(3), configuration={"delta.checkpointInterval": "100"})
    write_deltalake(uri, rows(3, 10), mode="append")
    write_deltalake(uri, rows(3, 20), mode="append")
    return uri


def commit_path(uri: str, v: int) -> str:
    return os.path.join(uri, "_delta_log", "%020d.json" % v)


def attempt_writes(uri: str):
    """Every kind of write a user could try; each must fail and leave the table as it was."""
    yield lambda: write_deltalake(uri, rows(2, 100), mode="append")
    yield lambda: write_deltalake(uri, rows(2, 100), mode="overwrite")
    yield lambda: DeltaTable(uri).transaction()


def assert_refused(uri: str, exc_type, *fragments: str, writes: bool = True):
    before = table_state(uri)
    with pytest.raises(exc_type) as err:
        Snapshot.load(uri)
    for f in fragments:
        assert f in str(err.value), f"{f!r} not in: {err.value}"
    if writes:
        for attempt in attempt_writes(uri):
            with pytest.raises(exc_type):
                attempt()
    assert table_state(uri) == before, "a refused operation changed the table"
    return err.value


# ---- broken logs ---------------------------------------------------------------------------------

def test_corrupt_commit_json(table):
    path = commit_path(table, 2)
    with open(path, "ab") as f:
        f.write(b'{"add": {"path": "x.parquet", "size": \n')
    e = assert_refused(table, CorruptLogError, path, "line")
    assert "corrupt" in str(e).lower() or "truncated" in str(e).lower()


def test_truncated_last_commit(table):
    """The last commit cut in the middle of a line (a store without atomic create): refused, named."""
    path = commit_path(table, 2)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) - 25])
    assert_refused(table, CorruptLogError, path, "truncated")


def test_commit_that_is_not_json_lines(table):
    path = commit_path(table, 1)
    with open(path, "wb") as f:
        f.write(b"\x00\x01garbage that is not JSON\n")
    assert_refused(table, CorruptLogError, path)


def test_gap_in_versions(table):
    write_deltalake(table, rows(1, 30), mode="append")
    os.unlink(commit_path(table, 2))
    e = assert_refused(table, CorruptLogError, "%020d.json" % 2, "contiguous")
    assert table in str(e)
    # No writer fills the gap or writes past it.
    assert not os.path.exists(commit_path(table, 2)) and not os.path.exists(commit_path(table, 4))


def test_corrupt_commit_below_a_checkpoint_only_breaks_time_travel_to_it(tmp_path):
    """Latest reads use the checkpoint and never open the corrupt commit; time travel to it names it."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(1), configuration={"delta.checkpointInterval": "2"})
    for i in range(1, 4):
        write_deltalake(uri, rows(1, i), mode="append")
    with open(commit_path(uri, 1), "wb") as f:
        f.write(b"{not json\n")
    assert Snapshot.load(uri).version == 3
    with pytest.raises(CorruptLogError) as err:
        Snapshot.load(uri, version=1)
    assert commit_path(uri, 1) in str(err.value)
    # Writing still works at the latest version, through the checkpoint.
    assert write_deltalake(uri, rows(1, 9), mode="append") == 4


def test_commit_without_metadata(tmp_path):
    uri = str(tmp_path / "t")
    os.makedirs(os.path.join(uri, "_delta_log"))
    with open(commit_path(uri, 0), "wb") as f:
        f.write(commit_to_bytes([CommitInfo(timestamp=now_ms(), operation="WRITE"), Protocol(1, 2)]))
    assert_refused(uri, CorruptLogError, uri, "metaData")


# ---- not a table ---------------------------------------------------------------------------------

def test_path_that_does_not_exist(tmp_path):
    uri = str(tmp_path / "nothing_here")
    with pytest.raises(NotATableError) as err:
        Snapshot.load(uri)
    assert uri in str(err.value) and "_delta_log" in str(err.value)
    assert not DeltaTable(uri).exists()
    assert not os.path.exists(uri)  # a read never creates anything


def test_folder_of_parquet_files_is_not_a_table(tmp_path):
    import pyarrow.parquet as pq
    uri = str(tmp_path / "plain")
    os.makedirs(uri)
    pq.write_table(rows(2), os.path.join(uri, "part-0.parquet"))
    before = table_state(uri)
    with pytest.raises(NotATableError) as err:
        Snapshot.load(uri)
    assert uri in str(err.value)
    assert table_state(uri) == before


def test_empty_delta_log_is_not_a_table(tmp_path):
    uri = str(tmp_path / "empty")
    os.makedirs(os.path.join(uri, "_delta_log"))
    with pytest.raises(NotATableError) as err:
        Snapshot.load(uri)
    assert uri in str(err.value) and "no commit" in str(err.value)


def test_path_is_a_file(tmp_path):
    uri = str(tmp_path / "file.txt")
    with open(uri, "w") as f:
        f.write("hello")
    with pytest.raises(NotATableError) as err:
        Snapshot.load(uri)
    assert uri in str(err.value)
    with pytest.raises(Exception):
        write_deltalake(uri, rows(1), mode="append")
    assert open(uri).read() == "hello"


def test_time_travel_to_a_version_that_does_not_exist(table):
    with pytest.raises(VersionNotFoundError) as err:
        Snapshot.load(table, version=7)
    assert table in str(err.value) and "latest version is 2" in str(err.value)


# ---- unsupported features ------------------------------------------------------------------------

def _table_with_protocol(tmp_path, protocol: Protocol) -> str:
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(2))
    with open(commit_path(uri, 1), "wb") as f:
        f.write(commit_to_bytes([CommitInfo(timestamp=now_ms(), operation="UPGRADE PROTOCOL"), protocol]))
    return uri


def test_table_needing_an_unsupported_reader_feature(tmp_path):
    uri = _table_with_protocol(tmp_path, Protocol(3, 7, ["geospatial"], ["geospatial"]))
    e = assert_refused(uri, UnsupportedFeatureError, uri, "geospatial")
    assert "Supported reader features" in str(e)


@pytest.mark.parametrize("protocol, feature", [
    (Protocol(1, 7, None, ["appendOnly", "invariants", "icebergCompatV1"]), "icebergCompatV1"),
    (Protocol(1, 7, None, ["appendOnly", "invariants", "collations-preview"]), "collations-preview"),
])
def test_table_needing_an_unsupported_writer_feature_reads_but_refuses_writes(tmp_path, protocol, feature):
    uri = _table_with_protocol(tmp_path, protocol)
    assert sorted(i for i in Snapshot.load(uri).files.column("path").to_pylist()) != []  # readable
    before = table_state(uri)
    for attempt in attempt_writes(uri):
        with pytest.raises(UnsupportedFeatureError) as err:
            attempt()
        assert uri in str(err.value) and feature in str(err.value)
        assert "Supported writer features" in str(err.value)
    assert table_state(uri) == before


def test_legacy_writer_3_table_with_a_check_constraint_is_refused_by_the_arrow_writer(tmp_path):
    """Writer version 3 means CHECK constraints. The pure-Arrow writer cannot evaluate SQL, so it refuses
    a table that declares one (the Spark writer enforces them: tests/spark/test_constraints.py), and
    writes one that declares none."""
    uri = _table_with_protocol(tmp_path, Protocol(1, 3))
    write_deltalake(uri, rows(1, 50), mode="append")
    txn = DeltaTable(uri).transaction()
    md = txn.snapshot.metadata
    txn.update_metadata(replace(md, configuration={"delta.constraints.id_small": "id < 10"}))
    txn.commit(operation="ADD CONSTRAINT")
    before = table_state(uri)
    with pytest.raises(UnsupportedFeatureError) as err:
        write_deltalake(uri, rows(1, 60), mode="append")
    assert "id_small" in str(err.value) and "id < 10" in str(err.value)
    assert table_state(uri) == before


@pytest.mark.parametrize("prop,feature", [("delta.enableIcebergCompatV1", "icebergCompatV1")])
def test_create_asking_for_an_unsupported_feature_creates_nothing(tmp_path, prop, feature):
    uri = str(tmp_path / "t")
    with pytest.raises(UnsupportedFeatureError) as err:
        write_deltalake(uri, rows(2), configuration={prop: "true"})
    assert uri in str(err.value) and feature in str(err.value) and "Remove the property" in str(err.value)
    assert not DeltaTable(uri).exists()
    assert not data_files_on_disk(uri) if os.path.isdir(uri) else True


@pytest.mark.parametrize("configuration,needs", [
    ({"delta.enableIcebergCompatV2": "true"}, "needs column mapping"),
    ({"delta.universalFormat.enabledFormats": "iceberg"}, "needs delta.enableIcebergCompatV2=true"),
])
def test_an_iceberg_table_missing_what_it_needs_creates_nothing(tmp_path, configuration, needs):
    """IcebergCompatV2 without column mapping, or UniForm without IcebergCompatV2: refused by name, before
    anything is written (with deletion vectors: tests/engine/test_table_configuration.py and the dbt test)."""
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidTableError, match=needs) as err:
        write_deltalake(uri, rows(2), configuration=configuration)
    assert uri in str(err.value)
    assert not DeltaTable(uri).exists()
    assert not data_files_on_disk(uri) if os.path.isdir(uri) else True


# ---- schema mismatch -----------------------------------------------------------------------------

def test_append_with_a_column_of_another_type(table):
    before = table_state(table)
    bad = pa.table({"id": pa.array(["x", "y"]), "name": pa.array(["a", "b"])})
    with pytest.raises(SchemaMismatchError) as err:
        write_deltalake(table, bad, mode="append")
    msg = str(err.value)
    assert table in msg and "'id'" in msg and "string" in msg and "long" in msg
    assert "Nothing was written" in msg
    assert table_state(table) == before


def test_append_with_an_extra_column(table):
    before = table_state(table)
    bad = rows(2, 40).append_column("age", pa.array([1, 2], pa.int64()))
    with pytest.raises(SchemaMismatchError) as err:
        write_deltalake(table, bad, mode="append")
    assert "'age'" in str(err.value) and "schema_mode='merge'" in str(err.value)
    assert table_state(table) == before


def test_append_with_another_partitioning(table):
    before = table_state(table)
    with pytest.raises(InvalidTableError) as err:
        write_deltalake(table, rows(2, 40), mode="append", partition_by=["name"])
    assert table in str(err.value) and "partitioned by" in str(err.value)
    assert table_state(table) == before


def test_replace_where_data_outside_the_predicate(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "part": ["a", "b"]})
    write_deltalake(uri, data, partition_by=["part"])
    before = table_state(uri)
    with pytest.raises(InvalidTableError) as err:
        write_deltalake(uri, data, mode="overwrite", predicate="part = 'a'")
    assert "outside" in str(err.value) and "Nothing was written" in str(err.value)
    assert table_state(uri) == before


# ---- unknown config values -----------------------------------------------------------------------

@pytest.mark.parametrize("key,value,allowed", [
    ("delta.isolationLevel", "Snapshot", "Serializable, WriteSerializable"),
    ("delta.isolationLevel", "serializable", "Serializable, WriteSerializable"),
    ("delta.checkpointInterval", "0", "integer >= 1"),
    ("delta.checkpointInterval", "ten", "integer >= 1"),
    ("delta.checkpointInterval", "-3", "integer >= 1"),
    ("delta.appendOnly", "yes", "true, false"),
])
def test_bad_table_property_on_create_and_on_existing_table(tmp_path, key, value, allowed):
    uri = str(tmp_path / "new")
    with pytest.raises(InvalidTableError) as err:
        write_deltalake(uri, rows(2), configuration={key: value})
    msg = str(err.value)
    assert uri in msg and key in msg and value in msg and allowed in msg
    assert not DeltaTable(uri).exists()
    assert not (os.path.isdir(uri) and data_files_on_disk(uri)), "data files left by a refused create"

    existing = str(tmp_path / "existing")
    write_deltalake(existing, rows(2))
    before = table_state(existing)
    with pytest.raises(InvalidTableError) as err:
        write_deltalake(existing, rows(1, 5), mode="append", configuration={key: value})
    assert existing in str(err.value) and allowed in str(err.value)
    assert table_state(existing) == before


def test_bad_isolation_level_passed_to_a_transaction(table):
    before = table_state(table)
    with pytest.raises(InvalidTableError) as err:
        DeltaTable(table).transaction(isolation_level="ReadCommitted")
    assert "ReadCommitted" in str(err.value) and "Serializable, WriteSerializable" in str(err.value)
    assert table_state(table) == before


def test_table_with_a_bad_isolation_level_in_its_log_refuses_writes(tmp_path):
    """A property written by another engine that this one does not know: the write names it."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(2))
    md = Snapshot.load(uri).metadata
    md.configuration = {"delta.isolationLevel": "SnapshotIsolation"}
    with open(commit_path(uri, 1), "wb") as f:
        f.write(commit_to_bytes([CommitInfo(timestamp=now_ms(), operation="SET TBLPROPERTIES"), md]))
    before = table_state(uri)
    with pytest.raises(InvalidTableError) as err:
        txn = DeltaTable(uri).transaction()
        txn.read_whole_table()
        txn.add_actions(Snapshot.load(uri).add_files()[:1][0].remove() for _ in [0])
        txn.commit(operation="DELETE")
    assert "SnapshotIsolation" in str(err.value) and "Serializable, WriteSerializable" in str(err.value)
    assert table_state(uri) == before


def test_bad_write_mode_and_schema_mode(table):
    before = table_state(table)
    with pytest.raises(ValueError) as err:
        write_deltalake(table, rows(1), mode="upsert")
    assert "upsert" in str(err.value) and "append" in str(err.value)
    with pytest.raises(ValueError) as err:
        write_deltalake(table, rows(1), mode="append", schema_mode="replace")
    assert "replace" in str(err.value) and "merge" in str(err.value)
    assert table_state(table) == before
