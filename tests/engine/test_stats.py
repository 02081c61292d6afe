import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog.errors import InvalidTableError
from deltalog.schema import from_arrow_schema
from deltalog.stats import StatsCollector, file_stats, indexed_columns
from deltalog.write import write_deltalake

from tests.support.shared_data import GOLDEN, require
UTC = dt.timezone.utc


def sample_table() -> pa.Table:
    return pa.table({
        "i": pa.array([1, 2, None], pa.int32()),
        "l": pa.array([10, -5, 7], pa.int64()),
        "f": pa.array([0.5, 0.25, None], pa.float32()),
        "d": pa.array([1.5, -2.0, 2.0]),
        "dec": pa.array([Decimal("1.23"), Decimal("-4.56"), None], pa.decimal128(10, 2)),
        "s": ["a" * 40, "b", None],
        "dt": pa.array([dt.date(2020, 1, 1), dt.date(2021, 5, 6), None]),
        "ts": pa.array([dt.datetime(2020, 1, 1, 0, 0, 0, 1500), dt.datetime(2020, 1, 2, 0, 0, 0, 2500), None],
                       pa.timestamp("us", tz="UTC")),
        "tsn": pa.array([dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2), None], pa.timestamp("us")),
        "b": [True, False, None],
        "st": pa.array([{"x": 1, "y": "q"}, None, {"x": None, "y": "r"}]),
        "arr": pa.array([[1], None, [2, 3]]),
    })


def stats_of(table, **kw):
    return json.loads(file_stats(table, from_arrow_schema(table.schema), **kw))


def test_all_types():
    s = stats_of(sample_table())
    assert s["numRecords"] == 3
    assert s["minValues"] == {
        "i": 1, "l": -5, "f": 0.25, "d": -2.0, "dec": -4.56, "s": "a" * 32, "dt": "2020-01-01",
        "ts": "2020-01-01T00:00:00.001Z", "tsn": "2020-01-01T00:00:00.000", "st": {"x": 1, "y": "q"}}
    # max timestamp rounded UP to the millisecond so it stays an upper bound
    assert s["maxValues"]["ts"] == "2020-01-02T00:00:00.003Z"
    assert s["maxValues"]["s"] == "b" and s["maxValues"]["dec"] == 1.23 and s["maxValues"]["tsn"] == "2020-01-02T00:00:00.000"
    assert "b" not in s["minValues"] and "arr" not in s["maxValues"]  # booleans, arrays: null counts only
    assert s["nullCount"] == {"i": 1, "l": 0, "f": 1, "d": 0, "dec": 1, "s": 1, "dt": 1, "ts": 1, "tsn": 1,
                              "b": 1, "st": {"x": 2, "y": 1}, "arr": 1}


def test_decimal_is_exact_json_number():
    t = pa.table({"x": pa.array([Decimal("12345678901234567890.123456789")], pa.decimal128(38, 9))})
    text = file_stats(t, from_arrow_schema(t.schema))
    assert '"minValues":{"x":12345678901234567890.123456789}' in text


def test_string_max_tie_breaker():
    long_low = "x" * 32 + "a"      # next char below U+007F
    long_high = "x" * 32 + "\u00e9"  # next char above it
    s = stats_of(pa.table({"s": [long_low]}))
    assert s["minValues"]["s"] == "x" * 32 and s["maxValues"]["s"] == "x" * 32 + "\u007f"
    s = stats_of(pa.table({"s": [long_high]}))
    assert s["maxValues"]["s"] == "x" * 32 + "\U0010ffff"
    assert s["maxValues"]["s"] > long_high
    s = stats_of(pa.table({"s": ["ab", "x" * 32]}))  # exactly 32: kept as is
    assert s["maxValues"]["s"] == "x" * 32
    s = stats_of(pa.table({"s": ["é" * 40]}), configuration={"delta.dataSkippingStringPrefixLength": "4"})
    assert s["minValues"]["s"] == "éééé" and s["maxValues"]["s"] == "éééé\U0010ffff"


