"""Row tracking (`delta.enableRowTracking`, writer feature `rowTracking`): every commit gives new files
fresh row IDs above the high-water mark and its version as their row commit version, keeps both on
files it only marks rows of, and raises the mark. Checked at every version the way a reader
reconstructs row IDs (baseRowId + position in the file): unique, and unchanged for rows no commit
touched. delta-rs reads every version as we do. Tables from other writers with the feature are
written too."""
from __future__ import annotations

import json
import os
import shutil
import threading

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import QueryBuilder

from deltalog import row_tracking
from deltalog.actions import AddFile, CommitInfo, DomainMetadata
from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.dml.merge import match as merge_match
from deltalog.spark.optimize import optimize
from deltalog.spark.reader import snapshot_dataframe
from deltalog.table import DeltaTable
from deltalog.write import write_deltalake
from tests.support.row_ids import check_version as _check_version, commit_actions as _commit, row_ids as _row_ids
from tests.support.shared_data import WILD, require

pytestmark = pytest.mark.spark
TRACKED = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}


def _delta_rs_rows(uri: str, version: int) -> dict[int, str]:
    dt = deltalake.DeltaTable(uri, version=version)
    t = pa.table(QueryBuilder().register("t", dt).execute("select id, s from t").read_all())
    return dict(zip(t.column("id").to_pylist(), t.column("s").to_pylist()))


def _our_rows(uri: str, version: int) -> dict[int, str]:
    t = read_table(Snapshot.load(uri, version=version))
    return dict(zip(t.column("id").to_pylist(), t.column("s").to_pylist()))


@pytest.mark.parametrize("match", ["driver", "spark", "spark_target_values"])
def test_dml_keeps_row_ids_of_untouched_rows_and_gives_fresh_ones_to_new_rows(spark, tmp_path, match, monkeypatch):
    """`match`: the merge's rows matched on the driver, or by Spark (its updates from the source alone,
    or from target values too)."""
    if match != "driver":
        monkeypatch.setattr(merge_match, "_DRIVER_MATCH_SOURCE_ROWS", 0)
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.range(1000).selectExpr("id", "'a' AS s").repartition(4), uri, configuration=TRACKED)
    snap = Snapshot.load(uri)
    assert {"rowTracking", "domainMetadata"} <= set(snap.protocol.writer_features)
    conf = snap.configuration
    assert conf[row_tracking.ROW_ID_COLUMN_KEY].startswith("_row-id-col-")
    assert conf[row_tracking.ROW_COMMIT_VERSION_COLUMN_KEY].startswith("_row-commit-version-col-")
    assert sorted(_row_ids(uri, 0).values()) == list(range(1000))

    ops.write_dataframe(spark.range(1000, 1100).selectExpr("id", "'a' AS s"), uri, mode="append")  # v1
    ops.delete(spark, uri, "id % 10 = 3")  # v2: marks rows
    source = spark.sql("SELECT id, 'b' AS s FROM range(0, 2000, 50)")
    update = {"id": "s.id", "s": "concat(s.s, t.s)"} if match == "spark_target_values" else "*"
    ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",  # v3
              when_matched_update=update, when_not_matched_insert="*")
    latest = Snapshot.load(uri).version
    assert latest == 3
    for v in range(latest + 1):
        _check_version(uri, v)
        assert _our_rows(uri, v) == _delta_rs_rows(uri, v), v
    first, before_merge, last = _row_ids(uri, 0), _row_ids(uri, 2), _row_ids(uri, latest)
    updated = {k for k in range(0, 2000, 50) if k in before_merge}
    inserted = set(range(0, 2000, 50)) - set(before_merge)
    untouched = [k for k in last if k < 1000 and k not in updated]
    assert untouched and all(last[k] == first[k] for k in untouched)  # row IDs of rows no one changed
    # updated rows keep their IDs (in the new files' hidden column), with the merge as their commit
    # version; inserted rows got IDs above every earlier one
    assert updated and all(last[k] == before_merge[k] for k in updated)
    versions = _row_ids(uri, latest, commit_versions=True)
    assert {versions[k] for k in updated | inserted} == {3}
    assert min(last[k] for k in inserted) > max(before_merge.values())
    tags = [next(a for a in _commit(uri, v) if isinstance(a, CommitInfo)).extra["tags"] for v in range(4)]
    assert [t[row_tracking.PRESERVED_TAG] for t in tags] == ["true", "true", "true", "true"]
    mark = row_tracking.high_water_mark(Snapshot.load(uri).domain_metadata.values())
    assert mark == max(last.values())


