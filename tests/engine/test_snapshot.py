"""Log replay: reconciliation rules, errors on broken logs, time travel, `Snapshot.apply`."""
from datetime import datetime, timezone

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.engine.conftest import SCHEMA, add, remove
from deltalog.actions import (CommitInfo, DomainMetadata, Metadata, Protocol,
                              SetTransaction, now_ms)
from deltalog.errors import (CorruptLogError, NotATableError, UnsupportedFeatureError,
                             VersionNotFoundError)
from deltalog.snapshot import Snapshot, parse_interval_ms

DAY = 86_400_000


def paths(snap):
    return sorted(snap.files.column("path").to_pylist())


def test_basic_state(log_writer):
    md = log_writer.create(partition_columns=["part"], configuration={"delta.appendOnly": "false"})
    log_writer.commit(1, [add("part=a/f1.parquet", 10, partition_values={"part": "a"}),
                          add("part=b/f2.parquet", 20, partition_values={"part": "b"})])
    snap = Snapshot.load(str(log_writer.path))
    assert snap.version == 1
    assert snap.table_uri == str(log_writer.path)
    assert snap.metadata.id == md.id
    assert snap.schema_json == SCHEMA
    assert snap.partition_columns == ["part"]
    assert snap.configuration == {"delta.appendOnly": "false"}
    assert snap.protocol == Protocol(1, 2)
    assert paths(snap) == ["part=a/f1.parquet", "part=b/f2.parquet"]
    assert snap.num_files == 2 and snap.size_bytes == 30
    assert isinstance(snap.files, pa.Table)
    assert snap.files.schema.names == ["path", "partition_values", "size", "modification_time",
                                       "data_change", "stats", "tags", "deletion_vector", "base_row_id",
                                       "default_row_commit_version"]
    adds = {a.path: a for a in snap.add_files()}
    assert adds["part=a/f1.parquet"].partition_values == {"part": "a"}
    assert snap.arrow_schema.names == ["id", "part"]


def test_last_action_per_path_wins_and_add_revives_tombstone(log_writer):
    log_writer.create()
    log_writer.commit(1, [add("a", 1), add("b", 2), add("c", 3)])
    log_writer.commit(2, [remove("a"), remove("b")])
    log_writer.commit(3, [add("a", 11)])  # re-added after removal
    snap = Snapshot.load(str(log_writer.path))
    assert paths(snap) == ["a", "c"]
    assert {r["path"]: r["size"] for r in snap.files.to_pylist()}["a"] == 11
    assert snap.tombstones.column("path").to_pylist() == ["b"]


def test_paths_compared_uri_decoded(log_writer):
    log_writer.create()
    log_writer.commit(1, [add("x%20y/f%25.parquet"), add("plain")])
    log_writer.commit(2, [remove("x y/f%.parquet")])
    snap = Snapshot.load(str(log_writer.path))
    assert paths(snap) == ["plain"]
    log_writer.commit(3, [add("dir/a%3Ab.parquet")])
    snap = Snapshot.load(str(log_writer.path))
    assert sorted(snap.file_uris()) == [str(log_writer.path / "dir/a:b.parquet"), str(log_writer.path / "plain")]


def test_tombstones_expire_after_retention(log_writer):
    now = now_ms()
    log_writer.create(configuration={"delta.deletedFileRetentionDuration": "interval 2 days"})
    log_writer.commit(1, [add("old"), add("recent")])
    log_writer.commit(2, [remove("old", now - 3 * DAY), remove("recent", now - 1 * DAY)])
    snap = Snapshot.load(str(log_writer.path))
    assert snap.tombstones.column("path").to_pylist() == ["recent"]
    assert snap.num_files == 0


def test_default_tombstone_retention_is_one_week(log_writer):
    now = now_ms()
    log_writer.create()
    log_writer.commit(1, [remove("a", now - 8 * DAY), remove("b", now - 6 * DAY)])
    assert Snapshot.load(str(log_writer.path)).tombstones.column("path").to_pylist() == ["b"]


@pytest.mark.parametrize("text, ms", [
    ("interval 1 weeks", 7 * DAY), ("interval 7 days", 7 * DAY), ("2 days", 2 * DAY),
    ("interval 1 day 12 hours", 36 * 3_600_000), ("INTERVAL 30 SECONDS", 30_000),
])
def test_parse_interval(text, ms):
    assert parse_interval_ms(text) == ms


