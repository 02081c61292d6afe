"""Data skipping: predicates from Python and SQL, pruning on partition values and min/max/nullCount
stats, never a wrong answer (a file holding a matching row is always kept)."""
import datetime as dt
import json
import os
import random

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog.expressions import (
    ALWAYS, And, Compare, In, IsNull, Or, bind, col, parse_sql_predicate, prune, prune_snapshot,
)
from deltalog.snapshot import Snapshot

SCHEMA = {"type": "struct", "fields": [
    {"name": "x", "type": "long", "nullable": True, "metadata": {}},
    {"name": "s", "type": "string", "nullable": True, "metadata": {}},
    {"name": "d", "type": "date", "nullable": True, "metadata": {}},
    {"name": "t", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "f", "type": "double", "nullable": True, "metadata": {}},
    {"name": "p", "type": "integer", "nullable": True, "metadata": {}},
    {"name": "ps", "type": "string", "nullable": True, "metadata": {}},
]}


def files_table(rows):
    """rows: (partition_values dict, stats dict or None)."""
    return pa.table({
        "path": [f"f{i}" for i in range(len(rows))],
        "partition_values": pa.array([list(pv.items()) for pv, _ in rows], pa.map_(pa.string(), pa.string())),
        "stats": pa.array([json.dumps(s) if s is not None else None for _, s in rows], pa.string()),
    })


def stats(n, mn, mx, nulls):
    return {"numRecords": n, "minValues": mn, "maxValues": mx, "nullCount": nulls}


FILES = files_table([
    ({"p": "1", "ps": "a"}, stats(10, {"x": 1, "s": "apple", "d": "2020-01-01", "t": "2020-01-01T00:00:00.000Z", "f": 0.5},
                                  {"x": 10, "s": "apricot", "d": "2020-01-31", "t": "2020-01-01T10:00:00.123Z", "f": 9.5},
                                  {"x": 0, "s": 0, "d": 0, "t": 0, "f": 0})),
    ({"p": "2", "ps": "b"}, stats(10, {"x": 11, "s": "b" * 32}, {"x": 20, "s": "b" * 32 + "\u007f"},
                                  {"x": 3, "s": 0, "d": 10, "t": 10, "f": 10})),
    ({"p": None, "ps": None}, stats(5, {}, {}, {"x": 5, "s": 5, "d": 5, "t": 5, "f": 5})),  # all null
    ({"p": "3", "ps": "c"}, None),  # no stats: always kept unless partitions rule it out
])


@pytest.mark.parametrize("predicate, expected", [
    ("x = 5", [True, False, False, True]),
    ("x > 10", [False, True, False, True]),
    ("x >= 10", [True, True, False, True]),
    ("x < 1", [False, False, False, True]),
    ("x <= 1", [True, False, False, True]),
    ("x != 1", [True, True, False, True]),
    ("x IN (0, 25)", [False, False, False, True]),
    ("x IN (15)", [False, True, False, True]),
    ("x IS NULL", [False, True, True, True]),
    ("x IS NOT NULL", [True, True, False, True]),
    ("p = 1", [True, False, False, False]),
    ("p IS NULL", [False, False, True, False]),
    ("p IS NOT NULL", [True, True, False, True]),
    ("p IN (2, 3)", [False, True, False, True]),
    ("p NOT IN (2, 3)", [True, False, False, False]),
    ("ps > 'a'", [False, True, False, True]),
    ("p > 1 AND x < 15", [False, True, False, True]),
    ("x = 1 OR p = 3", [True, False, False, True]),
    ("(x = 1 OR x = 15) AND ps = 'b'", [False, True, False, False]),
    ("d >= '2020-02-01'", [False, False, False, True]),  # file 2's d is all null
    ("d = DATE '2020-01-15'", [True, False, False, True]),
    ("s = 'apple'", [True, False, False, True]),
    ("s > 'az'", [False, True, False, True]),
    ("s LIKE 'a%'", [True, True, True, True]),           # unknown form: keep all
    ("x BETWEEN 12 AND 13", [False, True, False, True]),
    ("f > 9.9", [False, False, False, True]),
    ("17 < x", [False, True, False, True]),
])
def test_sql_predicates(predicate, expected):
    assert prune(FILES, predicate, SCHEMA, ["p", "ps"]).to_pylist() == expected


def test_truncated_string_max_is_only_an_upper_bound():
    # File 2: max is 32 'b's plus the tie-breaker; values may be longer than 32 characters.
    longer = "b" * 40
    assert prune(FILES, col("s") == longer, SCHEMA, ["p", "ps"]).to_pylist()[1] is True
    assert prune(FILES, col("s") > longer, SCHEMA, ["p", "ps"]).to_pylist()[1] is True
    # A max truncated WITHOUT tie-breaker (other writers): still an upper bound for its prefix only.
    f = files_table([({}, stats(3, {"s": "a" * 32}, {"s": "a" * 32}, {"s": 0}))])
    assert prune(f, col("s") == "a" * 33, SCHEMA, []).to_pylist() == [True]
    assert prune(f, col("s") >= "a" * 32 + "zzz", SCHEMA, []).to_pylist() == [True]
    assert prune(f, col("s") > "a" * 31 + "b", SCHEMA, []).to_pylist() == [False]
    # A short max is exact.
    g = files_table([({}, stats(3, {"s": "abc"}, {"s": "abd"}, {"s": 0}))])
    assert prune(g, col("s") == "abda", SCHEMA, []).to_pylist() == [False]