@pytest.mark.parametrize("match", ["driver", "spark"])
@pytest.mark.parametrize("mapping", ["none", "name", "id"])
def test_optimize_keeps_every_row_id_and_commit_version(spark, tmp_path, mapping, match, monkeypatch):
    """OPTIMIZE (compaction, then Z-order reading the hidden columns it wrote) writes each row's ID and
    commit version into the table's hidden materialized columns: a reader finds the same ones as
    before, and the commit says so. New rows still get IDs above every earlier one. A merge after it
    (matched on the driver or by Spark) keeps the materialized IDs of the rows it updates."""
    if match == "spark":
        monkeypatch.setattr(merge_match, "_DRIVER_MATCH_SOURCE_ROWS", 0)
    uri = str(tmp_path / "t")
    configuration = {**TRACKED, **({"delta.columnMapping.mode": mapping} if mapping != "none" else {})}
    ops.write_dataframe(spark.range(600).selectExpr("id", "'a' AS s").repartition(3), uri,
                        configuration=configuration)
    ops.write_dataframe(spark.range(600, 700).selectExpr("id", "'a' AS s").repartition(2), uri, mode="append")
    ops.delete(spark, uri, "id % 7 = 0")  # marks rows: the rewrite must skip them, not shift the positions
    before_ids, before_versions = _row_ids(uri, 2), _row_ids(uri, 2, commit_versions=True)
    assert set(before_versions.values()) == {0, 1}
    mark = row_tracking.high_water_mark(Snapshot.load(uri).domain_metadata.values())
    for version, run in ((3, lambda: optimize(spark, uri)), (4, lambda: optimize(spark, uri, zorder_by=["s", "id"]))):
        assert run() == version
        _check_version(uri, version)
        assert Snapshot.load(uri).num_files == 1
        assert _row_ids(uri, version) == before_ids
        assert _row_ids(uri, version, commit_versions=True) == before_versions
        assert _our_rows(uri, version) == _delta_rs_rows(uri, version)
        info = next(a for a in _commit(uri, version) if isinstance(a, CommitInfo))
        assert info.extra["tags"][row_tracking.PRESERVED_TAG] == "true"
    # the hidden columns are no column of the table: not in its schema, stats or reads
    snap = Snapshot.load(uri)
    hidden = {snap.configuration[row_tracking.ROW_ID_COLUMN_KEY],
              snap.configuration[row_tracking.ROW_COMMIT_VERSION_COLUMN_KEY]}
    assert [f["name"] for f in snap.schema_json["fields"]] == ["id", "s"]
    assert snapshot_dataframe(spark, snap).columns == ["id", "s"]
    assert not hidden & set(json.loads(snap.add_files()[0].stats)["minValues"])
    assert QueryBuilder().register("t", deltalake.DeltaTable(uri)).execute("select * from t").read_all() \
        .schema.names == ["id", "s"]
    ops.write_dataframe(spark.range(700, 710).selectExpr("id", "'b' AS s"), uri, mode="append")
    latest = _row_ids(uri, 5)
    assert min(latest[k] for k in range(700, 710)) > mark
    assert len(set(latest.values())) == len(latest)
    # a DV merge after OPTIMIZE: updated rows keep the IDs OPTIMIZE materialized (0 was deleted: new)
    ops.merge(spark, uri, spark.range(0, 700, 100).selectExpr("id", "'c' AS s"), on="t.id = s.id",
              source_alias="s", target_alias="t", when_matched_update="*", when_not_matched_insert="*")
    _check_version(uri, 6)
    merged = _row_ids(uri, 6)
    assert all(merged[k] == latest[k] for k in range(100, 700, 100))
    assert merged[0] > max(latest.values())
    assert _our_rows(uri, 6) == _delta_rs_rows(uri, 6)