def test_parse_interval_rejects_garbage():
    with pytest.raises(ValueError, match="fortnights"):
        parse_interval_ms("interval 2 fortnights")


def test_last_protocol_and_metadata_win(log_writer):
    log_writer.create()
    new_md = Metadata(schema_string='{"type":"struct","fields":[]}', configuration={"k": "v"})
    log_writer.commit(1, [new_md, Protocol(1, 7, None, ["appendOnly", "invariants"])])
    snap = Snapshot.load(str(log_writer.path))
    assert snap.metadata.id == new_md.id and snap.configuration == {"k": "v"}
    assert snap.protocol.min_writer_version == 7


def test_app_transactions_and_domain_metadata(log_writer):
    log_writer.create()
    log_writer.commit(1, [SetTransaction("app", 1, 5), SetTransaction("other", 7),
                          DomainMetadata("d1", '{"a":1}'), DomainMetadata("d2", "x")])
    log_writer.commit(2, [SetTransaction("app", 2, 6), DomainMetadata("d2", "x", removed=True)])
    snap = Snapshot.load(str(log_writer.path))
    assert snap.app_transactions == {"app": 2, "other": 7}
    assert list(snap.domain_metadata) == ["d1"]
    assert snap.domain_metadata["d1"].configuration == '{"a":1}'


def test_gap_in_versions_names_missing_version(log_writer):
    log_writer.create()
    log_writer.commit(1, [add("a")])
    log_writer.commit(3, [add("b")])
    with pytest.raises(CorruptLogError, match="missing version 2"):
        Snapshot.load(str(log_writer.path))
    assert Snapshot.load(str(log_writer.path), version=1).num_files == 1


def test_not_a_table(tmp_path):
    with pytest.raises(NotATableError, match=str(tmp_path)):
        Snapshot.load(str(tmp_path))
    (tmp_path / "_delta_log").mkdir()
    with pytest.raises(NotATableError, match="no commit"):
        Snapshot.load(str(tmp_path))


def test_missing_protocol_or_metadata(log_writer):
    log_writer.commit(0, [Metadata(schema_string="{}")])
    with pytest.raises(CorruptLogError, match="no protocol"):
        Snapshot.load(str(log_writer.path))
    (log_writer.log / ("%020d.json" % 0)).unlink()
    log_writer.commit(0, [Protocol(1, 2), add("a")])
    with pytest.raises(CorruptLogError, match="no metaData"):
        Snapshot.load(str(log_writer.path))


def test_truncated_commit_names_file(log_writer):
    log_writer.create()
    (log_writer.log / ("%020d.json" % 1)).write_bytes(b'{"add":{"path":"a","size":1')
    with pytest.raises(CorruptLogError, match="00000000000000000001.json, line 1"):
        Snapshot.load(str(log_writer.path))


def test_pretty_printed_commit_reads_leniently(log_writer):
    """Actions spread over several lines (as some tools write them) read as delta-rs reads them; a
    commit cut short still names its file and the line where the broken action starts."""
    import json

    log_writer.create()
    action = {"add": {"path": "a.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1,
                      "dataChange": True}}
    (log_writer.log / ("%020d.json" % 1)).write_text(json.dumps(action, indent=2) + "\n" +
                                                        json.dumps({"commitInfo": {"operation": "WRITE"}}, indent=2))
    snap = Snapshot.load(str(log_writer.path))
    assert snap.files.column("path").to_pylist() == ["a.parquet"]
    (log_writer.log / ("%020d.json" % 2)).write_text(json.dumps(action, indent=2)[:-20])
    with pytest.raises(CorruptLogError, match="00000000000000000002.json, line 1"):
        Snapshot.load(str(log_writer.path))


@pytest.mark.parametrize("protocol, feature", [
    (Protocol(3, 7, ["geospatial"], ["geospatial"]), "geospatial"),
    (Protocol(3, 7, ["variantShredding-preview", "variantType"], ["variantShredding-preview", "variantType"]),
     "variantShredding-preview"),
    (Protocol(4, 7), "minReaderVersion=4"),
])
def test_unsupported_reader_features_refused(log_writer, protocol, feature):
    log_writer.create(protocol=protocol)
    with pytest.raises(UnsupportedFeatureError, match=feature) as e:
        Snapshot.load(str(log_writer.path))
    assert str(log_writer.path) in str(e.value)


