"""The in-process path is Spark, or not at all: a differential fuzz.

Random models and data tests (tests/support/sql_fuzz.py), within the model rules and just outside them,
over tables holding each admitted type's edge values, are computed as a small model or a data test is in
the dbt process (driver_queries, spark_analysis, small_models) and by Spark in ANSI mode, the reference.
Where the dbt process gives an answer, Spark must give the same: the schema (names and Delta types), the
rows (as a multiset; a double within 1e-12 of Spark's, for sums, whose last digits follow the order rows
are added in), and the failure (a query Spark fails must not be answered here). A refusal is never a
difference: Spark builds the model. Data tests run twice more after new rows land, the second time with
answer reuse on.

CI runs the seeds 0..MODELS-1 and 0..TESTS-1; `DELTALOG_FULL_SUITE=1` runs 10× as many from a fresh base
seed, printed; `DELTALOG_DIFFERENTIAL_SEED=N` re-runs from base N, `DELTALOG_DIFFERENTIAL_COUNT=N` N of
each. A difference fails with the seed and SQL."""
from __future__ import annotations

import math
import os
import random
from decimal import Decimal

import pytest

from deltalog import write_deltalake
from deltalog.errors import DeltaError
from deltalog.schema import check_column_names, to_arrow_schema
from dbt.adapters.deltalog import driver_queries, small_models
from dbt.adapters.deltalog.sql_gateway import answer_small_query, execute, read_statement, relations_of_sql
from dbt.adapters.deltalog.warehouse import Warehouse
from tests.support import sql_fuzz
from tests.support.selection import FULL