def test_enabling_on_an_existing_table_gives_every_file_row_ids(spark, tmp_path):
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.range(300).selectExpr("id", "'a' AS s").repartition(3), uri)
    ops.write_dataframe(spark.range(300, 350).selectExpr("id", "'a' AS s"), uri, mode="append")
    assert all(a.base_row_id is None for a in Snapshot.load(uri).add_files())
    before = _our_rows(uri, 1)
    txn = DeltaTable(uri).transaction()
    md = txn.snapshot.metadata
    from dataclasses import replace
    txn.update_metadata(replace(md, configuration={**md.configuration, "delta.enableRowTracking": "true"}))
    version = txn.commit(operation="SET TBLPROPERTIES")
    snap = Snapshot.load(uri)
    assert "rowTracking" in snap.protocol.writer_features
    adds = [a for a in _commit(uri, version) if isinstance(a, AddFile)]
    assert len(adds) == snap.num_files > 1 and not any(a.data_change for a in adds)  # same files, ids added
    _check_version(uri, version)
    assert sorted(_row_ids(uri, version).values()) == list(range(350))
    assert _our_rows(uri, version) == before == _delta_rs_rows(uri, version)
    ops.write_dataframe(spark.range(350, 360).selectExpr("id", "'a' AS s"), uri, mode="append")
    _check_version(uri, version + 1)