def test_timestamp_max_is_truncated_to_milliseconds():
    # The max 10:00:00.123 covers values up to 10:00:00.123999.
    t = dt.datetime(2020, 1, 1, 10, 0, 0, 123500, tzinfo=dt.timezone.utc)
    assert prune(FILES, col("t") == t, SCHEMA, ["p", "ps"]).to_pylist()[0] is True
    later = dt.datetime(2020, 1, 1, 10, 0, 1, tzinfo=dt.timezone.utc)
    assert prune(FILES, col("t") >= later, SCHEMA, ["p", "ps"]).to_pylist()[0] is False


def test_nulls_and_missing_stats():
    # All-null column: no comparison matches; IS NULL does.
    assert prune(FILES, col("x") == 5, SCHEMA, ["p", "ps"]).to_pylist()[2] is False
    assert prune(FILES, col("x").is_null(), SCHEMA, ["p", "ps"]).to_pylist()[2] is True
    # NaN in stats or literal: unknown, kept
    f = files_table([({}, stats(2, {"f": "NaN"}, {"f": "NaN"}, {"f": 0}))])
    assert prune(f, col("f") > 1.0, SCHEMA, []).to_pylist() == [True]
    assert prune(FILES, col("f") > float("nan"), SCHEMA, ["p", "ps"]).to_pylist() == [True] * 4
    # Column absent from the schema, or a literal of the wrong type: keep
    assert prune(FILES, col("nope") == 1, SCHEMA, ["p"]).to_pylist() == [True] * 4
    assert prune(FILES, col("x") == "abc", SCHEMA, ["p"]).to_pylist() == [True] * 4
    # x = NULL is never true
    assert prune(FILES, "x = NULL", SCHEMA, ["p"]).to_pylist() == [False] * 4


def test_python_expressions_and_partition_matching():
    e = ((col("p") == 1) | col("p").isin([3])) & col("x").is_not_null()
    assert isinstance(e, And) and isinstance(e.left, Or)
    assert prune(FILES, e, SCHEMA, ["p", "ps"]).to_pylist() == [True, False, False, True]
    assert e.matches_partition({"p": "1"}) and not e.matches_partition({"p": "2"})
    assert not e.matches_partition({"p": None})
    bound = bind("p >= 2 AND ps = 'b'", SCHEMA, ["p", "ps"])
    assert bound.matches_partition({"p": "2", "ps": "b"})
    assert not bound.matches_partition({"p": "10", "ps": "c"})
    assert bind("p >= 2", SCHEMA, ["p"]).matches_partition({"p": "10"})  # numeric, not string order


def test_parser_forms():
    assert parse_sql_predicate("x IS NULL") == IsNull("x")
    assert parse_sql_predicate("`my col` = 'it''s'") == Compare("my col", "=", "it's")
    assert parse_sql_predicate("s IN ('a','b')") == In("s", ("a", "b"))
    assert parse_sql_predicate("1 < x") == Compare("x", ">", 1)
    assert parse_sql_predicate("NOT (x = 1)") is ALWAYS
    assert parse_sql_predicate("x = y") is ALWAYS
    assert parse_sql_predicate("x = 1 AND f(y) > 2") == Compare("x", "=", 1)
    assert parse_sql_predicate("x = 1 OR f(y) > 2") is ALWAYS
    assert parse_sql_predicate("") is ALWAYS
    assert parse_sql_predicate("x = 1 AND d >= '2020-01-01' OR s IN ('a','b')").to_sql()


def _file_rows(root, snapshot):
    out = []
    for uri, pv in zip(snapshot.file_uris(), snapshot.files.column("partition_values").to_pylist()):
        t = pq.read_table(uri)
        for k, v in (pv or []):
            t = t.append_column(k, pa.array([None if v is None else int(v)] * t.num_rows, pa.int64()))
        out.append(t)
    return out


