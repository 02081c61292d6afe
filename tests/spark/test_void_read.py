"""A `void` column (Spark's type of a column that is only ever NULL, stored in no data file) reads as
NULL in Spark and in pyarrow, as delta-rs reads it."""
from __future__ import annotations

import deltalake
import pytest

from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark.reader import snapshot_dataframe
from tests.support.shared_data import WILD, require

pytestmark = pytest.mark.spark


def test_void_column_reads_null(spark):
    uri = str(require(WILD / "kernel/void-column"))
    expected = sorted((r["id"], r["void_col"]) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist())
    assert expected == [(1, None), (2, None), (3, None)]
    snap = Snapshot.load(uri)
    assert sorted((r["id"], r["void_col"]) for r in read_table(snap).to_pylist()) == expected
    df = snapshot_dataframe(spark, snap)
    assert df.schema["void_col"].dataType.typeName() == "void"
    assert sorted(tuple(r) for r in df.collect()) == expected
