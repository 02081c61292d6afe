"""Transaction: version 0, commitInfo, protocol, metadata/protocol/app-id/domain conflicts, bounds,
append-only tables, unsupported features, and the post-commit work that must never fail a commit."""
from __future__ import annotations

import json
import logging
import os
import uuid

import pyarrow as pa
import pytest

import deltalog
from deltalog import DeltaTable, Snapshot, write_deltalake
from deltalog.actions import (AddFile, DomainMetadata, Metadata, Protocol, SetTransaction, commit_to_bytes,
                              CommitInfo, parse_commit)
from deltalog.errors import (
    CommitFailedError, ConcurrentAppendException, ConcurrentTransactionException, DeltaError,
    InvalidTableError, MetadataChangedException, ProtocolChangedException, SchemaMismatchError,
    UnsupportedFeatureError,
)
from deltalog.transaction import ENGINE_INFO, Transaction

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])


def commit_lines(table_uri: str, version: int) -> list[dict]:
    with open(os.path.join(table_uri, "_delta_log", "%020d.json" % version)) as f:
        return [json.loads(line) for line in f if line.strip()]


def small(ids, part="a"):
    return pa.table({"id": pa.array(ids, pa.int64()), "part": [part] * len(ids)})


def test_create_writes_protocol_metadata_and_commit_info_first(tmp_path):
    t = DeltaTable(str(tmp_path / "t"))
    assert not t.exists()
    assert t.create(SCHEMA, partition_columns=["part"], configuration={"delta.appendOnly": "false"},
                    name="orders", description="test") == 0
    assert t.exists()
    lines = commit_lines(t.uri, 0)
    assert list(lines[0]) == ["commitInfo"]
    assert [list(x)[0] for x in lines[1:]] == ["protocol", "metaData"]
    assert lines[1]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    md = lines[2]["metaData"]
    assert md["partitionColumns"] == ["part"] and md["name"] == "orders"
    info = lines[0]["commitInfo"]
    assert info["operation"] == "CREATE TABLE" and "readVersion" not in info
    assert info["operationParameters"]["partitionBy"] == '["part"]'
    with pytest.raises(InvalidTableError, match="already exists"):
        t.create(SCHEMA)
    assert t.create(SCHEMA, exist_ok=True) == 0


def test_commit_info_fields(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]), partition_by=["part"])
    txn = DeltaTable(uri).transaction()
    txn.read_whole_table()
    txn.add_actions([txn.snapshot.add_files()[0].remove()])
    v = txn.commit(operation="DELETE", parameters={"predicate": ["id = 1"], "mode": "Overwrite", "n": 3},
                   metrics={"numRemovedFiles": 1, "numDeletedRows": 2}, user_metadata="why",
                   extra_commit_info={"dbt": {"model": "model.x.orders", "invocation_id": "abc"}})
    info = commit_lines(uri, v)[0]["commitInfo"]
    assert info["operationParameters"] == {"predicate": '["id = 1"]', "mode": "Overwrite", "n": "3"}
    assert info["operationMetrics"] == {"numRemovedFiles": "1", "numDeletedRows": "2"}
    assert info["readVersion"] == 0 and info["isolationLevel"] == "WriteSerializable"
    assert info["isBlindAppend"] is False
    assert info["engineInfo"] == ENGINE_INFO and ENGINE_INFO.startswith("dbt-deltalog/")
    uuid.UUID(info["txnId"])
    assert info["userMetadata"] == "why"
    assert info["dbt"] == {"model": "model.x.orders", "invocation_id": "abc"}
    assert isinstance(info["timestamp"], int)
    crc = json.loads(open(os.path.join(uri, "_delta_log", "%020d.crc" % v)).read())
    assert crc["txnId"] == info["txnId"] and crc["numFiles"] == 0


