"""Deletion vectors in the Spark reader: the native Parquet scan's row indexes, filtered by the jar's
`DeletedRows` (or, where tasks cannot load the jar, anti-joined with the deleted rows), give exactly
the rows delta-rs reads, for every DV table other writers produced."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from deltalog.errors import DeltaError
from deltalog.snapshot import Snapshot
from deltalog.spark.reader import FILE_COLUMN, ROW_INDEX_COLUMN, files_dataframe, snapshot_dataframe
from tests.engine.test_conformance import delta_rs_rows
from tests.engine.test_deletion_vectors import DV_TABLES
from tests.shared_data import CONFORMANCE, require

pytestmark = pytest.mark.spark


def _loadable(case: str):
    try:
        return Snapshot.load(str(CONFORMANCE / case))
    except DeltaError:
        return None  # refused for another feature (tests/engine/test_deletion_vectors.py checks which)


@pytest.mark.parametrize("rows_filter", ["jar", "anti_join"])
@pytest.mark.parametrize("case", DV_TABLES)
def test_spark_reads_dv_tables_as_delta_rs_does(spark, case, rows_filter, monkeypatch):
    import deltalake

    from deltalog.spark import reader

    if rows_filter == "anti_join":
        monkeypatch.setattr(reader, "has_jar_class", lambda *a: False)
    else:
        assert reader.has_jar_class(spark, "dv.DeletedRows")

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
