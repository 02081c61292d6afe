"""Checkpoints: written with the protocol's schema, read back here and by delta-rs, and every broken
variant (corrupt `_last_checkpoint`, corrupt or incomplete checkpoint) falls back correctly."""
import json

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.engine.conftest import add, remove
from deltalog.actions import DomainMetadata, Metadata, SetTransaction
from deltalog.checkpoint_read import read_last_checkpoint
from deltalog.checkpoint_write import checkpoint_table, should_checkpoint, write_checkpoint
from deltalog.errors import CorruptLogError
from deltalog.snapshot import Snapshot
from deltalog.table_configuration import TableConfiguration


def _state(snap):
    return (snap.version, snap.protocol, snap.metadata,
            sorted(map(str, snap.files.to_pylist())), sorted(map(str, snap.tombstones.to_pylist())),
            snap.app_transactions, {k: v.to_dict() for k, v in snap.domain_metadata.items()})


def _drop_commits(log_writer, upto):
    for v in range(upto + 1):
        (log_writer.log / ("%020d.json" % v)).unlink()


def _table_with_history(log_writer, n=10):
    log_writer.create(partition_columns=["part"], configuration={"delta.checkpointInterval": "5"})
    for v in range(1, n + 1):
        actions = [add(f"part=p{v % 3}/f{v}.parquet", v, partition_values={"part": f"p{v % 3}"},
                       stats=json.dumps({"numRecords": v}), tags={"t": str(v)})]
        if v % 4 == 0:
            actions.append(remove(f"part=p{(v - 1) % 3}/f{v - 1}.parquet", size=v - 1,
                                  partition_values={"part": f"p{(v - 1) % 3}"}))
        if v == 3:
            actions += [SetTransaction("app", 3, 33), DomainMetadata("dom", '{"x":1}')]
        log_writer.commit(v, actions)
    return str(log_writer.path)


@pytest.mark.parametrize("version, interval, due", [
    (10, None, True), (20, None, True), (9, None, False), (0, None, False),
    (3, "3", True), (4, "3", False), (1, "1", True),
])
def test_should_checkpoint(version, interval, due):
    config = {} if interval is None else {"delta.checkpointInterval": interval}
    assert should_checkpoint(version, TableConfiguration(Metadata(configuration=config)).checkpoint_interval) is due


def test_checkpoint_round_trip(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    last = write_checkpoint(snap.store, snap)
    assert last == {"version": 10, "size": 2 + 1 + 1 + snap.num_files + snap.tombstones.num_rows,
                    "sizeInBytes": (log_writer.log / "00000000000000000010.checkpoint.parquet").stat().st_size,
                    "numOfAddFiles": snap.num_files}
    assert read_last_checkpoint(snap.store) == last
    table = pq.read_table(log_writer.log / "00000000000000000010.checkpoint.parquet")
    assert table.schema.names == ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]
    assert table.schema.field("add").type.field("partitionValues").type == pa.map_(pa.string(), pa.string())
    assert "stats" not in [f.name for f in table.schema.field("remove").type]
    assert table.num_rows == last["size"]
    # Every row holds exactly one action.
    non_null = [sum(v is not None for v in row.values()) for row in table.to_pylist()]
    assert set(non_null) == {1}

    _drop_commits(log_writer, 10)  # only the checkpoint can now give the state
    assert _state(Snapshot.load(uri)) == _state(snap)


def test_commits_after_checkpoint_are_replayed(log_writer):
    uri = _table_with_history(log_writer)
    write_checkpoint(Snapshot.load(uri).store, Snapshot.load(uri, version=5))
    _drop_commits(log_writer, 5)
    snap = Snapshot.load(uri)
    assert snap.version == 10
    # f7 was removed at version 8 (after the checkpoint), f3 at 4 (before): neither is live
    live = sorted(snap.files.column("path").to_pylist())
    assert "part=p1/f7.parquet" not in live and "part=p0/f3.parquet" not in live
    assert len(live) == 10 - 2
    assert snap.app_transactions == {"app": 3}


