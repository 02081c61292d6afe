"""Deletion vectors in the Spark reader: the jar's `DeletionVectorParquetFormat` (Spark's Parquet scan
flagging each batch's deleted rows by their positions) or, where tasks cannot load the jar, an anti-join
with the deleted rows, gives exactly the rows delta-rs reads, for every DV table other writers produced."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from deltalog.errors import DeltaError
from deltalog.snapshot import Snapshot
from deltalog.spark.reader import FILE_COLUMN, ROW_INDEX_COLUMN, files_dataframe, snapshot_dataframe
from tests.engine.test_conformance import delta_rs_rows
from tests.engine.test_deletion_vectors import DV_TABLES
from tests.support.shared_data import CONFORMANCE, require

pytestmark = pytest.mark.spark


@pytest.fixture
def spark_conf(spark):
    """Sets Spark confs for one test: `spark_conf(key, value)`, put back as they were at teardown."""
    previous: dict[str, str | None] = {}

    def set_conf(key: str, value: str) -> None:
        previous.setdefault(key, spark.conf.get(key, None))
        spark.conf.set(key, value)

    yield set_conf
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _loadable(case: str):
    try:
        return Snapshot.load(str(CONFORMANCE / case))
    except DeltaError:
        return None  # refused for another feature (tests/engine/test_deletion_vectors.py checks which)


@pytest.mark.parametrize("rows_filter", ["flagged_batches", "flagged_rows", "anti_join"])
@pytest.mark.parametrize("case", DV_TABLES)
def test_spark_reads_dv_tables_as_delta_rs_does(spark, case, rows_filter, monkeypatch, spark_conf):
    """Through the jar's Parquet format (batches of the vectorized reader, or rows of Spark's other
    reader), and through the anti-join that serves where tasks cannot load the jar."""
    import deltalake

    from deltalog.spark import reader

    if rows_filter == "anti_join":
        monkeypatch.setattr(reader, "has_jar_class", lambda *a: False)
    else:
        assert reader.has_jar_class(spark, "dv.DeletionVectorParquetFormat")
    if rows_filter == "flagged_rows":
        spark_conf("spark.sql.parquet.enableVectorizedReader", "false")

    require(CONFORMANCE / case)
    snap = _loadable(case)
    if snap is None:
        return
    theirs = delta_rs_rows(deltalake.DeltaTable(str(CONFORMANCE / case)))
    df = snapshot_dataframe(spark, snap)
    ours = pa.Table.from_pylist([r.asDict(recursive=True) for r in df.collect()]) if df.count() else None
    assert df.count() == theirs.num_rows

    def plain(v):  # Spark gives naive UTC datetimes (session time zone UTC), delta-rs aware ones
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v

    def canonical(rows):
        return sorted(repr(sorted((k, plain(v)) for k, v in r.items())) for r in rows)

    if ours is not None:
        assert canonical(ours.to_pylist()) == canonical(theirs.to_pylist())


@pytest.mark.parametrize("rows_filter", ["flagged_batches", "anti_join"])
def test_inline_dv_with_a_partial_z85_group_at_every_version(spark, rows_filter, monkeypatch):
    """kernel_x/cdf-table-with-dv (delta-kernel-rs's inline DV `...##093` at version 5), read by Spark
    at every version as delta-rs reads it."""
    import deltalake

    from deltalog.spark import reader
    from tests.support.shared_data import WILD

    if rows_filter == "anti_join":
        monkeypatch.setattr(reader, "has_jar_class", lambda *a: False)
    path = str(require(WILD / "kernel_x" / "cdf-table-with-dv" / "cdf-table-with-dv"))
    for version in range(7):
        ours = sorted(r[0] for r in snapshot_dataframe(spark, Snapshot.load(path, version=version)).collect())
        theirs = delta_rs_rows(deltalake.DeltaTable(path, version=version)).column("value").to_pylist()
        assert ours == sorted(theirs), version


def test_row_positions_of_remaining_rows_skip_the_deleted_ones(spark):
    case = "wild/kernel/table-with-dv-small"
    require(CONFORMANCE / case)
    snap = Snapshot.load(str(CONFORMANCE / case))
    rows = files_dataframe(spark, snap, snap.files, with_file=True, with_row_index=True).collect()
    dv = snap.files.column("deletion_vector")[0].as_py()
    from deltalog.deletion_vectors import deleted_rows
    deleted = set(deleted_rows(snap.store, dv).tolist())
    positions = {r[ROW_INDEX_COLUMN] for r in rows}
    assert deleted and not positions & deleted
    assert all(r[FILE_COLUMN].endswith(".parquet") for r in rows)


def _dv_table_of_two_equal_files(spark, tmp_path):
    """Two files with the same rows (so the same size), each with row 5 marked deleted."""
    from deltalog import write_deltalake
    from deltalog.spark import operations as ops

    uri = str(tmp_path / "t")
    rows = pa.table({"id": pa.array(range(10), pa.int64())})
    write_deltalake(uri, rows, configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(uri, rows, mode="append")
    ops.delete(spark, uri, "id = 5")
    snap = Snapshot.load(uri)
    assert snap.num_files == 2 and len(set(snap.files.column("size").to_pylist())) == 1
    assert snap.files.column("deletion_vector").null_count == 0
    return uri, snap


def test_files_of_one_size_are_told_apart_by_path(spark, tmp_path):
    """The jar tells a row's file by its size only where no two files of the scan share one; here two
    do, so it goes by path, and each file's DV applies to that file alone."""
    from deltalog.spark.reader import tells_files_by_size

    from deltalog.spark.reader import deleted_rows_column

    uri, snap = _dv_table_of_two_equal_files(spark, tmp_path)
    assert not tells_files_by_size(spark, snap.files) and tells_files_by_size(spark, snap.files.slice(0, 1))
    ids = sorted(r["id"] for r in snapshot_dataframe(spark, snap).collect())
    assert ids == sorted([i for i in range(10) if i != 5] * 2)
    # as a merge tests the rows it keeps: the jar's DeletedRows, by path
    rows = files_dataframe(spark, snap, snap.files, with_file=True, with_row_index=True, with_deleted=True)
    kept = rows.filter(~deleted_rows_column(spark, snap, snap.files, by_size=False))
    assert sorted(r["id"] for r in kept.collect()) == ids


def test_a_data_file_replaced_behind_the_log_is_an_error_not_wrong_rows(spark, tmp_path):
    """A file of another size than the log records (replaced after its commit): which rows its DV
    deletes cannot be trusted, so the read fails and says so, rather than returning deleted rows."""
    import pyarrow.parquet as pq

    from deltalog import write_deltalake
    from deltalog.paths import decode_path
    from deltalog.spark import operations as ops

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array(range(10), pa.int64())}),
                    configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, uri, "id = 5")
    snap = Snapshot.load(uri)
    assert sorted(r["id"] for r in snapshot_dataframe(spark, snap).collect()) == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    path = str(tmp_path / "t" / decode_path(snap.files.column("path")[0].as_py()))
    pq.write_table(pq.read_table(path), path, compression="none", write_statistics=False)
    with pytest.raises(Exception, match="but the Delta log records"):
        snapshot_dataframe(spark, snap).collect()


