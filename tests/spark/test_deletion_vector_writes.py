"""Merge-on-read with deletion vectors (`delta.enableDeletionVectors`): DELETE, MERGE and replace_where
mark rows in DV files instead of rewriting data files; delta-rs reads every version as we do; VACUUM
keeps the DV files any retained version needs; a failed commit leaves the data files alone."""
from __future__ import annotations

import glob
import json
import os

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog.deletion_vectors import read_deletion_vector, write_deletion_vectors, z85_decode, z85_encode
from deltalog.operations.vacuum import vacuum
from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.transaction import Transaction

pytestmark = pytest.mark.spark
DVS = {"delta.enableDeletionVectors": "true"}


def _ids(table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def _delta_rs_ids(uri, version=None) -> list[int]:
    dt = deltalake.DeltaTable(uri, version=version)
    return _ids(pa.table(QueryBuilder().register("t", dt).execute("select id from t").read_all()))


def _agree_at_every_version(uri) -> None:
    for v in range(Snapshot.load(uri).version + 1):
        assert _ids(read_table(Snapshot.load(uri, version=v))) == _delta_rs_ids(uri, v), f"version {v}"


def _table(spark, uri, rows=1000, files=4):
    ops.write_dataframe(spark.range(rows).selectExpr("id", "id % 7 AS k", "'a' AS s").repartition(files), uri,
                        configuration=DVS)
    return {a.path for a in Snapshot.load(uri).add_files()}


def test_dv_file_round_trip(tmp_path):
    from pyroaring import BitMap64

    data = os.urandom(16)
    assert z85_decode(z85_encode(data)) == data
    snap_dir = tmp_path / "t"
    snap_dir.mkdir()
    store = Transaction(str(snap_dir)).store
    bitmaps = [BitMap64([1, 5, 9]), BitMap64(range(0, 100_000, 3)), BitMap64([1 << 33])]
    relative, dvs = write_deletion_vectors(store, bitmaps)
    assert os.path.exists(snap_dir / relative)
    assert [read_deletion_vector(store, dv) for dv in dvs] == bitmaps
    assert [dv["cardinality"] for dv in dvs] == [3, 33_334, 1]


def test_delete_marks_rows_and_keeps_the_data_files(spark, tmp_path):
    uri = str(tmp_path / "t")
    original = _table(spark, uri)
    ops.delete(spark, uri, "k = 3")
    ops.delete(spark, uri, "id < 10 OR id = 500")  # 500 % 7 == 3: counted once
    snap = Snapshot.load(uri)
    assert "deletionVectors" in snap.protocol.reader_features
    assert {a.path for a in snap.add_files()} == original  # no data file rewritten
    assert all(a.deletion_vector and json.loads(a.stats)["tightBounds"] is False for a in snap.add_files())
    expected = [i for i in range(1000) if i % 7 != 3 and i >= 10]
    assert _ids(read_table(snap)) == expected
    _agree_at_every_version(uri)
    history = deltalake.DeltaTable(uri).history()
    assert history[0]["operationMetrics"]["numDeletedRows"] == "9"
    before = {a.path: a.deletion_vector for a in Snapshot.load(uri, version=1).add_files()}
    changed = [a for a in snap.add_files() if a.deletion_vector != before[a.path]]
    assert history[0]["operationMetrics"]["numDeletionVectorsAdded"] == str(len(changed)) != "0"

    ops.delete(spark, uri, "id >= 0")  # every row: the files go
    assert Snapshot.load(uri).num_files == 0 and _delta_rs_ids(uri) == []


def test_merge_marks_matched_rows_and_writes_only_new_versions(spark, tmp_path):
    uri = str(tmp_path / "t")
    original = _table(spark, uri)
    source = spark.sql("SELECT id, 100L AS k, 'b' AS s FROM range(0, 2000, 50)")
    ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",
              when_matched_update="*", when_not_matched_insert="*")
    snap = Snapshot.load(uri)
    assert original <= {a.path for a in snap.add_files()}
    metrics = deltalake.DeltaTable(uri).history()[0]["operationMetrics"]
    assert metrics["numTargetRowsCopied"] == "0" and metrics["numOutputRows"] == "40"
    assert metrics["numTargetRowsUpdated"] == "20" and metrics["numTargetRowsInserted"] == "20"
    ops.merge(spark, uri, spark.sql("SELECT id FROM range(0, 1000, 100)"), on="t.id = s.id",
              source_alias="s", target_alias="t", when_matched_delete_condition="true")
    rows = {r["id"]: (r["k"], r["s"]) for r in read_table(Snapshot.load(uri)).to_pylist()}
    expected = {i: (i % 7, "a") for i in range(1000)}
    expected.update({i: (100, "b") for i in range(0, 2000, 50)})
    for i in range(0, 1000, 100):
        del expected[i]
    assert rows == expected
    _agree_at_every_version(uri)


