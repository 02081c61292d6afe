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
seed, printed; `DELTALOG_DIFFERENTIAL_SEED=N` re-runs from base N, `DELTALOG_DIFFERENTIAL_COUNT=N` N of each. A difference fails with the seed and SQL."""
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
    return wh


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
    from deltalog.spark.dml.write import dataframe_schema

    try:
        df = execute(spark, warehouse, sql).dataframe
        schema = dataframe_schema(df, "fz.model")
        return schema, [r.asDict() for r in df.collect()]
    except Exception as exc:  # noqa: BLE001 - any failure of Spark's is the reference's answer
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def _value(v):
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else ("float", v, math.copysign(1, v))
    if isinstance(v, Decimal):
        return ("decimal", v)
    return (type(v).__name__, v)


def _same_rows(here: list, spark: list, limited: bool) -> bool:
    if len(here) != len(spark):
        return False
    if limited:  # a LIMIT without ORDER BY: which rows is either engine's choice
        return True
    key = lambda row: repr([_value(v) for v in row.values()])  # noqa: E731
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


def _difference(spark, warehouse, sql: str):
    """(what differs between the dbt process's model and Spark's, or None; whether it was built here)."""
    here = _here_model(spark, warehouse, sql)
    if here is None:
        return None, False
    reference = _spark_model(spark, warehouse, sql)
    if isinstance(reference, str):
        return f"Spark fails it ({reference}); here it is committed", True
    if here[0] != reference[0]:
        return f"schema here {_types(here[0])}, Spark's {_types(reference[0])}", True
    if not _same_rows(here[1], reference[1], " limit " in sql):
        return f"rows here {here[1][:5]}, Spark's {reference[1][:5]}", True
    return None, True


def _types(schema: dict) -> str:
    return ", ".join(f"{f['name']} {f['type']}" for f in schema["fields"])


def test_models_built_here_are_spark_s(spark, warehouse):
    print(f"differential fuzz: {MODELS} models from seed {BASE}")
    differences, answered = [], 0
    for seed in range(BASE, BASE + MODELS):
        sql = sql_fuzz.model(seed)
        why, here = _difference(spark, warehouse, sql)
        answered += here
        if why:
            differences.append(f"seed {seed}: {sql}\n    {why}")
    print(f"{answered} of {MODELS} built here")
    assert not differences, f"{len(differences)} models differ from Spark's:\n" + "\n".join(differences[:30])
    assert answered >= MODELS // 5, f"only {answered} of {MODELS} models were built here: the fuzz proves little"


def _test_difference(spark, warehouse, sql: str, reuse: bool = False):
    here = answer_small_query(warehouse, _wrap(sql), reuse=reuse)
    if here is None:
        return None, False
    try:
        reference = [tuple(r) for r in execute(spark, warehouse, _wrap(sql)).dataframe.collect()]
    except Exception as exc:  # noqa: BLE001
        return f"Spark fails it ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); here: {here.rows}", True
    if [tuple(r) for r in here.rows] != reference:
        return f"here {here.rows}, Spark {reference}", True
    return None, True


def test_data_tests_answered_here_are_spark_s(spark, warehouse, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # answer reuse's own folder
    print(f"differential fuzz: {TESTS} data tests from seed {BASE}")
    seeds = range(BASE, BASE + TESTS)
    differences, answered = [], 0
    for seed in seeds:
        sql = sql_fuzz.data_test(seed)
        why, here = _test_difference(spark, warehouse, sql)
        answered += here
        if why:
            differences.append(f"seed {seed}: {sql}\n    {why}")
    # new rows land; each test over the changed table is answered anew, then reused
    import pyarrow as pa

    calm = sql_fuzz.tables()["calm"]
    write_deltalake(warehouse.table_path("fz", "calm"), pa.Table.from_pylist(sql_fuzz.NEW_ROWS, schema=calm.schema),
                    mode="append")
    later = [s for s in seeds if "calm" in sql_fuzz.data_test(s)][: max(50, TESTS // 10)]
    for round_ in ("after new data", "reused"):
        for seed in later:
            sql = sql_fuzz.data_test(seed)
            why, _ = _test_difference(spark, warehouse, sql, reuse=True)
            if why:
                differences.append(f"seed {seed} ({round_}): {sql}\n    {why}")
    print(f"{answered} of {TESTS} answered here")
    assert not differences, f"{len(differences)} data tests differ from Spark's:\n" + "\n".join(differences[:30])
    assert answered >= TESTS // 5, f"only {answered} of {TESTS} data tests were answered here"