def test_never_prunes_a_matching_file_of_a_delta_rs_table(tmp_path):
    """Random predicates over a table delta-rs wrote (its stats, its partition values): every file
    that holds a matching row is kept, and a good share of the others is skipped."""
    rng = random.Random(7)
    n = 4000
    data = pa.table({
        "x": pa.array([rng.randint(0, 1000) if rng.random() > 0.05 else None for _ in range(n)], pa.int64()),
        "s": pa.array(["common-prefix-" + "z" * 30 + f"{rng.randint(0, 999):03d}" for _ in range(n)]),
        "f": pa.array([rng.random() * 100 for _ in range(n)]),
        "p": pa.array([rng.randint(0, 3) for _ in range(n)], pa.int64()),
    })
    data = data.sort_by([("p", "ascending"), ("x", "ascending")])
    uri = str(tmp_path / "t")
    for i in range(0, n, 400):
        deltalake.write_deltalake(uri, data.slice(i, 400), partition_by=["p"], mode="append")
    snap = Snapshot.load(uri)
    per_file = _file_rows(uri, snap)
    skipped_total = 0
    for trial in range(60):
        a, b = sorted(rng.randint(0, 1000) for _ in range(2))
        choice = trial % 6
        if choice == 0:
            sql, fn = f"x = {a}", lambda t: pc.equal(t["x"], a)
        elif choice == 1:
            sql, fn = f"x >= {a} AND x < {b}", lambda t: pc.and_(pc.greater_equal(t["x"], a), pc.less(t["x"], b))
        elif choice == 2:
            sql, fn = f"x IN ({a}, {b}) OR p = 2", lambda t: pc.or_(pc.is_in(t["x"], pa.array([a, b])), pc.equal(t["p"], 2))
        elif choice == 3:
            v = "common-prefix-" + "z" * 30 + f"{a:03d}"[:3]
            sql, fn = f"s = '{v}'", lambda t: pc.equal(t["s"], v)
        elif choice == 4:
            sql, fn = "x IS NULL AND p <= 1", lambda t: pc.and_(pc.is_null(t["x"]), pc.less_equal(t["p"], 1))
        else:
            sql, fn = f"f > {a / 10} AND p IN (0, 3)", lambda t: pc.and_(pc.greater(t["f"], a / 10), pc.is_in(t["p"], pa.array([0, 3])))
        mask = prune_snapshot(snap, sql).to_pylist()
        for keep, t in zip(mask, per_file):
            matches = pc.any(pc.fill_null(fn(t), False)).as_py()
            assert keep or not matches, f"{sql}: pruned a file holding matching rows"
        skipped_total += mask.count(False)
    assert skipped_total > 0.3 * 60 * len(per_file)


@pytest.mark.parametrize("predicate, expected", [
    # quoted and backquoted identifiers, string literals holding SQL words and quotes
    ("`x` = 5", [True, False, False, True]),
    ("`s` = 'apple and apricot'", [True, False, False, True]),
    ("s = 'it''s' or s = 'b or c'", [False, False, False, True]),
    ("s = 'a\\'b'", [False, False, False, True]),
    # nested parentheses, OR, IN lists, typed literals and casts
    ("((x = 5) or (x = 15)) and ((p = 1) or (p = 2))", [True, True, False, False]),
    ("x in (5, 15) and not (p in (2))", [True, False, False, True]),
    ("d = date '2020-01-15' and x < 100L", [True, False, False, True]),
    ("x = cast('15' as bigint)", [True, True, True, True]),
    ("x >= -5 and x <= 10", [True, False, False, True]),
    ("x <= 1e1", [True, True, True, True]),  # a float literal on a long column: not coerced, kept
    # forms the skipper cannot use keep every file they apply to, never drop one
    ("abs(x) = 15", [True, True, True, True]),
    ("x + 1 = 16", [True, True, True, True]),
    ("x = 15 or abs(x) = 3", [True, True, True, True]),
    ("x = 15 and abs(x) = 3", [False, True, False, True]),
    ("s like 'ap%'", [True, True, True, True]),
    ("x in (select 1)", [True, True, True, True]),
    ("not (x = 5 and s = 'q')", [True, True, True, True]),
    ("this is not sql at all ((", [True, True, True, True]),
])
def test_sql_forms_parsed_by_sqlglot(predicate, expected):
    assert prune(FILES, predicate, SCHEMA, ["p", "ps"]).to_pylist() == expected


def test_sql_forms_agree_with_spark(spark):
    """Every predicate above, evaluated by Spark over rows drawn from each file's range: the files the
    skipper drops hold no row Spark would match."""
    rows = [(5, "apple and apricot", dt.date(2020, 1, 15), 1), (15, "b" * 32, None, 2), (None, None, None, None)]
    df = spark.createDataFrame(rows, "x long, s string, d date, p int")
    for predicate in ["`x` = 5", "s = 'it''s' or s = 'b or c'", "((x = 5) or (x = 15)) and ((p = 1) or (p = 2))",
                      "x in (5, 15) and not (p in (2))", "d = date '2020-01-15' and x < 100L",
                      "x >= -5 and x <= 10", "x = 15 and abs(x) = 3"]:
        kept = prune(FILES, predicate, SCHEMA, ["p", "ps"]).to_pylist()
        for i, row in enumerate(rows):
            if spark.createDataFrame([row], df.schema).filter(predicate).count():
                assert kept[i], (predicate, row)