def test_corrupt_last_checkpoint_is_ignored(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    write_checkpoint(snap.store, snap)
    for garbage in (b"", b'{"version": 1', b"not json", b'{"size": 3}'):
        (log_writer.log / "_last_checkpoint").write_bytes(garbage)
        assert _state(Snapshot.load(uri)) == _state(snap)


def test_last_checkpoint_pointing_at_missing_checkpoint(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    (log_writer.log / "_last_checkpoint").write_text('{"version": 10, "size": 5}')
    assert _state(Snapshot.load(uri)) == _state(snap)


def test_corrupt_checkpoint_falls_back_to_earlier_checkpoint(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    write_checkpoint(snap.store, Snapshot.load(uri, version=5))
    write_checkpoint(snap.store, snap)
    (log_writer.log / "00000000000000000010.checkpoint.parquet").chmod(0o644)
    (log_writer.log / "00000000000000000010.checkpoint.parquet").write_bytes(b"PAR1 truncated")
    _drop_commits(log_writer, 5)  # commits 0..5 are gone: only the checkpoint at 5 can help
    assert _state(Snapshot.load(uri)) == _state(snap)


def test_corrupt_checkpoint_falls_back_to_commits(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    write_checkpoint(snap.store, snap)
    (log_writer.log / "00000000000000000010.checkpoint.parquet").write_bytes(b"garbage")
    assert _state(Snapshot.load(uri)) == _state(snap)
    _drop_commits(log_writer, 0)
    with pytest.raises(CorruptLogError, match="00000000000000000010.checkpoint.parquet"):
        Snapshot.load(uri)


def _write_parts(log_writer, snap, n_parts, keep=None):
    table = checkpoint_table(snap)
    step = -(-table.num_rows // n_parts)
    for i in range(n_parts):
        if keep is not None and i + 1 not in keep:
            continue
        name = "%020d.checkpoint.%010d.%010d.parquet" % (snap.version, i + 1, n_parts)
        pq.write_table(table.slice(i * step, step), log_writer.log / name)


def test_multi_part_checkpoint(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    _write_parts(log_writer, snap, 3)
    _drop_commits(log_writer, 10)
    assert _state(Snapshot.load(uri)) == _state(snap)


def test_incomplete_multi_part_checkpoint_is_ignored(log_writer):
    uri = _table_with_history(log_writer)
    snap = Snapshot.load(uri)
    _write_parts(log_writer, snap, 3, keep={1, 3})
    assert _state(Snapshot.load(uri)) == _state(snap)  # replayed from the commits instead


def test_delta_rs_reads_our_checkpoint(log_writer):
    log_writer.create(partition_columns=["part"])
    files = [log_writer.data_file(f"part={p}/{i}.parquet", [i, i + 100], p)
             for i, p in enumerate(["a", "b b", "c%d", "a"])]
    log_writer.commit(1, files[:2])
    log_writer.commit(2, [files[2], files[0].remove()])
    log_writer.commit(3, [files[3], SetTransaction("app", 9)])
    uri = str(log_writer.path)
    snap = Snapshot.load(uri)
    write_checkpoint(snap.store, snap)
    _drop_commits(log_writer, 3)
    extra = log_writer.data_file("part=z/9.parquet", [9], "z")
    log_writer.commit(4, [extra])

    dt = deltalake.DeltaTable(uri)
    ours = Snapshot.load(uri)
    assert dt.version() == ours.version == 4
    assert sorted(u.removeprefix("file://") for u in dt.file_uris()) == sorted(ours.file_uris())
    rows = dt.to_pyarrow_table()
    assert sorted(zip(rows.column("id").to_pylist(), rows.column("part").to_pylist())) == [
        (1, "b b"), (2, "c%d"), (3, "a"), (9, "z"), (101, "b b"), (102, "c%d"), (103, "a")]
    assert dt.metadata().id == snap.metadata.id


def test_read_delta_rs_checkpoint(tmp_path):
    uri = str(tmp_path / "rs")
    for i in range(3):
        deltalake.write_deltalake(uri, pa.table({"id": [i], "p": [f"v{i % 2}"]}), mode="append",
                                  partition_by=["p"])
    dt = deltalake.DeltaTable(uri)
    dt.delete("id = 1")
    dt = deltalake.DeltaTable(uri)
    dt.create_checkpoint()
    for f in (tmp_path / "rs" / "_delta_log").glob("*.json"):
        f.unlink()  # only delta-rs's checkpoint remains
    snap = Snapshot.load(uri)
    assert snap.version == dt.version() == 3
    assert sorted(snap.file_uris()) == sorted(u.removeprefix("file://") for u in dt.file_uris())
    assert snap.num_files == 2


@pytest.mark.parametrize("named", [99, 2])
def test_a_last_checkpoint_naming_no_checkpoint_is_removed_by_the_next_commit(tmp_path, named):
    """`_last_checkpoint` naming a version past the log (99) or one without a checkpoint (2): delta-rs
    fails to load the table until the next commit removes it."""
    from deltalog import write_deltalake

    uri = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(uri, pa.table({"x": [i]}), mode="append")
    pointer = tmp_path / "t" / "_delta_log" / "_last_checkpoint"
    pointer.write_text(json.dumps({"version": named, "size": 3}))
    write_deltalake(uri, pa.table({"x": [4]}), mode="append")
    assert not pointer.exists()
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("x").to_pylist()) == [0, 1, 2, 3, 4]


def _delta_rs_stats(uri):
    actions = pa.table(deltalake.DeltaTable(str(uri)).get_add_actions(flatten=True))
    cols = ["path", "num_records", "min.integer", "max.integer", "max.timestamp"]
    return {r["path"]: r for r in actions.select(cols).to_pylist()}


@pytest.mark.parametrize("name", ["delta-1.2.1-only-struct-stats", "delta-checkpoint-stats-optional"])
def test_struct_only_stats_are_read_and_survive_our_checkpoint(tmp_path, name):
    """Checkpoints that keep stats only as `stats_parsed` structs (delta.checkpoint.writeStatsAsJson=false):
    the stats are read, used for skipping, and our next checkpoint keeps them for every reader."""
    import shutil

    from deltalog.expressions import files_matching
    from deltalog.storage import log_store_for
    from tests.support.shared_data import WILD, require

    uri = tmp_path / "t"
    shutil.copytree(require(WILD / "deltars" / name), uri)
    before = _delta_rs_stats(uri)
    snap = Snapshot.load(str(uri))
    ours = {p: json.loads(s) if s else None
            for p, s in zip(snap.files.column("path").to_pylist(), snap.files.column("stats").to_pylist())}
    for path, theirs in before.items():
        if theirs["num_records"] is not None:  # where delta-rs has stats, ours are the same numbers
            assert ours[path]["numRecords"] == theirs["num_records"]
            assert ours[path]["minValues"]["integer"] == theirs["min.integer"]
            assert ours[path]["maxValues"]["integer"] == theirs["max.integer"]
    with_stats = [p for p, s in ours.items() if s]
    assert len(with_stats) >= sum(1 for r in before.values() if r["num_records"] is not None) >= 1
    # skipping uses them: one file holds integer = <its min>
    one = with_stats[0]
    value = ours[one]["minValues"]["integer"]
    matching = files_matching(snap, f"integer = {value}").column("path").to_pylist()
    assert set(matching) == {p for p, st in ours.items()
                             if not st or st["minValues"]["integer"] <= value <= st["maxValues"]["integer"]}
    if name == "delta-1.2.1-only-struct-stats":
        assert len(matching) == 1  # every other file skipped on struct-only stats

    write_checkpoint(log_store_for(str(uri)), snap)  # our checkpoint replaces theirs as the latest
    after = _delta_rs_stats(uri)
    assert deltalake.DeltaTable(str(uri)).version() == snap.version
    for path in with_stats:
        assert after[path]["num_records"] == ours[path]["numRecords"]
        assert after[path]["min.integer"] == ours[path]["minValues"]["integer"]
    for path, theirs in before.items():
        if theirs["max.timestamp"] is not None:
            assert after[path]["max.timestamp"] >= theirs["max.timestamp"]


@pytest.mark.parametrize("as_json", ["true", "false"])
def test_struct_stats_are_written_when_the_table_asks(tmp_path, as_json):
    """`delta.checkpoint.writeStatsAsStruct=true`: our checkpoint carries `stats_parsed` (each bound in its
    column's type) and `partitionValues_parsed`; with `writeStatsAsJson=false` only those. delta-rs and
    we read the same stats back from it."""
    import datetime as dt
    from decimal import Decimal

    from deltalog import write_deltalake
    from deltalog.storage import log_store_for

    uri = str(tmp_path / "t")
    conf = {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": as_json,
            "delta.checkpointInterval": "100"}
    for i in range(3):
        write_deltalake(uri, pa.table({
            "integer": pa.array([i, i + 10], pa.int32()),
            "amount": pa.array([Decimal("1.50") * i, Decimal("-2.25")], pa.decimal128(9, 2)),
            "day": [dt.date(2024, 1, 1 + i), dt.date(2023, 5, 5)],
            "at": pa.array([dt.datetime(2024, 1, 1, 12, i, 0, 123456), None], pa.timestamp("us", tz="UTC")),
            "name": [f"n{i}", "zz"],
            "nested": [{"x": float(i), "y": "a"}, {"x": -1.0, "y": None}],
            "p": [f"v{i}", f"v{i}"],
            "q": pa.array([i, i], pa.int64()),
        }), mode="append", partition_by=["p", "q"], configuration=conf if i == 0 else None)
    def delta_rs_adds():
        actions = pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=True))
        return sorted(actions.drop_columns(["modification_time"]).to_pylist(), key=lambda r: r["path"])

    before = delta_rs_adds()
    assert before[0]["min.at"] is not None and before[0]["null_count.nested.y"] == 1
    snap = Snapshot.load(uri)
    json_stats = dict(zip(snap.files.column("path").to_pylist(), snap.files.column("stats").to_pylist()))
    write_checkpoint(log_store_for(uri), snap)

    adds = pq.read_table(tmp_path / "t" / "_delta_log" / ("%020d.checkpoint.parquet" % snap.version),
                         columns=["add"]).column("add").combine_chunks()
    adds = adds.filter(adds.is_valid()).to_pylist()
    assert len(adds) == 3
    for a in adds:
        parsed = a["stats_parsed"]
        i = int(a["partitionValues_parsed"]["q"])
        assert a["partitionValues_parsed"] == {"p": f"v{i}", "q": i}
        assert parsed["numRecords"] == 2
        assert parsed["minValues"]["integer"] == i and parsed["maxValues"]["integer"] == i + 10
        assert parsed["minValues"]["amount"] == Decimal("-2.25")
        assert parsed["maxValues"]["amount"] == max(Decimal("1.50") * i, Decimal("-2.25"))
        assert parsed["minValues"]["day"] == dt.date(2023, 5, 5)
        assert parsed["maxValues"]["nested"] == {"x": float(i), "y": "a"}
        assert parsed["nullCount"]["at"] == 1 and parsed["nullCount"]["nested"] == {"x": 0, "y": 1}
        # stats keep milliseconds: the min rounds down, the max up
        assert parsed["minValues"]["at"] == dt.datetime(2024, 1, 1, 12, i, 0, 123000, tzinfo=dt.timezone.utc)
        assert parsed["maxValues"]["at"] == dt.datetime(2024, 1, 1, 12, i, 0, 124000, tzinfo=dt.timezone.utc)
        assert (a["stats"] is None) == (as_json == "false")
        if a["stats"] is not None:
            assert a["stats"] == json_stats[a["path"]]

    for f in (tmp_path / "t" / "_delta_log").glob("*.json"):
        f.unlink()  # only the checkpoint remains
    assert delta_rs_adds() == before
    again = Snapshot.load(uri)
    for path, text in zip(again.files.column("path").to_pylist(), again.files.column("stats").to_pylist()):
        assert json.loads(text) == json.loads(json_stats[path])
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("integer").to_pylist()) == [0, 1, 2, 10, 11, 12]