COUNT = int(os.environ.get("DELTALOG_DIFFERENTIAL_COUNT", 10_000 if FULL else 1_000))
MODELS = TESTS = COUNT
BATCH = 25  # queries Spark runs in one job
BASE = int(os.environ.get("DELTALOG_DIFFERENTIAL_SEED", random.randrange(10**6) if FULL else 0))

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, spark):
    assert spark.conf.get("spark.sql.ansi.enabled") == "true", "Spark's reference is ANSI mode, the default"
    root = tmp_path_factory.mktemp("differential")
    for name, rows in sql_fuzz.tables().items():
        write_deltalake(str(root / "fz" / name), rows)
    wh = Warehouse(str(root))
    for name, sql in sql_fuzz.VIEWS.items():
        wh.write_view_sql("fz", name, sql)
    # a job over a few rows: one shuffle partition and no adaptive plan take a third off Spark's time,
    # and change no result (a double sum's last digits are compared within 1e-12)
    kept = {key: spark.conf.get(key) for key in ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")}
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    yield wh
    for key, value in kept.items():
        spark.conf.set(key, value)


def _wrap(sql: str) -> str:
    """dbt's wrapper of a data test's SQL."""
    return (f"select count(*) as failures, count(*) != 0 as should_warn, count(*) != 0 as should_error "
            f"from (\n{sql}\n) dbt_internal_test")


def _here_model(spark, warehouse, sql: str):
    """(schema, rows) as a small model is built in the dbt process (small_models.build), or None when
    refused there. Spark's analysis stands in where the schema is not worked out here, as it does there."""
    from deltalog.column_mapping import names_needing_mapping
    from deltalog.spark.dml.write import dataframe_schema

    statement = read_statement(None, warehouse, sql)
    try:
        query = driver_queries.model_query(warehouse, statement.text, statement.relations, relations_of_sql)
        try:
            schema = query.delta_schema()
            check_column_names(schema, "fz.model")
        except (driver_queries.NotHere, DeltaError):
            try:
                schema = dataframe_schema(execute(spark, warehouse, sql).dataframe, "fz.model")
            except Exception:  # noqa: BLE001 - Spark's analysis refuses it: the model fails as Spark fails it
                return None
        if names_needing_mapping(schema):
            return None
        rows, _ = query.run()
        data = small_models._as_spark_types(rows, to_arrow_schema(schema))
    except (driver_queries.NotHere, small_models.NotHere):
        return None
    return schema, data.to_pylist()


def _spark_model(spark, warehouse, sql: str):
    """(schema, rows) of Spark's build, or the error Spark gives."""
    return _spark_models(spark, warehouse, [sql])[0]


def _spark_models(spark, warehouse, sqls: list) -> list:
    """Spark's (schema, rows), or its error, for each query: each analysed alone and, to keep the fuzz's
    Spark time small, all run in one job (their rows as JSON, unioned); when that job fails (one query's
    overflow fails them all), each runs alone."""
    from functools import reduce

    from pyspark.sql import functions as F

    from deltalog.spark.dml.write import dataframe_schema

    out, frames = {}, {}
    for i, sql in enumerate(sqls):
        try:
            df = execute(spark, warehouse, sql).dataframe
            out[i] = dataframe_schema(df, "fz.model")
            frames[i] = df.select(F.lit(i).alias("q"), F.to_json(F.struct(*[df[c] for c in df.columns]),
                                                                 {"ignoreNullFields": "false"}).alias("j"))
        except Exception as exc:  # noqa: BLE001 - any failure of Spark's is the reference's answer
            out[i] = _error(exc)
    if not frames:
        return [out[i] for i in range(len(sqls))]
    try:
        rows = reduce(lambda a, b: a.unionAll(b), frames.values()).collect()
    except Exception as exc:  # noqa: BLE001
        if len(frames) == 1:
            out[next(iter(frames))] = _error(exc)
            return [out[i] for i in range(len(sqls))]
        return [out[i] if i not in frames else _spark_model(spark, warehouse, sqls[i]) for i in range(len(sqls))]
    by_query: dict = {i: [] for i in frames}
    for row in rows:
        by_query[row.q].append(_from_json(row.j, out[row.q]))
    return [(out[i], by_query[i]) if i in frames else out[i] for i in range(len(sqls))]


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"


def _from_json(text: str, schema: dict) -> dict:
    import datetime as dt
    import json

    values = json.loads(text, parse_float=Decimal)
    row = {}
    for field in schema["fields"]:
        v, kind = values.get(field["name"]), field["type"]
        if v is not None:
            if kind in ("double", "float"):
                v = float(v)
            elif kind.startswith("decimal"):
                v = Decimal(str(v))
            elif kind == "date":
                v = dt.date.fromisoformat(v)
        row[field["name"]] = v
    return row


def _value(v):
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else ("float", v, math.copysign(1, v))
    if isinstance(v, Decimal):
        return ("decimal", v.normalize())
    return (type(v).__name__, v)


def _same_rows(here: list, spark: list, limited: bool) -> bool:
    if len(here) != len(spark):
        return False
    if limited:  # a LIMIT without ORDER BY: which rows is either engine's choice
        return True
    key = lambda row: repr([("float", f"{v:.9g}") if isinstance(v, float) else _value(v)  # noqa: E731
                            for v in row.values()])
    for a, b in zip(sorted(here, key=key), sorted(spark, key=key)):
        if list(a) != list(b):  # names, in order
            return False
        for x, y in zip(a.values(), b.values()):
            if isinstance(x, float) and isinstance(y, float) and not (math.isnan(x) or math.isnan(y)):
                if x != y and not math.isclose(x, y, rel_tol=1e-12):
                    return False
                if x == 0 and y == 0 and math.copysign(1, x) != math.copysign(1, y):
                    return False
            elif _value(x) != _value(y):
                return False
    return True


def _differences(spark, warehouse, sqls: list):
    """For each query, (what differs between the dbt process's model and Spark's, or None; whether it
    was built here)."""
    here = [_here_model(spark, warehouse, sql) for sql in sqls]
    built = [i for i, h in enumerate(here) if h is not None]
    references = dict(zip(built, _spark_models(spark, warehouse, [sqls[i] for i in built])))
    out = []
    for i, sql in enumerate(sqls):
        out.append((None if here[i] is None else _difference(here[i], references[i], sql), here[i] is not None))
    return out


def _difference(here, reference, sql: str):
    if isinstance(reference, str):
        return f"Spark fails it ({reference}); here it is committed"
    if here[0] != reference[0]:
        return f"schema here {_types(here[0])}, Spark's {_types(reference[0])}"
    if not _same_rows(here[1], reference[1], " limit " in sql):
        return f"rows here {here[1][:5]}, Spark's {reference[1][:5]}"
    return None


def _types(schema: dict) -> str:
    return ", ".join(f"{f['name']} {f['type']}" for f in schema["fields"])


def _fuzz(seeds: list, make_sql, compare, label: str = "") -> tuple:
    """(each difference with its seed and SQL, how many were answered here) of the queries `make_sql` makes
    of `seeds`, compared BATCH at a time by `compare` (`_differences` or `_test_differences`)."""
    differences, answered = [], 0
    for first in range(0, len(seeds), BATCH):
        batch = seeds[first:first + BATCH]
        sqls = [make_sql(seed) for seed in batch]
        for seed, sql, (why, here) in zip(batch, sqls, compare(sqls)):
            answered += here
            if why:
                differences.append(f"seed {seed}{label}: {sql}\n    {why}")
    return differences, answered


def test_models_built_here_are_spark_s(spark, warehouse):
    print(f"differential fuzz: {MODELS} models from seed {BASE}")
    differences, answered = _fuzz(list(range(BASE, BASE + MODELS)), sql_fuzz.model,
                                  lambda sqls: _differences(spark, warehouse, sqls))
    print(f"{answered} of {MODELS} built here")
    assert not differences, f"{len(differences)} models differ from Spark's:\n" + "\n".join(differences[:30])
    assert answered >= MODELS // 5, f"only {answered} of {MODELS} models were built here: the fuzz proves little"


def _test_differences(spark, warehouse, sqls: list, reuse: bool = False):
    """For each data test, (what differs between its verdict here and Spark's, or None; whether it was
    answered here)."""
    here = [answer_small_query(warehouse, _wrap(sql), reuse=reuse) for sql in sqls]
    answered = [i for i, h in enumerate(here) if h is not None]
    references = dict(zip(answered, _spark_models(spark, warehouse, [_wrap(sqls[i]) for i in answered])))
    out = []
    for i, h in enumerate(here):
        if h is None:
            out.append((None, False))
            continue
        reference = references[i]
        if isinstance(reference, str):
            out.append((f"Spark fails it ({reference}); here: {h.rows}", True))
            continue
        spark_rows = [tuple(r.values()) for r in reference[1]]
        out.append((None if [tuple(r) for r in h.rows] == spark_rows else f"here {h.rows}, Spark {spark_rows}",
                    True))
    return out


def test_data_tests_answered_here_are_spark_s(spark, warehouse, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # answer reuse's own folder
    print(f"differential fuzz: {TESTS} data tests from seed {BASE}")
    seeds = list(range(BASE, BASE + TESTS))
    differences, answered = _fuzz(seeds, sql_fuzz.data_test, lambda sqls: _test_differences(spark, warehouse, sqls))
    # new rows land; each test over the changed table is answered anew, then reused
    import pyarrow as pa

    calm = sql_fuzz.tables()["calm"]
    write_deltalake(warehouse.table_path("fz", "calm"), pa.Table.from_pylist(sql_fuzz.NEW_ROWS, schema=calm.schema),
                    mode="append")
    later = [s for s in seeds if "calm" in sql_fuzz.data_test(s)][: max(50, TESTS // 10)]
    for round_ in ("after new data", "reused"):
        again = lambda sqls: _test_differences(spark, warehouse, sqls, reuse=True)  # noqa: E731
        differences += _fuzz(later, sql_fuzz.data_test, again, f" ({round_})")[0]
    print(f"{answered} of {TESTS} answered here")
    assert not differences, f"{len(differences)} data tests differ from Spark's:\n" + "\n".join(differences[:30])
    assert answered >= TESTS // 5, f"only {answered} of {TESTS} data tests were answered here"


# What differed before the rules were mended (found by this fuzz and by hand): each is now Spark's table,
# or refused (Spark builds it).
ONCE_DIFFERED = {
    "a sum past a bigint inside arithmetic": ("select sum(t.l) + 1 - 1 as s from fz.edge t where t.id = 1", True),
    "a sum past a bigint, then a double": ("select sum(t.l) * 2 / 2 as s from fz.edge t where t.id = 1", True),
    "a total past a bigint, divided": ("select sum(t.l) / 3 as s from fz.edge t where t.id in (1, 4)", True),
    "a running total that may pass a bigint": ("select sum(t.l) as s from fz.edge t where t.id in (1, 2, 4)", True),
    "a sum past a bigint in a group HAVING leaves out": (
        "select t.day as g, (sum(coalesce(t.l, t.id)) * 2 / 2) as c1 from fz.edge t group by t.day "
        "having (min(t.s) / 100.0) > 2147483647", True),
    "a sum in a subquery, whose groups an outer query may leave out": (
        "select q.s from (select t.day as g, sum(t.l) as s from fz.edge t group by t.day) q where q.g is not null",
        True),
    "a sum within a bigint": ("select t.k as g, sum(t.l) + 1 as s, sum(t.b) * 2 as b2 from fz.calm t group by t.k",
                              False),
    "an int literal over a decimal literal": ("select 7 / 100.0 as a, 12345 / 10.00 as b from fz.calm t", False),
    "a negative literal over a decimal literal": ("select (-3) / 100.00 as a, -3 / 1.0 as b from fz.calm t", False),
    "a minus of a literal over a decimal literal": ("select -(3) / 100.0 as a from fz.calm t", False),
    "a repeated column name in a subquery": (
        "select q.name from (select * from fz.calm c join fz.dim d on c.k = d.k) q", True),
    "a view whose columns repeat a name": ("select k, name from fz.v_dup", True),
    "a trailing comma": ("select t.id as a, from fz.calm t", True),
    "which rows a LIMIT takes decides a failure": (
        "select (t.i - -t.b) as c0 from fz.edge t left join fz.dim d on t.k = d.k limit 3", True),
}


@pytest.mark.parametrize("name", sorted(ONCE_DIFFERED))
def test_what_once_differed_is_spark_s_or_refused(spark, warehouse, name):
    sql, refused = ONCE_DIFFERED[name]
    [(why, built_here)] = _differences(spark, warehouse, [sql])
    assert why is None
    assert built_here is not refused


TESTS_ONCE_DIFFERED = [
    "select k from fz.v_dup where name is null",  # Spark cannot read the view
    "select count(distinct t.str) as c0, round(t.d, 1) as c1 from fz.calm t where t.id is null",  # unread, unknown
    "select count(*) as n, t.str as s from fz.calm t",  # unread, neither grouped nor aggregated
]


@pytest.mark.parametrize("sql", TESTS_ONCE_DIFFERED)
def test_data_tests_spark_fails_are_not_answered_here(spark, warehouse, sql):
    assert _test_differences(spark, warehouse, [sql]) == [(None, False)]
    assert isinstance(_spark_model(spark, warehouse, _wrap(sql)), str)  # Spark fails it


def test_unproven_versions_of_duckdb_or_sqlglot_go_to_spark(warehouse, monkeypatch):
    sql = "select t.id from fz.calm t where t.id is null"
    assert answer_small_query(warehouse, _wrap(sql)) is not None
    monkeypatch.setitem(driver_queries.PROVEN, "duckdb", ((0, 1), (0, 2)))
    monkeypatch.setattr(driver_queries, "_unproven", None)
    with pytest.raises(driver_queries.NotHere, match="duckdb .* is not a version the in-process path was proven on"):
        statement = read_statement(None, warehouse, _wrap(sql))
        driver_queries.answer(warehouse, statement.text, statement.relations, relations_of_sql)
    monkeypatch.setattr(driver_queries, "_unproven", None)  # the next test reads the real versions again
