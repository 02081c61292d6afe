"""Type widening read: files written before a column was widened (byte -> int -> long, float ->
double, decimal precision, date -> timestamp_ntz, nested too) read in the table's types, in Spark as in
the pure-Arrow reader, with the values the files hold."""
from __future__ import annotations

import pytest

from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark.reader import snapshot_dataframe
from tests.support.shared_data import CONFORMANCE, require, tables_naming

pytestmark = pytest.mark.spark

WIDENED = tables_naming('"typeWidening')


@pytest.mark.parametrize("case", WIDENED)
def test_spark_reads_widened_columns_as_the_arrow_reader_does(spark, case):
    snap = Snapshot.load(str(require(CONFORMANCE / case)))
    ours = read_table(snap)
    df = snapshot_dataframe(spark, snap)
    theirs = df.toArrow()
    assert theirs.num_rows == ours.num_rows > 0
    assert [f.name for f in theirs.schema] == ours.column_names

    def canonical(rows):
        return sorted(repr(sorted(r.items())) for r in rows)

    assert canonical(theirs.cast(ours.schema).to_pylist()) == canonical(ours.to_pylist())