def test_blind_append_flag(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    write_deltalake(uri, small([2]), mode="append")
    assert commit_lines(uri, 1)[0]["commitInfo"]["isBlindAppend"] is True
    write_deltalake(uri, small([3]), mode="overwrite")
    assert commit_lines(uri, 2)[0]["commitInfo"]["isBlindAppend"] is False


def test_two_writers_creating_version_zero(tmp_path):
    uri = str(tmp_path / "t")
    t1, t2 = DeltaTable(uri).transaction(), DeltaTable(uri).transaction()
    assert t1.read_version == t2.read_version == -1
    from deltalog.table import new_metadata
    t1.update_metadata(new_metadata(SCHEMA))
    t2.update_metadata(new_metadata(SCHEMA))
    assert t1.commit(operation="CREATE TABLE") == 0
    with pytest.raises(ProtocolChangedException) as err:
        t2.commit(operation="CREATE TABLE")
    assert err.value.winning_version == 0 and err.value.winning_operation == "CREATE TABLE"
    assert "created concurrently" in str(err.value)
    assert not os.path.exists(os.path.join(uri, "_delta_log", "%020d.json" % 1))


def test_new_table_needs_metadata(tmp_path):
    txn = DeltaTable(str(tmp_path / "t")).transaction()
    with pytest.raises(InvalidTableError, match="needs its metadata"):
        txn.commit()
    assert not os.path.exists(tmp_path / "t" / "_delta_log" / ("%020d.json" % 0))


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
def test_metadata_change_conflicts(tmp_path, level):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]), configuration={"delta.isolationLevel": level})
    t1, t2 = DeltaTable(uri).transaction(), DeltaTable(uri).transaction()
    md = Metadata.from_dict(t2.snapshot.metadata.to_dict())
    md.configuration = {**md.configuration, "delta.checkpointInterval": "5"}
    t2.update_metadata(md)
    t2.commit(operation="SET TBLPROPERTIES")
    t1.read_whole_table()
    with pytest.raises(MetadataChangedException) as err:
        t1.commit()
    assert err.value.winning_operation == "SET TBLPROPERTIES"


