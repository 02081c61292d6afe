"""Version checksums (.crc) and commit history."""
import json

import deltalake
import pyarrow as pa
import pytest

from tests.engine.conftest import add, remove
from deltalog.actions import CommitInfo, DomainMetadata, SetTransaction
from deltalog.checksum import verify_checksum, write_checksum
from deltalog.errors import ChecksumMismatchError
from deltalog.history import history
from deltalog.snapshot import Snapshot


def _table(log_writer):
    log_writer.create()
    log_writer.commit(1, [add("a", 10), add("b", 20), SetTransaction("app", 4, 44),
                          DomainMetadata("dom", "{}")])
    return str(log_writer.path)


def test_write_checksum_content(log_writer):
    uri = _table(log_writer)
    snap = Snapshot.load(uri)
    assert write_checksum(snap.store, snap, txn_id="t-1") is True
    crc = json.loads((log_writer.log / "00000000000000000001.crc").read_text())
    assert crc["tableSizeBytes"] == 30 and crc["numFiles"] == 2
    assert crc["numMetadata"] == 1 and crc["numProtocol"] == 1
    assert crc["metadata"]["id"] == snap.metadata.id
    assert crc["metadata"]["schemaString"] == snap.metadata.schema_string
    assert crc["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert crc["setTransactions"] == [{"appId": "app", "version": 4, "lastUpdated": 44}]
    assert crc["domainMetadata"] == [{"domain": "dom", "configuration": "{}", "removed": False}]
    assert crc["txnId"] == "t-1"
    assert verify_checksum(snap.store, snap) is True
    assert Snapshot.load(uri).num_files == 2  # load verifies it


def test_checksum_never_overwritten(log_writer):
    uri = _table(log_writer)
    snap = Snapshot.load(uri)
    crc = log_writer.log / "00000000000000000001.crc"
    crc.write_text('{"numFiles": 2, "tableSizeBytes": 30, "marker": true}')
    assert write_checksum(snap.store, snap) is False
    assert json.loads(crc.read_text())["marker"] is True


def test_missing_checksum_is_fine(log_writer):
    uri = _table(log_writer)
    snap = Snapshot.load(uri)
    assert verify_checksum(snap.store, snap) is False


@pytest.mark.parametrize("field, value, words", [
    ("numFiles", 3, "numFiles is 3 but the log replays to 2 files"),
    ("tableSizeBytes", 31, "tableSizeBytes is 31 but the live files total 30 bytes"),
])
def test_checksum_mismatch_names_file(log_writer, field, value, words):
    uri = _table(log_writer)
    snap = Snapshot.load(uri)
    write_checksum(snap.store, snap)
    crc = log_writer.log / "00000000000000000001.crc"
    content = json.loads(crc.read_text())
    content[field] = value
    crc.write_text(json.dumps(content))
    with pytest.raises(ChecksumMismatchError) as e:
        Snapshot.load(uri)
    assert str(crc) in str(e.value) and words in str(e.value)
    assert Snapshot.load(uri, version=0).version == 0  # other versions still load


def test_checksum_of_delta_rs_table(tmp_path):
    # delta-rs writes no .crc; ours must match the state delta-rs reads
    uri = str(tmp_path / "rs")
    deltalake.write_deltalake(uri, pa.table({"x": [1, 2, 3]}))
    snap = Snapshot.load(uri)
    write_checksum(snap.store, snap)
    dt = deltalake.DeltaTable(uri)
    crc = json.loads((tmp_path / "rs" / "_delta_log" / "00000000000000000000.crc").read_text())
    assert crc["numFiles"] == len(dt.file_uris())
    assert crc["tableSizeBytes"] == sum(pa.table(dt.get_add_actions(flatten=True)).column("size_bytes").to_pylist())


# ------------------------------------------------------------------------------------- history

def test_history_newest_first(log_writer):
    log_writer.create()
    log_writer.commit(1, [CommitInfo(timestamp=111, operation="WRITE", operation_parameters={"mode": "Append"},
                                     read_version=0, isolation_level="WriteSerializable", is_blind_append=True,
                                     operation_metrics={"numFiles": "1"}, engine_info="deltalog/0.1",
                                     user_metadata="hello"), add("a")])
    log_writer.commit(2, [CommitInfo(timestamp=222, operation="DELETE"), remove("a")])
    rows = history(str(log_writer.path))
    assert [r["version"] for r in rows] == [2, 1, 0]
    assert rows[1] == {"version": 1, "timestamp": 111, "operation": "WRITE",
                       "operationParameters": {"mode": "Append"}, "readVersion": 0,
                       "isolationLevel": "WriteSerializable", "isBlindAppend": True,
                       "operationMetrics": {"numFiles": "1"}, "userMetadata": "hello",
                       "engineInfo": "deltalog/0.1"}
    assert rows[0]["operation"] == "DELETE" and rows[0]["timestamp"] == 222
    assert [r["version"] for r in history(str(log_writer.path), limit=2)] == [2, 1]


def test_history_after_log_cleanup(log_writer):
    from deltalog.checkpoint_write import write_checkpoint
    log_writer.create()
    for v in range(1, 4):
        log_writer.commit(v, [add(f"f{v}")])
    snap = Snapshot.load(str(log_writer.path))
    write_checkpoint(snap.store, snap)
    for v in range(2):
        (log_writer.log / ("%020d.json" % v)).unlink()
    assert [r["version"] for r in history(str(log_writer.path))] == [3, 2]


def test_history_matches_delta_rs(tmp_path):
    uri = str(tmp_path / "rs")
    deltalake.write_deltalake(uri, pa.table({"x": [1, 2, 3]}))
    deltalake.write_deltalake(uri, pa.table({"x": [4]}), mode="append")
    deltalake.DeltaTable(uri).delete("x = 2")
    ours = history(uri)
    theirs = deltalake.DeltaTable(uri).history()
    assert [r["version"] for r in ours] == [r["version"] for r in theirs] == [2, 1, 0]
    for a, b in zip(ours, theirs):
        assert a["operation"] == b["operation"]
        assert a["timestamp"] == b["timestamp"]
        assert a["operationParameters"] == b.get("operationParameters")