def test_merge_on_read_keeps_the_columns_an_update_leaves_and_records_the_change_feed(spark, tmp_path):
    """The new version of a marked row takes the columns the update does not set from the old row (read
    in the matching join, not by a second scan); a column the merge adds is null for old rows; the
    change feed gets the pre- and post-images and the deletes, as delta-rs reads them."""
    from deltalog.spark.change_data import changes_dataframe

    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.range(100).selectExpr("id", "id % 7 AS k", "concat('s', id) AS s").repartition(2),
                        uri, configuration={**DVS, "delta.enableChangeDataFeed": "true"})
    source = spark.sql("SELECT id, 100L AS k, 'x' AS s, id * 10 AS extra FROM range(0, 120, 10)")
    schema = Snapshot.load(uri).schema_json
    wider = {**schema, "fields": [*schema["fields"], {"name": "extra", "type": "long", "nullable": True,
                                                      "metadata": {}}]}
    ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",
              when_matched_update={"k": "s.k", "extra": "s.extra"}, when_matched_delete_condition="s.id = 50",
              when_not_matched_insert="*", table_schema=wider)
    rows = {r["id"]: (r["k"], r["s"], r["extra"]) for r in read_table(Snapshot.load(uri)).to_pylist()}
    expected = {i: (i % 7, f"s{i}", None) for i in range(100)}
    expected.update({i: (100, f"s{i}", i * 10) for i in range(0, 100, 10)})
    expected.update({i: (100, "x", i * 10) for i in (100, 110)})
    del expected[50]
    assert rows == expected
    assert deltalake.DeltaTable(uri).history()[0]["operationMetrics"]["numTargetRowsCopied"] == "0"
    _agree_at_every_version(uri)
    changes = sorted((r["_change_type"], r["id"], r["k"], r["s"], r["extra"])
                     for r in changes_dataframe(spark, uri, 1, 1).collect())
    expected_changes = sorted(
        [("update_preimage", i, i % 7, f"s{i}", None) for i in range(0, 100, 10) if i != 50]
        + [("update_postimage", i, 100, f"s{i}", i * 10) for i in range(0, 100, 10) if i != 50]
        + [("delete", 50, 50 % 7, "s50", None)] + [("insert", i, 100, "x", i * 10) for i in (100, 110)])
    assert changes == expected_changes
    theirs = pa.table(deltalake.DeltaTable(uri).load_cdf(starting_version=1, ending_version=1).read_all())
    assert sorted((r["_change_type"], r["id"], r["k"], r["s"], r["extra"]) for r in theirs.to_pylist()) \
        == expected_changes


def test_optimize_rewrites_files_with_many_deleted_rows_and_purge_rewrites_all(spark, tmp_path):
    """OPTIMIZE rewrites a file whose DV deletes over 5 % of its rows (alone, though it is not small) and
    leaves one with fewer; REORG ... APPLY (PURGE) rewrites every file with a DV. The rows never change,
    the tombstones carry the DVs they end, and the old versions still read with their DVs."""
    from deltalog.spark.optimize import optimize

    uri = str(tmp_path / "t")
    for parity in (0, 1):  # one file of even ids, one of odd ids
        ops.write_dataframe(spark.range(parity, 4000, 2, 1).selectExpr("id", "'a' AS s"), uri, configuration=DVS)
    files = {a.path: a for a in Snapshot.load(uri).add_files()}
    assert len(files) == 2
    ops.delete(spark, uri, "id % 2 = 0 AND id < 400")  # 200 of 2000 rows (10 %) in one file
    ops.delete(spark, uri, "id % 2 = 1 AND id < 40")  # 20 of 2000 (1 %) in the other
    before = read_table(Snapshot.load(uri))
    dvs = {a.path: a.deletion_vector for a in Snapshot.load(uri).add_files()}
    heavy = next(p for p, dv in dvs.items() if dv["cardinality"] == 200)
    light = next(p for p, dv in dvs.items() if dv["cardinality"] == 20)

    version = optimize(spark, uri, min_file_size=1)  # no file is small: only the deleted share counts
    snap = Snapshot.load(uri)
    assert snap.version == version
    paths = {a.path: a for a in snap.add_files()}
    assert heavy not in paths and light in paths and paths[light].deletion_vector == dvs[light]
    assert all(a.deletion_vector is None for p, a in paths.items() if p != light)
    commit = [json.loads(line) for line in open(os.path.join(uri, "_delta_log", f"{version:020d}.json"))]
    removed = [a["remove"] for a in commit if "remove" in a]
    assert [r["path"] for r in removed] == [heavy] and removed[0]["deletionVector"] == dvs[heavy]
    assert all(a["add"]["dataChange"] is False for a in commit if "add" in a)
    assert _ids(read_table(snap)) == _ids(before)
    assert optimize(spark, uri, min_file_size=1) is None  # the 1 % file stays as it is

    version = optimize(spark, uri, purge=True)
    snap = Snapshot.load(uri)
    assert all(a.deletion_vector is None for a in snap.add_files())
    assert _ids(read_table(snap)) == _ids(before) == _delta_rs_ids(uri)
    history = deltalake.DeltaTable(uri).history()[0]
    assert history["operation"] == "REORG" and history["operationParameters"]["applyPurge"] == "true"
    assert optimize(spark, uri, purge=True) is None  # nothing left to purge
    _agree_at_every_version(uri)
    assert _ids(read_table(Snapshot.load(uri, version=version - 1))) == _ids(before)