def test_blind_append_survives_metadata_change_only_if_winner_has_none(tmp_path):
    """A blind append still conflicts with a winning metadata change (conservative rule 2)."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    t1, t2 = DeltaTable(uri).transaction(), DeltaTable(uri).transaction()
    md = Metadata.from_dict(t2.snapshot.metadata.to_dict())
    md.description = "changed"
    t2.update_metadata(md)
    t2.commit(operation="CHANGE COLUMN")
    t1.add_actions([])
    with pytest.raises(MetadataChangedException):
        t1.commit()


def test_protocol_change_conflicts(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    t1, t2 = DeltaTable(uri).transaction(), DeltaTable(uri).transaction()
    t2.update_protocol(Protocol(1, 7, None, ["appendOnly", "invariants"]))
    t2.commit(operation="UPGRADE PROTOCOL")
    with pytest.raises(ProtocolChangedException) as err:
        t1.commit()
    assert err.value.winning_version == 1


def test_app_transaction_conflict_and_idempotence(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    t1 = DeltaTable(uri).transaction(app_id="job-1")
    t2 = DeltaTable(uri).transaction(app_id="job-1")
    assert t1.app_version is None
    t2.set_app_transaction(7)
    t2.commit()
    t1.set_app_transaction(7)
    with pytest.raises(ConcurrentTransactionException, match="job-1"):
        t1.commit()
    t3 = DeltaTable(uri).transaction(app_id="job-1")
    assert t3.app_version == 7
    # Another app id does not conflict.
    t4, t5 = DeltaTable(uri).transaction(app_id="job-2"), DeltaTable(uri).transaction(app_id="job-3")
    t4.set_app_transaction(1)
    t5.set_app_transaction(1)
    t4.commit()
    assert t5.commit() == 3
    assert DeltaTable(uri).snapshot().app_transactions == {"job-1": 7, "job-2": 1, "job-3": 1}


def test_domain_metadata_conflict(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    # domain metadata needs the domainMetadata writer feature: the first commit of one upgrades the table
    first = DeltaTable(uri).transaction()
    first.add_actions([DomainMetadata("dbt.other", "{}")])
    first.commit()
    assert DeltaTable(uri).snapshot().protocol.has_writer_feature("domainMetadata")
    t1, t2 = DeltaTable(uri).transaction(), DeltaTable(uri).transaction()
    t1.add_actions([DomainMetadata("dbt.model", '{"a":1}')])
    t2.add_actions([DomainMetadata("dbt.model", '{"a":2}')])
    t2.commit()
    with pytest.raises(ConcurrentTransactionException, match="dbt.model"):
        t1.commit()


def test_commit_attempts_are_bounded(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    loser = Transaction(uri, DeltaTable(uri).snapshot(), max_attempts=2)
    loser.add_actions([])
    for i in range(3):
        write_deltalake(uri, small([10 + i]), mode="append")
    # The first attempt loses to the three winners; the second lands at version 4.
    assert loser.commit() == 4
    loser2 = Transaction(uri, DeltaTable(uri).snapshot(), max_attempts=1)

    real = loser2.store

    class AlwaysTaken:  # a store on which every version is already taken by a harmless winner
        table_uri = loser2.store.table_uri

        def list_from(self, version=0):
            return real.list_from(version)

        def write_if_absent(self, name, data):
            raise FileExistsError(name)

        def read(self, name):
            raise FileNotFoundError(name)

    loser2.store = AlwaysTaken()
    with pytest.raises(CommitFailedError, match="lost the race"):
        loser2.commit()


def test_commit_twice_is_refused(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    txn = DeltaTable(uri).transaction()
    txn.commit()
    with pytest.raises(DeltaError, match="already committed"):
        txn.commit()


def test_unknown_isolation_level(tmp_path):
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidTableError) as err:
        write_deltalake(uri, small([1]), configuration={"delta.isolationLevel": "Snapshot"})
    assert "'Snapshot'" in str(err.value) and "Serializable, WriteSerializable" in str(err.value)
    assert uri in str(err.value)
    assert not DeltaTable(uri).exists()
    assert not os.path.exists(uri) or not any(f.endswith(".parquet") for f in os.listdir(uri))
    write_deltalake(uri, small([1]))
    with pytest.raises(InvalidTableError, match="Allowed values"):
        DeltaTable(uri).transaction(isolation_level="serializable")
    # A table whose property was set to garbage by another tool: writers refuse, naming it.
    log = os.path.join(uri, "_delta_log")
    md = Metadata.from_dict(json.loads(open(os.path.join(log, "%020d.json" % 0)).read().splitlines()[2])["metaData"])
    md.configuration["delta.isolationLevel"] = "Chaos"
    with open(os.path.join(log, "%020d.json" % 1), "wb") as f:
        f.write(commit_to_bytes([CommitInfo(operation="SET TBLPROPERTIES"), md]))
    with pytest.raises(InvalidTableError, match="'Chaos'"):
        write_deltalake(uri, small([2]), mode="append")
    assert DeltaTable(uri).version() == 1


def test_append_only_table_refuses_deletes(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]), configuration={"delta.appendOnly": "true"})
    write_deltalake(uri, small([3]), mode="append")
    with pytest.raises(InvalidTableError, match="append-only"):
        write_deltalake(uri, small([4]), mode="overwrite")
    assert DeltaTable(uri).version() == 1
    # dataChange=false rewrites (OPTIMIZE) are allowed.
    txn = DeltaTable(uri).transaction()
    files = txn.snapshot.add_files()
    txn.read_files(files)
    txn.add_actions([files[0].remove(data_change=False),
                     AddFile(files[0].path.replace(".c000", ".c001"), {}, 1, 1, False)])
    assert txn.commit(operation="OPTIMIZE") == 2


def test_unsupported_writer_feature_refused(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    log = os.path.join(uri, "_delta_log")
    with open(os.path.join(log, "%020d.json" % 1), "wb") as f:
        f.write(commit_to_bytes([CommitInfo(operation="UPGRADE"),
                                 Protocol(1, 7, None, ["appendOnly", "invariants", "icebergCompatV1"])]))
    data_files = sorted(os.listdir(uri))
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        write_deltalake(uri, small([2]), mode="append")
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        DeltaTable(uri).transaction()
    assert DeltaTable(uri).version() == 1
    assert sorted(os.listdir(uri)) == data_files


def test_unsupported_table_property_refused(tmp_path):
    uri = str(tmp_path / "t")
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        write_deltalake(uri, small([1]), configuration={"delta.enableIcebergCompatV1": "true"})
    assert not DeltaTable(uri).exists()
    # IcebergCompatV2 is written, with column mapping only (the Arrow writer writes none: refused, nothing made)
    with pytest.raises(InvalidTableError, match="needs column mapping"):
        write_deltalake(uri, small([1]), configuration={"delta.enableIcebergCompatV2": "true"})
    assert not DeltaTable(uri).exists()


def test_timestamp_ntz_upgrades_protocol(tmp_path):
    import datetime as dt
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"ts": pa.array([dt.datetime(2024, 1, 1, 12)], pa.timestamp("us"))}))
    p = DeltaTable(uri).snapshot().protocol
    assert (p.min_reader_version, p.min_writer_version) == (3, 7)
    assert p.reader_features == ["timestampNtz"]
    assert set(p.writer_features) == {"timestampNtz", "appendOnly", "invariants"}
    import deltalake
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 1
    # Adding a timestamp_ntz column to a (1, 2) table upgrades it in the same commit.
    uri2 = str(tmp_path / "t2")
    write_deltalake(uri2, pa.table({"id": pa.array([1], pa.int64())}))
    write_deltalake(uri2, pa.table({"id": pa.array([2], pa.int64()),
                                    "ts": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us"))}),
                    mode="append", schema_mode="merge")
    lines = commit_lines(uri2, 1)
    assert [list(x)[0] for x in lines[:3]] == ["commitInfo", "protocol", "metaData"]
    assert lines[1]["protocol"]["minWriterVersion"] == 7
    assert deltalake.DeltaTable(uri2).to_pyarrow_table().num_rows == 2


def test_duplicate_paths_in_one_commit(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]))
    txn = DeltaTable(uri).transaction()
    f = txn.snapshot.add_files()[0]
    txn.add_actions([f.remove(), f.remove()])
    with pytest.raises(InvalidTableError, match="two actions"):
        txn.commit()
    assert DeltaTable(uri).version() == 0


def test_post_commit_failures_are_logged_not_raised(tmp_path, monkeypatch, caplog):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]), configuration={"delta.checkpointInterval": "2"})
    import deltalog.checkpoint_write as checkpoint_write
    import deltalog.checksum as checksum

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(checkpoint_write, "write_checkpoint", boom)
    monkeypatch.setattr(checksum, "write_checksum", boom)
    write_deltalake(uri, small([2]), mode="append")
    with caplog.at_level(logging.WARNING, logger="deltalog.post_commit"):
        assert write_deltalake(uri, small([3]), mode="append") == 2
    assert "checkpoint of version 2 failed" in caplog.text and "checksum" in caplog.text
    log = os.listdir(os.path.join(uri, "_delta_log"))
    assert "%020d.checkpoint.parquet" % 2 not in log and "%020d.crc" % 2 not in log
    assert Snapshot.load(uri).version == 2 and Snapshot.load(uri).num_files == 3


def test_checkpoint_and_crc_after_commits(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([0]), configuration={"delta.checkpointInterval": "3"})
    for i in range(1, 7):
        write_deltalake(uri, small([i]), mode="append")
    log = set(os.listdir(os.path.join(uri, "_delta_log")))
    assert {"%020d.checkpoint.parquet" % v for v in (3, 6)} <= log
    assert "%020d.checkpoint.parquet" % 4 not in log
    assert {"%020d.crc" % v for v in range(7)} <= log
    assert json.loads(open(os.path.join(uri, "_delta_log", "_last_checkpoint")).read())["version"] == 6
    import deltalake
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == list(range(7))


def test_post_commit_snapshot_matches_reload(tmp_path):
    """The snapshot derived in memory after a retried commit equals a fresh load."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1]), partition_by=["part"])
    loser = DeltaTable(uri).transaction()
    loser.read_predicate(lambda pv: pv.get("part") == "a")
    loser.read_files(loser.snapshot.add_files())
    loser.add_actions([loser.snapshot.add_files()[0].remove()])
    write_deltalake(uri, small([2], part="b"), mode="append")
    assert loser.commit(operation="DELETE") == 2
    derived, loaded = loser.post_commit_snapshot, Snapshot.load(uri)
    assert derived.version == loaded.version == 2
    assert sorted(derived.files.column("path").to_pylist()) == sorted(loaded.files.column("path").to_pylist())