@pytest.mark.parametrize("feature", ["timestampNtz", "deletionVectors", "columnMapping", "v2Checkpoint",
                                     "typeWidening", "variantType", "variantType-preview"])
def test_supported_reader_features_accepted(log_writer, feature):
    log_writer.create(protocol=Protocol(3, 7, [feature], [feature]))
    assert Snapshot.load(str(log_writer.path)).version == 0


def test_reader_version_2_is_column_mapping_and_is_read(log_writer):
    log_writer.create(protocol=Protocol(2, 5))
    assert Snapshot.load(str(log_writer.path)).version == 0


# ---------------------------------------------------------------------------------- time travel

def _three_versions(log_writer):
    base = 1_700_000_000_000
    log_writer.create(mtime_ms=base)
    log_writer.commit(1, [add("a")], mtime_ms=base + 1000)
    log_writer.commit(2, [add("b")], mtime_ms=base + 2000)
    return base


def test_time_travel_by_version(log_writer):
    _three_versions(log_writer)
    uri = str(log_writer.path)
    assert [Snapshot.load(uri, version=v).num_files for v in (0, 1, 2)] == [0, 1, 2]
    for bad in (3, -1):
        with pytest.raises(VersionNotFoundError, match=str(bad)):
            Snapshot.load(uri, version=bad)


def test_time_travel_by_timestamp(log_writer):
    base = _three_versions(log_writer)
    uri = str(log_writer.path)
    assert Snapshot.load(uri, timestamp=base).version == 0
    assert Snapshot.load(uri, timestamp=base + 1500).version == 1
    assert Snapshot.load(uri, timestamp=base + 10_000).version == 2
    dt = datetime.fromtimestamp((base + 1000) / 1000, tz=timezone.utc)
    snap = Snapshot.load(uri, timestamp=dt)
    assert snap.version == 1 and snap.timestamp == base + 1000
    with pytest.raises(VersionNotFoundError, match="before the earliest"):
        Snapshot.load(uri, timestamp=base - 1)


def test_commit_times_made_monotonic(log_writer):
    base = 1_700_000_000_000
    log_writer.create(mtime_ms=base)
    log_writer.commit(1, [add("a")], mtime_ms=base - 5000)  # clock went backwards
    assert Snapshot.load(str(log_writer.path)).timestamp == base + 1
    assert Snapshot.load(str(log_writer.path), timestamp=base).version == 0


def test_in_commit_timestamps(log_writer):
    log_writer.create(configuration={"delta.enableInCommitTimestamps": "true"}, mtime_ms=5_000_000)
    log_writer.commit(1, [CommitInfo(timestamp=1, operation="WRITE", extra={"inCommitTimestamp": 9_000}),
                          add("a")], mtime_ms=6_000_000)
    assert Snapshot.load(str(log_writer.path)).timestamp == 9_000


def test_version_after_cleanup_loads_from_checkpoint(log_writer):
    from deltalog.checkpoint_write import write_checkpoint
    log_writer.create()
    for v in range(1, 5):
        log_writer.commit(v, [add(f"f{v}")])
    uri = str(log_writer.path)
    write_checkpoint(Snapshot.load(uri).store, Snapshot.load(uri, version=3))
    for v in range(0, 3):  # log cleanup removed the early commits
        (log_writer.log / ("%020d.json" % v)).unlink()
    assert Snapshot.load(uri, version=3).num_files == 3
    assert Snapshot.load(uri).num_files == 4
    with pytest.raises(VersionNotFoundError, match="cleaned up"):
        Snapshot.load(uri, version=1)


# ------------------------------------------------------------------------------------- apply

def test_apply_matches_load(log_writer):
    log_writer.create()
    log_writer.commit(1, [add("a"), add("b%20c"), SetTransaction("app", 1)])
    uri = str(log_writer.path)
    s1 = Snapshot.load(uri)
    actions = [remove("b c"), add("d", 7), SetTransaction("app", 2), DomainMetadata("dom", "{}")]
    log_writer.commit(2, actions)
    applied = s1.apply(2, actions, 123)
    loaded = Snapshot.load(uri)
    assert applied.version == loaded.version == 2 and applied.timestamp == 123
    assert paths(applied) == paths(loaded) == ["a", "d"]
    assert applied.tombstones.column("path").to_pylist() == loaded.tombstones.column("path").to_pylist()
    assert applied.app_transactions == loaded.app_transactions == {"app": 2}
    assert list(applied.domain_metadata) == ["dom"]
    assert s1.version == 1 and paths(s1) == ["a", "b%20c"]  # the old snapshot is unchanged
    with pytest.raises(ValueError):
        s1.apply(3, [], 0)