@pytest.mark.parametrize("reader", ["batches", "rows"])
def test_one_scan_of_marked_and_unmarked_files_split_into_many_tasks(spark, tmp_path, spark_conf, reader):
    """Every file is read in one scan (a file without a DV flags no row). A file of many row groups
    split over many tasks, or read with row groups skipped by a filter, still loses exactly its deleted
    rows (its first and last, rows at and past row group boundaries): there the rows' positions come
    from Spark's row index, not from counting. The same through Spark's row-based Parquet reader."""
    import pyarrow.parquet as pq

    from deltalog import write, write_deltalake
    from deltalog.paths import decode_path
    from deltalog.spark import operations as ops

    uri = str(tmp_path / "t")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(write._FileSink, "ROW_GROUP_ROWS", 1000)
        rows = pa.table({"id": pa.array(range(0, 30000), pa.int64())})
        write_deltalake(uri, pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches(max_chunksize=1000)),
                        configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(uri, pa.table({"id": pa.array(range(30000, 31000), pa.int64())}), mode="append")
    first = str(tmp_path / "t" / decode_path(Snapshot.load(uri).files.column("path")[0].as_py()))
    assert pq.ParquetFile(first).metadata.num_row_groups == 30
    gone = {0, 999, 1000, 17777, 29999}
    ops.delete(spark, uri, f"id IN ({', '.join(map(str, sorted(gone)))})")
    snap = Snapshot.load(uri)
    assert snap.files.column("deletion_vector").null_count == 1
    if reader == "rows":
        spark_conf("spark.sql.parquet.enableVectorizedReader", "false")
    whole = snapshot_dataframe(spark, snap)
    # row groups 17 and up only (the others skipped by their stats): positions are not counted from 0
    assert sorted(r["id"] for r in whole.filter("id >= 17000").collect()) == [
        i for i in range(17000, 31000) if i not in gone]
    spark_conf("spark.sql.files.maxPartitionBytes", "16k")
    df = snapshot_dataframe(spark, snap)
    assert "Union" not in df._jdf.queryExecution().executedPlan().toString()
    assert df.rdd.getNumPartitions() > 2
    assert sorted(r["id"] for r in df.collect()) == [i for i in range(31000) if i not in gone]


def test_files_whose_paths_need_escaping_keep_their_deletion_vectors(spark, tmp_path):
    """Each file's DV is found by the file's path as Spark spells it (a URI, escaped) against the
    log's: partition folders holding a space, a percent sign, a plus and a non-ASCII letter, in a
    table folder with a space, lose exactly their deleted rows, as delta-rs reads them."""
    import deltalake

    from deltalog import write_deltalake
    from deltalog.spark import operations as ops

    uri = str(tmp_path / "my table")
    parts = ["a b", "c%d", "e+f", "ü=1"]
    rows = pa.table({"id": pa.array(range(40), pa.int64()), "p": pa.array([parts[i % 4] for i in range(40)])})
    write_deltalake(uri, rows, partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, uri, "id % 5 = 3")
    snap = Snapshot.load(uri)
    assert snap.files.column("deletion_vector").null_count == 0
    ours = sorted((r["id"], r["p"]) for r in snapshot_dataframe(spark, snap).collect())
    theirs = delta_rs_rows(deltalake.DeltaTable(uri))
    assert ours == sorted(zip(theirs.column("id").to_pylist(), theirs.column("p").to_pylist()))
    assert ours == [(i, parts[i % 4]) for i in range(40) if i % 5 != 3]


def test_many_files_with_deletion_vectors(spark, tmp_path):
    """Twelve files, each with its own DV (read by several threads): each loses exactly its rows."""
    from deltalog import write_deltalake
    from deltalog.spark import operations as ops

    uri = str(tmp_path / "t")
    for start in range(0, 120, 10):
        write_deltalake(uri, pa.table({"id": pa.array(range(start, start + 10), pa.int64())}),
                        mode="append", configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, uri, "id % 3 = 0")
    snap = Snapshot.load(uri)
    assert snap.num_files == 12 and snap.files.column("deletion_vector").null_count == 0
    assert sorted(r["id"] for r in snapshot_dataframe(spark, snap).collect()) == [i for i in range(120) if i % 3]
