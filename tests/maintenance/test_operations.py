"""VACUUM, RESTORE and the files added between versions, on tables written by deltalog and read back
by delta-rs."""
import json
import os
import time

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog.errors import InvalidTableError, VersionNotFoundError
from deltalog.operations.restore import restore
from deltalog.operations.vacuum import vacuum
from deltalog.snapshot import Snapshot
from deltalog.write import write_deltalake


def ids(uri, version=None):
    t = deltalake.DeltaTable(uri, version=version) if version is not None else deltalake.DeltaTable(uri)
    return sorted(t.to_pyarrow_table().column("id").to_pylist())


def batch(lo, hi, part="a"):
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "part": [part] * (hi - lo)})


def age(path, seconds):
    old = time.time() - seconds
    os.utime(path, (old, old))


def data_files(uri):
    out = set()
    for d, dirs, names in os.walk(uri):
        dirs[:] = [x for x in dirs if x != "_delta_log"]
        out |= {os.path.relpath(os.path.join(d, n), uri) for n in names if n.endswith(".parquet")}
    return out


@pytest.fixture
def history_table(tmp_path):
    """v0: 0-9 (part a), v1: +10-19 (part b), v2: overwrite with 100-104, v3: +105-109."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 10), partition_by=["part"])
    write_deltalake(uri, batch(10, 20, "b"), mode="append")
    write_deltalake(uri, batch(100, 105), mode="overwrite")
    write_deltalake(uri, batch(105, 110, "b"), mode="append")
    return uri


def test_vacuum_keeps_retained_versions_and_deletes_expired_and_orphans(history_table):
    uri = history_table
    snap = Snapshot.load(uri)
    live = {os.path.relpath(p, uri) for p in snap.file_uris()}
    removed = data_files(uri) - live
    assert len(removed) == 2
    # an orphan of a failed writer, old, in a partition folder; and a young one (a running writer's)
    orphan = os.path.join(uri, "part=a", "part-orphan.parquet")
    young = os.path.join(uri, "part=b", "part-young.parquet")
    for p in (orphan, young):
        with open(p, "wb") as f:
            f.write(b"x")
    age(orphan, 8 * 86400)
    hidden = os.path.join(uri, "_hidden.parquet")
    with open(hidden, "wb") as f:
        f.write(b"x")
    age(hidden, 8 * 86400)

    # default retention (7 days): the removed files are young tombstones -> kept; the old orphan goes
    assert vacuum(uri, dry_run=True) == ["part=a/part-orphan.parquet"]
    assert os.path.exists(orphan)
    assert vacuum(uri) == ["part=a/part-orphan.parquet"]
    assert not os.path.exists(orphan) and os.path.exists(young) and os.path.exists(hidden)
    assert ids(uri, 1) == list(range(20))  # time travel still works

    # a retention below the table's is refused, naming the table and the property...
    with pytest.raises(InvalidTableError, match="deletedFileRetentionDuration"):
        vacuum(uri, retain_hours=0)
    # ...unless forced: then the tombstoned files go, never a live one
    for rel in removed:
        age(os.path.join(uri, rel), 3600)
    deleted = vacuum(uri, retain_hours=0, force=True)
    assert removed <= set(deleted)
    assert all(os.path.exists(os.path.join(uri, rel)) for rel in live)
    assert ids(uri) == list(range(100, 110))


def test_vacuum_respects_the_table_property(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 5), configuration={"delta.deletedFileRetentionDuration": "interval 1 hours"})
    write_deltalake(uri, batch(5, 10), mode="overwrite")
    old_file = (data_files(uri) - {os.path.relpath(p, uri) for p in Snapshot.load(uri).file_uris()}).pop()
    assert vacuum(uri) == []  # removed just now: within the hour
    with pytest.raises(InvalidTableError):
        vacuum(uri, retain_hours=0.5)
    assert vacuum(uri, retain_hours=2) == []
    # log_commits records VACUUM START / END like delta-spark's vacuum logging
    vacuum(uri, retain_hours=0, force=True, log_commits=True)
    ops = [h["operation"] for h in deltalake.DeltaTable(uri).history(2)]
    assert ops == ["VACUUM END", "VACUUM START"]
    assert not os.path.exists(os.path.join(uri, old_file))
    assert ids(uri) == list(range(5, 10))


def test_restore_by_version_and_timestamp(history_table):
    uri = history_table
    v = restore(uri, version=1)
    assert v == 4
    assert ids(uri) == list(range(20))
    info = deltalake.DeltaTable(uri).history(1)[0]
    assert info["operation"] == "RESTORE"
    m = info["operationMetrics"]
    assert int(m["numRestoredFiles"]) == 2 and int(m["numRemovedFiles"]) == 2
    adds = [json.loads(line)["add"] for line in open(os.path.join(uri, "_delta_log", "%020d.json" % 4))
            if '"add"' in line]
    assert adds and all(a["dataChange"] for a in adds)
    assert restore(uri, version=1) is None  # already there: nothing committed
    # by timestamp: the commit time of version 3
    ts = Snapshot.load(uri, version=3).timestamp
    assert restore(uri, timestamp=ts) == 5
    assert ids(uri) == list(range(100, 110))
    with pytest.raises(VersionNotFoundError):
        restore(uri, version=42)
    with pytest.raises(InvalidTableError):
        restore(uri)


def test_restore_brings_back_metadata_and_refuses_vacuumed_files(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 5))
    write_deltalake(uri, pa.table({"id": pa.array([7], pa.int64()), "part": ["c"], "extra": [1.5]}),
                    mode="append", schema_mode="merge")
    assert "extra" in deltalake.DeltaTable(uri).schema().to_arrow().names
    restore(uri, version=0)
    assert "extra" not in deltalake.DeltaTable(uri).schema().to_arrow().names
    assert ids(uri) == list(range(5))
    # after a forced vacuum the files of version 1 are gone: restoring to it is refused, nothing committed
    vacuum(uri, retain_hours=0, force=True)
    before = Snapshot.load(uri).version
    with pytest.raises(InvalidTableError, match="no longer exist"):
        restore(uri, version=1)
    assert Snapshot.load(uri).version == before


def test_changes_between_versions(history_table):
    """Without the change data feed, a range of appends and whole-file removes still reads by file; the
    range is checked and a commit gone from the log is named."""
    from deltalog.change_data import commit_changes
    from deltalog.storage import log_store_for

    uri = history_table
    store = log_store_for(uri)
    _, commits = commit_changes(store, 1, 1)
    assert [c.version for c in commits] == [1] and commits[0].inserted.num_rows == 1
    with pytest.raises(InvalidTableError):
        commit_changes(store, 3, 1)
    with pytest.raises(VersionNotFoundError):
        commit_changes(store, 2, 9)
def test_vacuum_removes_temp_files_a_killed_writer_left_in_the_log(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 5))
    log = os.path.join(uri, "_delta_log")
    stale, fresh = os.path.join(log, ".tmp-deadbeef"), os.path.join(log, ".tmp-inflight")
    for p in (stale, fresh):
        with open(p, "wb") as f:
            f.write(b'{"commitInfo":{}}\n')
    age(stale, 8 * 24 * 3600)
    assert "_delta_log/.tmp-deadbeef" in vacuum(uri, dry_run=True)
    vacuum(uri)
    assert not os.path.exists(stale)
    assert os.path.exists(fresh)  # may be a commit being written right now
    assert ids(uri) == list(range(5))


def test_restore_to_a_version_whose_files_are_file_uris(tmp_path):
    """Adds may name files by absolute `file://` URI (shallow clones, other writers): restore checks them
    where they are instead of calling them vacuumed."""
    import shutil
    from dataclasses import replace

    from deltalog.table import DeltaTable

    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 5))
    snap = Snapshot.load(uri)
    (original,) = snap.add_files()
    outside = tmp_path / "elsewhere" / "data.parquet"
    outside.parent.mkdir()
    shutil.copy(os.path.join(uri, original.path), outside)
    txn = DeltaTable(uri).transaction()
    txn.read_whole_table()
    txn.add_actions([original.remove(), replace(original, path=outside.as_uri())])
    txn.commit(operation="WRITE")
    write_deltalake(uri, batch(100, 103), mode="overwrite")
    assert restore(uri, version=1) == 3
    files = Snapshot.load(uri).file_uris()  # delta-rs 1.6 reads `file:` adds as relative paths
    assert files == [str(outside)]
    assert sorted(pq.read_table(files[0]).column("id").to_pylist()) == list(range(5))


def test_vacuum_never_deletes_through_a_symlink_out_of_the_table(tmp_path):
    """A partition folder linked to storage elsewhere, and a file linked from elsewhere: VACUUM leaves
    what they point at, while still removing the table's own orphans."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 3), partition_by=["part"])
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "linkdir").mkdir(parents=True)
    (elsewhere / "linkdir" / "in_link.parquet").write_bytes(b"not the table's")
    (elsewhere / "lone.parquet").write_bytes(b"not the table's either")
    os.symlink(elsewhere / "linkdir", os.path.join(uri, "part=z"))
    os.symlink(elsewhere / "lone.parquet", os.path.join(uri, "part=a", "part-linked.parquet"))
    orphan = os.path.join(uri, "part=a", "part-orphan.parquet")
    open(orphan, "wb").write(b"orphan")
    for p in (orphan, elsewhere / "linkdir" / "in_link.parquet", elsewhere / "lone.parquet"):
        age(p, 3 * 86400)
    assert vacuum(uri, retain_hours=0, force=True, dry_run=True) == ["part=a/part-orphan.parquet"]
    assert vacuum(uri, retain_hours=0, force=True) == ["part=a/part-orphan.parquet"]
    assert (elsewhere / "linkdir" / "in_link.parquet").read_bytes() == b"not the table's"
    assert (elsewhere / "lone.parquet").exists()
    assert ids(uri) == [0, 1, 2]