def test_string_max_stays_an_upper_bound_after_u10ffff():
    """A dropped U+10FFFF has no character above it: the bound must keep it and look further (before,
    the max was below the value and delta-rs / polars filtered the row out)."""
    top = "\U0010ffff"
    for value in ["x" * 32 + top + "a", "x" * 32 + top * 3 + "\u00e9z", "x" * 31 + top * 2 + "b", "x" * 32 + top * 2]:
        s = stats_of(pa.table({"s": [value]}))
        assert s["maxValues"]["s"] >= value and s["maxValues"]["s"].encode() >= value.encode()
        assert s["minValues"]["s"] <= value
    assert stats_of(pa.table({"s": ["x" * 32 + top * 2]}))["maxValues"]["s"] == "x" * 32 + top * 2
    assert stats_of(pa.table({"s": ["x" * 32 + top + "a"]}))["maxValues"]["s"] == "x" * 32 + top + "\u007f"


def test_delta_rs_finds_a_row_whose_33rd_character_is_u10ffff(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    value = "k" * 32 + "\U0010ffff" + "tail"
    write_deltalake(str(tmp_path / "t"), pa.table({"s": [value, "a"]}))
    got = deltalake.DeltaTable(str(tmp_path / "t")).to_pyarrow_table(filters=[("s", "=", value)])
    assert got.column("s").to_pylist() == [value]


def test_nan_and_infinity_drop_bounds_only():
    s = stats_of(pa.table({"d": [1.0, float("nan")], "e": [1.0, float("inf")], "g": [1.0, None]}))
    assert "d" not in s["minValues"] and "e" not in s["maxValues"]
    assert s["minValues"]["g"] == 1.0
    assert s["nullCount"] == {"d": 0, "e": 0, "g": 1}


def test_all_null_column_has_no_bounds():
    t = pa.table({"x": pa.array([None, None], pa.int64())})
    s = stats_of(t)
    assert s["minValues"] == {} and s["nullCount"] == {"x": 2}


def test_nanosecond_timestamps_are_bounded():
    t = pa.table({"t": pa.array([1_000_000_500, 2_000_000_001], pa.timestamp("ns", tz="UTC"))})
    s = json.loads(file_stats(t, {"type": "struct", "fields": [{"name": "t", "type": "timestamp"}]}))
    assert s["minValues"]["t"] == "1970-01-01T00:00:01.000Z"
    assert s["maxValues"]["t"] == "1970-01-01T00:00:02.001Z"


def test_partition_columns_have_no_stats_and_num_indexed_cols():
    t = sample_table()
    schema = from_arrow_schema(t.schema)
    s = json.loads(file_stats(t.drop_columns(["i"]), schema, partition_columns=["i"],
                              configuration={"delta.dataSkippingNumIndexedCols": "2"}))
    assert s["nullCount"] == {"l": 0, "f": 1}
    assert list(s["minValues"]) == ["l", "f"]
    all_cols = [p for p, _ in indexed_columns(schema, [], {"delta.dataSkippingNumIndexedCols": "-1"})]
    assert len(all_cols) == 13
    assert [p for p, _ in indexed_columns(schema, [], {"delta.dataSkippingNumIndexedCols": "0"})] == []
    with pytest.raises(InvalidTableError, match="dataSkippingNumIndexedCols"):
        indexed_columns(schema, [], {"delta.dataSkippingNumIndexedCols": "many"})


def test_stats_columns_setting():
    schema = from_arrow_schema(sample_table().schema)
    cols = indexed_columns(schema, [], {"delta.dataSkippingStatsColumns": "dec, st.y, `s`"})
    assert [p for p, _ in cols] == [("dec",), ("s",), ("st", "y")]
    cols = indexed_columns(schema, [], {"delta.dataSkippingStatsColumns": "st"})
    assert [p for p, _ in cols] == [("st", "x"), ("st", "y")]


def test_more_than_32_columns_default():
    t = pa.table({f"c{i}": [i] for i in range(40)})
    s = stats_of(t)
    assert len(s["nullCount"]) == 32 and "c31" in s["minValues"] and "c32" not in s["minValues"]


def test_incremental_equals_whole():
    t = sample_table()
    schema = from_arrow_schema(t.schema)
    c = StatsCollector(schema)
    for i in range(t.num_rows):
        c.update(t.slice(i, 1).to_batches()[0])
    assert c.to_json() == file_stats(t, schema)
    assert c.num_records == 3


def test_missing_column_counts_as_nulls():
    schema = from_arrow_schema(pa.schema([("a", pa.int64()), ("b", pa.string())]))
    s = json.loads(file_stats(pa.table({"a": [1, 2]}), schema))
    assert s["nullCount"] == {"a": 0, "b": 2}


def _instant(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def test_same_as_delta_rs(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    t = sample_table().drop_columns(["arr"])
    deltalake.write_deltalake(str(tmp_path), t)
    adds = [json.loads(line)["add"] for line in (tmp_path / "_delta_log" / "00000000000000000000.json")
            .read_text().splitlines() if line.startswith('{"add"')]
    theirs = json.loads(adds[0]["stats"])
    ours = stats_of(t)
    assert ours["numRecords"] == theirs["numRecords"]
    assert ours["nullCount"] == theirs["nullCount"]
    for side in ("minValues", "maxValues"):
        for col in ("i", "l", "f", "d", "dec", "dt", "st"):
            assert ours[side][col] == theirs[side][col], (side, col)
        # delta-rs keeps the full string; ours is the 32-char prefix (plus tie-breaker for max)
        assert theirs[side]["s"].startswith(ours[side]["s"].rstrip("\u007f\U0010ffff"))
    assert _instant(ours["minValues"]["ts"]) <= _instant(theirs["minValues"]["ts"])
    assert _instant(ours["maxValues"]["ts"]) >= _instant(theirs["maxValues"]["ts"])
    assert _instant(ours["minValues"]["tsn"]) == _instant(theirs["minValues"]["tsn"])


@pytest.mark.usefixtures("golden")
def test_same_as_delta_spark_golden():
    table = GOLDEN / "data-skipping-basic-stats-all-types"
    log = (table / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    actions = [json.loads(line) for line in log]
    schema = json.loads(next(a for a in actions if "metaData" in a)["metaData"]["schemaString"])
    for add in (a["add"] for a in actions if "add" in a):
        theirs = json.loads(add["stats"])
        data = pq.read_table(table / add["path"])
        ours = json.loads(file_stats(data, schema))
        assert ours["numRecords"] == theirs["numRecords"]
        if not theirs["numRecords"]:
            continue
        assert ours["nullCount"] == theirs["nullCount"]
        for side in ("minValues", "maxValues"):
            for col, value in theirs[side].items():
                if col == "as_timestamp":
                    assert _instant(ours[side][col]) == _instant(value)
                else:
                    assert ours[side][col] == value, (side, col)


def test_footer_stats_equal_data_stats(tmp_path):
    t = sample_table().drop_columns(["arr"])
    schema = from_arrow_schema(t.schema)
    path = tmp_path / "f.parquet"
    pq.write_table(t, path, row_group_size=2)
    from deltalog.stats import parquet_file_stats
    from_footer = json.loads(parquet_file_stats(pq.read_metadata(path), schema))
    from_data = json.loads(file_stats(t, schema))
    # Arrow's writer skips NaN in its statistics, so float bounds from its footers are not trusted
    for side in ("minValues", "maxValues"):
        for col in ("f", "d"):
            del from_data[side][col]
    assert from_footer == from_data


def test_footer_stats_nan_and_missing_stats(tmp_path):
    from deltalog.stats import parquet_file_stats
    t = pa.table({"d": [1.0, float("nan")], "s": ["x" * 10, None], "arr": [[1], None]})
    schema = from_arrow_schema(t.schema)
    path = tmp_path / "f.parquet"
    pq.write_table(t, path, write_statistics=["d", "arr.list.element"])
    s = json.loads(parquet_file_stats(pq.read_metadata(path), schema))
    assert s["numRecords"] == 2
    assert "d" not in s["minValues"] and s["nullCount"] == {"d": 0}  # s: no stats written; arr: unknown