def test_concurrent_appends_get_disjoint_row_ids(tmp_path):
    """Writers that lose the race for a version take the winner's high-water mark."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([0], pa.int64()), "s": ["a"]}), configuration=TRACKED)
    barrier = threading.Barrier(4)
    errors = []

    def append(n: int) -> None:
        try:
            barrier.wait()
            for i in range(5):
                start = 1 + (n * 5 + i) * 10
                write_deltalake(uri, pa.table({"id": pa.array(range(start, start + 10), pa.int64()),
                                               "s": ["a"] * 10}), mode="append")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    latest = Snapshot.load(uri).version
    assert latest == 20
    for v in range(latest + 1):
        _check_version(uri, v)
    assert sorted(_row_ids(uri, latest).values()) == list(range(201))


def test_a_table_databricks_created_with_row_tracking_is_written(spark, tmp_path):
    source = require(WILD / "kernel" / "crc-full")
    uri = str(tmp_path / "t")
    shutil.copytree(source, uri)
    # Databricks created it with clustering and row tracking and no rows. Its .crc (a test of
    # delta-kernel's checksum reader) lists files the log does not hold: it is only a hint, so it goes.
    os.remove(os.path.join(uri, "_delta_log", "00000000000000000000.crc"))
    before = Snapshot.load(uri)
    mark = row_tracking.high_water_mark(before.domain_metadata.values())
    ops.write_dataframe(spark.range(40).repartition(2), uri, mode="append")
    snap = Snapshot.load(uri)
    _check_version(uri, snap.version)
    assert sorted(_row_ids(uri, snap.version).values()) == list(range(mark + 1, mark + 41))
    assert snap.domain_metadata[row_tracking.DOMAIN] == DomainMetadata(
        row_tracking.DOMAIN, json.dumps({"rowIdHighWaterMark": mark + 40}, separators=(",", ":")))
    dt = deltalake.DeltaTable(uri)
    t = pa.table(QueryBuilder().register("t", dt).execute("select id from t").read_all())
    assert sorted(t.column("id").to_pylist()) == list(range(40))


def test_row_ids_survive_a_checkpoint(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array(range(5), pa.int64()), "s": ["a"] * 5}),
                    configuration={**TRACKED, "delta.checkpointInterval": "2"})
    for i in range(3):
        write_deltalake(uri, pa.table({"id": pa.array([10 + i], pa.int64()), "s": ["a"]}), mode="append")
    assert os.path.exists(os.path.join(uri, "_delta_log", "%020d.checkpoint.parquet" % 2))
    os.remove(os.path.join(uri, "_delta_log", "00000000000000000001.json"))  # replay from the checkpoint
    snap = Snapshot.load(uri)
    assert sorted(pc.fill_null(snap.files.column("base_row_id"), -1).to_pylist()) == [0, 5, 6, 7]
    assert row_tracking.high_water_mark(snap.domain_metadata.values()) == 7
    _check_version(uri, snap.version)


def test_bad_row_tracking_settings_are_refused(tmp_path):
    from deltalog.errors import InvalidTableError
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidTableError, match="delta.enableRowTracking='yes'.*true, false"):
        write_deltalake(uri, pa.table({"id": [1]}), configuration={"delta.enableRowTracking": "yes"})
    with pytest.raises(InvalidTableError, match="suspended"):
        write_deltalake(uri, pa.table({"id": [1]}), configuration={"delta.enableRowTracking": "true",
                                                                    "delta.rowTrackingSuspended": "true"})
    assert not DeltaTable(uri).exists()


@pytest.mark.parametrize("dml", ["delete", "merge", "replace_where"])
def test_copy_on_write_dml_keeps_the_row_ids_of_the_rows_it_rewrites(spark, tmp_path, dml):
    """Without deletion vectors DML rewrites whole files: the rows it copies keep their row IDs and
    commit versions, rows it updates keep their IDs (their commit version becomes the DML's), and new
    rows get fresh IDs. delta-rs reads every version as we do, and the commit says the IDs were kept."""
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.range(1000).selectExpr("id", "'a' AS s").repartition(4), uri,
                        configuration={"delta.enableRowTracking": "true"})
    ops.delete(spark, uri, "id % 10 = 9")  # v1: copy-on-write too, so v2 meets materialized IDs
    before, versions_before = _row_ids(uri, 1), _row_ids(uri, 1, commit_versions=True)
    assert sorted(before.values()) == sorted(v for k, v in _row_ids(uri, 0).items() if k % 10 != 9)
    if dml == "delete":
        ops.delete(spark, uri, "id % 10 = 3")
        changed, new = set(), set()
    elif dml == "merge":
        source = spark.sql("SELECT id, 'b' AS s FROM range(0, 2000, 50)")
        ops.merge(spark, uri, source, on="t.id = s.id", source_alias="s", target_alias="t",
                  when_matched_update="*", when_not_matched_insert="*")
        changed = {k for k in range(0, 2000, 50) if k in before}
        new = set(range(0, 2000, 50)) - set(before)
    else:
        ops.write_dataframe(spark.sql("SELECT id, 'c' AS s FROM range(3, 1000, 10)"), uri, mode="overwrite",
                            replace_where="id % 10 = 3")
        changed, new = set(), set(range(3, 1000, 10))
    assert Snapshot.load(uri).files.column("deletion_vector").null_count == Snapshot.load(uri).num_files
    for v in range(3):
        _check_version(uri, v)
        assert _our_rows(uri, v) == _delta_rs_rows(uri, v), v
    after, versions_after = _row_ids(uri, 2), _row_ids(uri, 2, commit_versions=True)
    copied = [k for k in after if k not in changed and k not in new]
    assert copied and {k: after[k] for k in copied} == {k: before[k] for k in copied}
    assert {k: versions_after[k] for k in copied} == {k: versions_before[k] for k in copied}
    assert all(after[k] == before[k] for k in changed) and all(versions_after[k] == 2 for k in changed | new)
    assert all(after[k] > max(before.values()) for k in new)
    tags = next(a for a in _commit(uri, 2) if isinstance(a, CommitInfo)).extra["tags"]
    assert tags[row_tracking.PRESERVED_TAG] == "true"