def test_deletes_refuse_paths_that_resolve_outside_their_root(tmp_path):
    from deltalog.storage import files as fs
    from deltalog.errors import UnsafePathError
    from deltalog.storage.log_store import LocalLogStore

    root = tmp_path / "t"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.parquet").write_bytes(b"x")
    os.symlink(outside, root / "p=1")
    with pytest.raises(UnsafePathError, match="outside"):
        fs.delete_file(str(root / "p=1" / "f.parquet"), within=str(root))
    with pytest.raises(UnsafePathError, match="outside"):
        LocalLogStore(str(root)).delete_data_file("p=1/f.parquet")
    with pytest.raises(UnsafePathError):
        fs.delete_file(str(root / ".." / "outside" / "f.parquet"), within=str(root))
    assert (outside / "f.parquet").exists()
    # a folder that is a link loses only the link; links inside a deleted folder are not followed
    (root / "q=1").mkdir()
    os.symlink(outside, root / "q=1" / "inner")
    fs.delete_tree(str(root / "p=1"))
    fs.delete_tree(str(root))
    assert not root.exists() and (outside / "f.parquet").read_bytes() == b"x"
    # a recursive listing does not descend into links
    (root / "a").mkdir(parents=True)
    os.symlink(outside, root / "a" / "b")
    assert [i.path for i in fs.list_files(str(root))] == ["a"]


def test_reading_a_version_vacuum_removed_names_version_file_and_retention(tmp_path):
    from deltalog.errors import DataFileNotFoundError
    from deltalog.scan import read_table

    uri = str(tmp_path / "t")
    write_deltalake(uri, batch(0, 3))
    write_deltalake(uri, batch(5, 6), mode="overwrite")
    vacuum(uri, retain_hours=0, force=True)
    with pytest.raises(DataFileNotFoundError, match=r"version 0 needs data file .*VACUUM removed it.*latest is 1.*"
                                                    r"deletedFileRetentionDuration = 168 hours"):
        read_table(Snapshot.load(uri, version=0))
    # a live file deleted behind the log is not blamed on VACUUM
    os.remove(Snapshot.load(uri).file_uris()[0])
    with pytest.raises(DataFileNotFoundError, match="outside the table's log"):
        read_table(Snapshot.load(uri))