def test_public_exports():
    for name in ("DeltaTable", "Snapshot", "write_deltalake", "ConcurrentAppendException",
                 "SchemaMismatchError", "ProtocolChangedException", "CommitFailedError"):
        assert hasattr(deltalog, name), name


def test_table_facade(tmp_path):
    uri = str(tmp_path / "t")
    t = DeltaTable(uri)
    assert not t.exists() and t.transaction().read_version == -1
    write_deltalake(uri, small([1]))
    write_deltalake(uri, small([2]), mode="append")
    assert t.version() == 1 and t.snapshot(version=0).num_files == 1
    h = t.history()
    assert [r["version"] for r in h] == [1, 0] and len(t.history(limit=1)) == 1
    ts = h[0]["timestamp"]
    assert t.snapshot(timestamp=ts).version == 1


def test_writer_only_feature_gives_writer_version_7(tmp_path):
    """A writer feature requested by property: protocol (1, 7) listing it plus the legacy (1, 2)
    features; materializePartitionColumns keeps partition columns in the data files too."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]), partition_by=["part"],
                    configuration={"delta.feature.materializePartitionColumns": "supported"})
    snap = DeltaTable(uri).snapshot()
    p = snap.protocol
    assert (p.min_reader_version, p.min_writer_version) == (1, 7) and p.reader_features is None
    assert sorted(p.writer_features) == ["appendOnly", "invariants", "materializePartitionColumns"]
    assert "delta.feature.materializePartitionColumns" not in snap.configuration
    import pyarrow.parquet as pq
    assert "part" in pq.read_table(snap.file_uris()[0]).column_names
    import deltalake
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == [1, 2]
    with pytest.raises(UnsupportedFeatureError, match="icebergCompatV1"):
        write_deltalake(str(tmp_path / "t2"), small([1]), configuration={"delta.feature.icebergCompatV1": "supported"})


def test_not_null_and_invariants(tmp_path):
    uri = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("part", pa.string())])
    write_deltalake(uri, pa.table({"id": [1], "part": ["a"]}, schema=schema))
    with pytest.raises(InvalidTableError, match="NOT NULL") as err:
        write_deltalake(uri, pa.table({"id": pa.array([2, None], pa.int64()), "part": ["a", "b"]}), mode="append")
    assert "'id'" in str(err.value) and uri in str(err.value)
    assert DeltaTable(uri).version() == 0
    # A column invariant (writer version 2) cannot be checked here: adding rows is refused.
    from deltalog.table import new_metadata
    uri2 = str(tmp_path / "t2")
    t = DeltaTable(uri2)
    t.create({"type": "struct", "fields": [
        {"name": "x", "type": "long", "nullable": True,
         "metadata": {"delta.invariants": '{"expression":{"expression":"x > 0"}}'}}]})
    with pytest.raises(UnsupportedFeatureError, match="invariants"):
        write_deltalake(uri2, pa.table({"x": pa.array([1], pa.int64())}), mode="append")
    assert t.version() == 0 and [f for f in os.listdir(uri2) if f != "_delta_log"] == []


def test_created_empty_table_read_by_delta_rs(tmp_path):
    import deltalake
    uri = str(tmp_path / "t")
    DeltaTable(uri).create({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "d", "type": "date", "nullable": True, "metadata": {}}]}, partition_columns=["d"],
        configuration={"delta.isolationLevel": "Serializable"}, name="events")
    theirs = deltalake.DeltaTable(uri)
    assert theirs.version() == 0 and theirs.to_pyarrow_table().num_rows == 0
    assert pa.schema(theirs.schema().to_arrow()).names == ["id", "d"]
    assert theirs.metadata().partition_columns == ["d"] and theirs.metadata().name == "events"
    assert theirs.metadata().configuration == {"delta.isolationLevel": "Serializable"}


def test_refused_commits_land_nothing_and_leave_no_files(tmp_path):
    """A cancelled run refuses the commits still to come: nothing lands, their data files go."""
    from deltalog.errors import CommitsRefusedError
    from deltalog.transaction import accept_commits, refuse_commits

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1]}))
    before = sorted(os.listdir(uri))
    refuse_commits("the run was cancelled")
    try:
        with pytest.raises(CommitsRefusedError, match="nothing was committed: the run was cancelled"):
            write_deltalake(uri, pa.table({"id": [2]}), mode="append")
    finally:
        accept_commits()
    assert Snapshot.load(uri).version == 0
    assert sorted(os.listdir(uri)) == before  # the refused write's data file is gone
    assert write_deltalake(uri, pa.table({"id": [3]}), mode="append") == 1


class _UnansweredStore(deltalog.storage.log_store.LocalLogStore):
    """Commits as asked, but the first `lose` creates of a commit file end without an answer: `landed`
    says whether the create happened before the answer was lost; `unreadable` makes reads fail too."""

    def __init__(self, uri, lose=1, landed=True, unreadable=False):
        super().__init__(uri)
        self.lose, self.landed, self.unreadable = lose, landed, unreadable

    def write_if_absent(self, name, data):
        if name.endswith(".json") and self.lose > 0:
            self.lose -= 1
            if self.landed:
                super().write_if_absent(name, data)
            raise deltalog.storage.log_store.WriteOutcomeUnknown(f"{name}: connection reset")
        return super().write_if_absent(name, data)

    def read(self, name):
        if self.unreadable and name.endswith(".json"):
            raise OSError("connection refused")
        return super().read(name)


@pytest.mark.parametrize("landed", [True, False])
def test_a_commit_whose_answer_is_lost_lands_once(tmp_path, landed):
    """The store created the version (or not) and never said so: the version read back tells. Landed:
    success at that version, once; not landed: the same commit is sent again at the same version."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]))
    store = _UnansweredStore(uri, lose=1, landed=landed)
    txn = Transaction(uri, Snapshot.load(uri), store=store)
    txn.add_actions([SetTransaction("app", 7, None)])
    assert txn.commit(operation="WRITE") == 1
    assert Snapshot.load(uri).version == 1
    assert not os.path.exists(os.path.join(uri, "_delta_log", "%020d.json" % 2))
    assert [a["txn"]["version"] for a in commit_lines(uri, 1) if "txn" in a] == [7]


