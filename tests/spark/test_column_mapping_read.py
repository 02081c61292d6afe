"""Column mapping read: every table in ../shared/conformance whose log uses it (Delta Lake's golden
tables, delta-rs's, delta-kernel-rs's; `name` and `id` modes, partitioned, nested, with DVs and CDF)
reads as delta-rs's DataFusion scan reads it, in the pure-Arrow reader and in Spark."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from deltalog.errors import DeltaError
from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark.reader import snapshot_dataframe
from tests.engine.test_conformance import delta_rs_rows
from tests.support.shared_data import CONFORMANCE, require, tables_naming

pytestmark = pytest.mark.spark

CM_TABLES = tables_naming("delta.columnMapping.mode")


def _plain(v):
    """Spark gives naive UTC datetimes (session time zone UTC), delta-rs aware ones; maps come as
    dicts from Spark and as pairs from Arrow."""
    if isinstance(v, dt.datetime) and v.tzinfo:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(v, dict):
        return sorted((k, _plain(x)) for k, x in v.items())
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return sorted((k, _plain(x)) for k, x in v)
        return [_plain(x) for x in v]
    return v


def _canonical(rows: list[dict]) -> list[str]:
    return sorted(repr(sorted((k, _plain(v)) for k, v in r.items())) for r in rows)


def test_there_are_column_mapping_tables():
    require(CONFORMANCE)
    assert len(CM_TABLES) >= 15, CM_TABLES


@pytest.mark.parametrize("case", CM_TABLES)
def test_column_mapping_table_reads_as_delta_rs_reads_it(spark, case):
    import deltalake

    path = str(require(CONFORMANCE / case))
    try:
        snap = Snapshot.load(path)
    except DeltaError as refused:
        # only for a feature still missing, which the message names; never column mapping
        assert "columnMapping" not in str(refused) and "needs" in str(refused), refused
        return
    try:
        theirs = delta_rs_rows(deltalake.DeltaTable(path))
    except Exception:  # noqa: BLE001 - delta-rs cannot read it either (e.g. data files left out)
        pytest.skip(f"delta-rs cannot read {case}")
    ours = read_table(snap)
    assert ours.column_names == theirs.column_names
    assert _canonical(ours.to_pylist()) == _canonical(theirs.to_pylist())

    df = snapshot_dataframe(spark, snap)
    assert df.columns == theirs.column_names
    # through Arrow: collect() cannot build Rows of maps whose keys are arrays
    assert _canonical(df.toArrow().to_pylist()) == _canonical(theirs.to_pylist())


def test_filters_on_mapped_columns_skip_by_physical_stats():
    """Stats and partition values are keyed by physical names: a filter on a logical name must still
    prune files, and never drop a matching one."""
    from deltalog.expressions import files_matching

    case = "wild/deltars/table_with_column_mapping"  # partitioned by `Company Very Short`
    snap = Snapshot.load(str(require(CONFORMANCE / case)))
    assert files_matching(snap, "`Company Very Short` = 'BME'").num_rows == 1 < snap.num_files
    assert files_matching(snap, "`Super Name` = 'Anthony Johnson'").num_rows >= 1
    assert files_matching(snap, "`Super Name` = 'Aaron'").num_rows == 0  # below every file's min
    case = "delta-golden/data-skipping-basic-stats-all-types-columnmapping-name"
    snap = Snapshot.load(str(require(CONFORMANCE / case)))
    assert files_matching(snap, "as_int = 0").num_rows == snap.num_files
    assert files_matching(snap, "as_int = 12345").num_rows == 0