# --------------------------------------------------------------------------- interop with delta-rs

def test_hand_written_log_reads_like_delta_rs(log_writer):
    log_writer.create(partition_columns=["part"])
    f1 = log_writer.data_file("part=a b/1.parquet", [1, 2], "a b")
    f2 = log_writer.data_file("part=%3D/2.parquet", [3], "=")
    f3 = log_writer.data_file("part=a b/3.parquet", [4, 5, 6], "a b")
    log_writer.commit(1, [f1, f2])
    log_writer.commit(2, [f3, f1.remove()])
    uri = str(log_writer.path)
    snap = Snapshot.load(uri)
    dt = deltalake.DeltaTable(uri)
    assert snap.version == dt.version()
    assert sorted(snap.file_uris()) == sorted(u.removeprefix("file://") for u in dt.file_uris())
    ours = sorted(i for f in snap.file_uris() for i in pq.read_table(f).column("id").to_pylist())
    theirs = sorted(dt.to_pyarrow_table().column("id").to_pylist())
    assert ours == theirs == [3, 4, 5, 6]


def test_reads_table_written_by_delta_rs(tmp_path):
    uri = str(tmp_path / "rs")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["x", "y/z", None]})
    deltalake.write_deltalake(uri, data, partition_by=["p"])
    deltalake.write_deltalake(uri, data, mode="append", partition_by=["p"])
    dt = deltalake.DeltaTable(uri)
    dt.delete("id = 2")
    dt = deltalake.DeltaTable(uri)
    snap = Snapshot.load(uri)
    assert snap.version == dt.version() == 2
    assert sorted(snap.file_uris()) == sorted(u.removeprefix("file://") for u in dt.file_uris())
    assert snap.partition_columns == ["p"]
    pvs = sorted((dict(r["partition_values"])["p"] or "") for r in snap.files.to_pylist())
    assert pvs == ["", "", "x", "x"]  # id 2 lived alone in p=y/z
    rows = sorted(i for f in snap.file_uris() for i in pq.read_table(f).column("id").to_pylist())
    assert rows == sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 1, 3, 3]


def test_load_by_file_uri(log_writer):
    log_writer.create()
    log_writer.commit(1, [add("a")])
    snap = Snapshot.load(log_writer.path.as_uri())
    assert snap.table_uri == str(log_writer.path) and snap.num_files == 1


def test_version_held_only_by_checkpoint(log_writer):
    from deltalog.checkpoint_write import write_checkpoint
    log_writer.create()
    log_writer.commit(1, [add("a")])
    log_writer.commit(2, [add("b")])
    snap = Snapshot.load(str(log_writer.path))
    write_checkpoint(snap.store, snap)
    for v in range(3):
        (log_writer.log / ("%020d.json" % v)).unlink()
    again = Snapshot.load(str(log_writer.path))
    assert again.version == 2 and paths(again) == ["a", "b"] and again.timestamp > 0
    with pytest.raises(VersionNotFoundError):
        Snapshot.load(str(log_writer.path), version=1)


def test_values_only_the_lenient_parser_takes_still_read(log_writer):
    """Python's json module writes a float NaN as a bare NaN (seen in commitInfo metrics), and a
    30-digit integer is valid JSON: the fast parser refuses both, so the stdlib's reads such a commit."""
    log_writer.create()
    line = ('{"add":{"path":"a.parquet","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true,'
            '"stats":"{}","tags":{"big":"1"}},"extra":123456789012345678901234567890}\n'
            '{"commitInfo":{"operation":"WRITE","operationMetrics":{"ratio":NaN}}}\n'
            '{"add":{"path":"b.parquet","partitionValues":{},"size":2,"modificationTime":1,"dataChange":true}}\n')
    (log_writer.log / ("%020d.json" % 1)).write_text(line)
    snap = Snapshot.load(str(log_writer.path))
    assert sorted(snap.files.column("path").to_pylist()) == ["a.parquet", "b.parquet"]