def test_a_commit_never_answered_and_never_readable_says_the_outcome_is_unknown(tmp_path):
    from deltalog.errors import CommitOutcomeUnknownError

    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]))
    store = _UnansweredStore(uri, lose=1, landed=True, unreadable=True)
    txn = Transaction(uri, Snapshot.load(uri), store=store)
    txn.add_actions([SetTransaction("app", 7, None)])
    with pytest.raises(CommitOutcomeUnknownError, match=r"00000000000000000001\.json.*txnId"):
        txn.commit()
    # it did land: the table says so, and nothing is doubled
    assert Snapshot.load(uri).version == 1


def test_a_commit_the_store_keeps_not_answering_is_reported_unknown(tmp_path):
    from deltalog.errors import CommitOutcomeUnknownError

    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]))
    store = _UnansweredStore(uri, lose=99, landed=False)
    txn = Transaction(uri, Snapshot.load(uri), store=store)
    txn.add_actions([SetTransaction("app", 7, None)])
    with pytest.raises(CommitOutcomeUnknownError, match="did not answer"):
        txn.commit()
    assert Snapshot.load(uri).version == 0


def test_an_already_exists_answer_for_its_own_commit_is_success_not_a_conflict(tmp_path):
    """A client that retried its create hears "already exists" for its own object: an overwrite (not a
    blind append) once raised ConcurrentAppendException against itself and said nothing was committed."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, small([1, 2]))

    class RetriedStore(deltalog.storage.log_store.LocalLogStore):
        def write_if_absent(self, name, data):
            super().write_if_absent(name, data)
            if name.endswith(".json"):
                super().write_if_absent(name, data)  # the retry: FileExistsError

    txn = Transaction(uri, Snapshot.load(uri), store=RetriedStore(uri))
    txn.read_whole_table()
    txn.add_actions([f.remove() for f in Snapshot.load(uri).add_files()])
    assert txn.commit(operation="DELETE") == 1
    assert Snapshot.load(uri).num_files == 0