@pytest.mark.parametrize("kind", ["delete", "merge"])
def test_concurrent_dml_on_different_rows_of_one_file_both_land(spark, tmp_path, monkeypatch, kind):
    """Two threads change different rows of the same file at once (both read the same version; a
    barrier holds each commit until both are ready): at WriteSerializable both land, the later one
    rebased on the earlier one's DV. Changing the same row makes the later one fail by name."""
    import threading

    from deltalog.errors import ConcurrentAppendException, ConcurrentDeleteDeleteException

    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.range(1000).selectExpr("id", "id % 7 AS k", "'a' AS s").coalesce(1), uri,
                        configuration=DVS)
    original = Transaction.commit
    barrier = threading.Barrier(2, timeout=120)

    def commit_together(self, *args, **kwargs):
        barrier.wait()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transaction, "commit", commit_together)

    def change(lo: int, hi: int) -> None:
        if kind == "delete":
            ops.delete(spark, uri, f"id >= {lo} AND id < {hi}")
        else:
            source = spark.sql(f"SELECT id, 100L AS k, 'b' AS s FROM range({lo}, {hi})")
            ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",
                      when_matched_update="*")

    def run_both(ranges):
        errors = []

        def worker(lo, hi):
            try:
                change(lo, hi)
            except Exception as e:  # noqa: BLE001 - asserted below
                errors.append(e)
        threads = [threading.Thread(target=worker, args=r) for r in ranges]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors

    assert run_both([(10, 20), (50, 60)]) == []
    assert Snapshot.load(uri).version == 2
    rows = {r["id"]: (r["k"], r["s"]) for r in read_table(Snapshot.load(uri)).to_pylist()}
    changed = set(range(10, 20)) | set(range(50, 60))
    if kind == "delete":
        assert sorted(rows) == [i for i in range(1000) if i not in changed]
    else:
        assert sorted(rows) == list(range(1000))
        assert all(rows[i] == ((100, "b") if i in changed else (i % 7, "a")) for i in rows)
    _agree_at_every_version(uri)

    errors = run_both([(100, 110), (105, 120)])  # rows 105-109 both times
    # a delete finds them marked already; a merge first finds the winner's new versions of them in
    # the key range it read
    expected = ConcurrentDeleteDeleteException if kind == "delete" else ConcurrentAppendException
    assert len(errors) == 1 and type(errors[0]) is expected, errors
    assert Snapshot.load(uri).version == 3
    _agree_at_every_version(uri)


def test_replace_where_marks_the_replaced_rows(spark, tmp_path):
    uri = str(tmp_path / "t")
    original = _table(spark, uri)
    ops.write_dataframe(spark.sql("SELECT id, 0L AS k, 'r' AS s FROM range(0, 1000, 7)"), uri, mode="overwrite",
                        replace_where="k = 0")
    snap = Snapshot.load(uri)
    assert original <= {a.path for a in snap.add_files()}
    rows = {r["id"]: r["s"] for r in read_table(snap).to_pylist()}
    assert len(rows) == 1000 and all(rows[i] == ("r" if i % 7 == 0 else "a") for i in range(1000))
    _agree_at_every_version(uri)


def test_vacuum_keeps_the_dv_files_versions_need(spark, tmp_path):
    uri = str(tmp_path / "t")
    _table(spark, uri)
    ops.delete(spark, uri, "k = 3")
    first = set(glob.glob(os.path.join(uri, "deletion_vector_*.bin")))
    ops.delete(spark, uri, "k = 4")  # the union DVs go into a second DV file
    orphan = os.path.join(uri, "deletion_vector_00000000-0000-0000-0000-000000000000.bin")
    open(orphan, "wb").write(b"\x01")
    old = 0  # every file older than any cutoff
    for path in glob.glob(os.path.join(uri, "*.bin")):
        os.utime(path, (old, old))

    # the default retention keeps the first DV file: version 1 (in the window) reads it
    deleted = vacuum(uri)
    assert deleted == [os.path.basename(orphan)]
    assert first <= set(glob.glob(os.path.join(uri, "deletion_vector_*.bin")))
    _agree_at_every_version(uri)
    # with no retention only the live DV file stays, and the table still reads
    deleted = vacuum(uri, retain_hours=0, force=True)
    assert {os.path.basename(p) for p in first} == set(deleted)
    assert _ids(read_table(Snapshot.load(uri))) == _delta_rs_ids(uri) == [i for i in range(1000) if i % 7 not in (3, 4)]


def test_a_failed_commit_discards_the_dv_file_and_never_a_data_file(spark, tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    original = _table(spark, uri)

    def refuse(self, **kwargs):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(Transaction, "commit", refuse)
    with pytest.raises(RuntimeError, match="went away"):
        ops.delete(spark, uri, "k = 3")
    assert glob.glob(os.path.join(uri, "*.bin")) == []
    assert all(os.path.exists(os.path.join(uri, p)) for p in original)
    assert Snapshot.load(uri).version == 0 and len(_delta_rs_ids(uri)) == 1000
