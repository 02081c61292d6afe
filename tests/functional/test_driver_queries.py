"""Data tests over small tables answered in the dbt process by DuckDB (driver_queries.py): each query
gives the rows Spark gives, over nulls, deletion vectors, partition values and dbt views; what would not
mean the same in both engines goes to Spark, with the reason."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt_and_capture

from deltalog import Snapshot, write_deltalake
from dbt.adapters.deltalog import driver_queries
from dbt.adapters.deltalog.warehouse import Warehouse
from dbt.adapters.deltalog.sql_gateway import answer_small_query, relations_of_sql, execute, read_statement

UTC = dt.timezone.utc


def _wrap(sql: str) -> str:
    """dbt's wrapper of a data test's SQL."""
    return (f"select count(*) as failures, count(*) != 0 as should_warn, count(*) != 0 as should_error "
            f"from (\n{sql}\n) dbt_internal_test")


@pytest.fixture
def warehouse(tmp_path, spark):
    write_deltalake(str(tmp_path / "shop" / "orders"), pa.table({
        "id": pa.array(range(1, 9), pa.int64()),
        "customer_id": pa.array([1, 2, None, 2, 9, 1, 3, None], pa.int32()),
        "status": ["placed", "shipped", None, "placed", "returned", "größe", "shipped", "placed"],
        "amount": pa.array([Decimal("1.50"), Decimal("0"), None, Decimal("-2.25"), Decimal("3"), Decimal("1.50"),
                            Decimal("7"), Decimal("0")], pa.decimal128(10, 2)),
        "ratio": pa.array([0.0, -0.0, float("nan"), 1.5, None, float("nan"), 2.0, 0.0], pa.float64()),
        "day": pa.array([dt.date(2026, 1, d) for d in (1, 2, 3, 4, 5, 6, 7, 8)], pa.date32()),
        "ts": pa.array([dt.datetime(2026, 1, 1, h, tzinfo=UTC) for h in range(8)], pa.timestamp("us", "UTC")),
        "region": ["eu", "eu", "us", "us", "eu", "us", "eu", "us"],
    }), partition_by=["region"], configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(str(tmp_path / "shop" / "customers"),
                    pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", None]}))
    wh = Warehouse(str(tmp_path))
    wh.write_view_sql("shop", "open_orders", "select id, customer_id as cid, status, amount * 2 as doubled "
                                             "from `shop.orders` where status != 'returned'")  # as dbt keeps it
    # the row with id 7 is deleted through a deletion vector: neither engine may see it
    execute(spark, wh, "delete from shop.orders where id = 7")
    assert any(f.deletion_vector for f in Snapshot.load(wh.table_path("shop", "orders")).add_files())
    return wh


def _both(spark, warehouse, sql):
    """(rows answered here, or None when refused; rows from Spark)."""
    here = answer_small_query(warehouse, sql)
    spark_rows = [tuple(r) for r in execute(spark, warehouse, sql).dataframe.collect()]
    return (None if here is None else [tuple(r) for r in here.rows]), spark_rows


ANSWERED_HERE = {
    "not_null": "select customer_id from shop.orders where customer_id is null",
    "unique": "select status as unique_field, count(*) as n_records from shop.orders where status is not null "
              "group by status having count(*) > 1",
    "accepted_values": "with all_values as (select status as value_field, count(*) as n_records "
                       "from shop.orders group by status) select * from all_values "
                       "where value_field not in ('placed', 'shipped')",
    "relationships": "with child as (select customer_id as from_field from shop.orders where customer_id is "
                     "not null), parent as (select id as to_field from shop.customers) select from_field from "
                     "child left join parent on child.from_field = parent.to_field where parent.to_field is null",
    "through a view whose unread column is arithmetic": "select cid from shop.open_orders where cid is null",
    "partition column and dates": "select o.id from shop.orders o join shop.orders p on o.day < p.day "
                                  "where o.region = 'eu' and p.region = 'us'",
    "decimal against whole numbers": "select id from shop.orders where amount > 0 or amount in (0, 3)",
    "count distinct and min/max": "select count(distinct customer_id) as n, min(status) as lo, max(day) as hi "
                                  "from shop.orders having count(*) > 100",
    "limit": "select id from shop.orders where status = 'placed' limit 1",
    "upper and lower of ASCII strings": "select id from shop.customers where upper(name) = 'A' or lower(name) = 'b'",
    "whole numbers divided by powers of ten": "select id from shop.orders where id / 10.0 >= 1 "
                                              "and customer_id / 100.0 > 0 or id / 1.000 = 8",
    "timestamps compared with themselves": "select o.id from shop.orders o join shop.orders p on o.ts = p.ts "
                                           "where o.id <> p.id",
}


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(ANSWERED_HERE))
def test_answered_here_as_spark_answers(spark, warehouse, name):
    here, by_spark = _both(spark, warehouse, _wrap(ANSWERED_HERE[name]))
    assert here is not None, f"{name}: went to Spark"
    assert here == by_spark


@pytest.mark.spark
def test_the_failures_are_counted_over_the_live_rows(spark, warehouse):
    # id 7 (customer 3) is deleted: the relationships test finds customer 9 only
    here, _ = _both(spark, warehouse, _wrap(ANSWERED_HERE["relationships"]))
    assert here == [(1, True, True)]
    here, _ = _both(spark, warehouse, _wrap(ANSWERED_HERE["not_null"]))
    assert here == [(2, True, True)]


REFUSED = {
    "floats compared": ("select id from shop.orders where ratio = 0", "compares"),
    "floats grouped": ("select ratio, count(*) from shop.orders group by ratio having count(*) > 1", "grouped"),
    "string against a number": ("select id from shop.orders where status = 1", "compares"),
    "a function": ("select id from shop.orders where length(status) = 6", "Length"),
    "case mapping beyond ASCII": ("select id from shop.orders where upper(status) = 'PLACED'", "not ASCII"),
    "a decimal divided by a power of ten": ("select id from shop.orders where amount / 10.0 > 0", "compares exact number, other"),
    "arithmetic that is read": ("select id from shop.open_orders where doubled > 1", "Mul"),
    "a decimal literal": ("select id from shop.orders where amount > 1.5", "compares exact number, other"),
    "time travel": ("select id from shop.orders version as of 0 where id is null", "not a relation of the warehouse"),
    "ordering": ("select id from shop.orders where id is null order by id", "ORDER"),
    "a subquery in IN": ("select id from shop.orders where customer_id in (select id from shop.customers)",
                         "subquery"),
    "a number as a condition": ("select id from shop.orders where customer_id", "not a boolean"),
    "a cross join": ("select o.id from shop.orders o cross join shop.customers c where o.id = c.id", "join"),
}


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_could_differ_goes_to_spark(spark, warehouse, name):
    sql, reason = REFUSED[name]
    statement = read_statement(spark, warehouse, _wrap(sql))
    with pytest.raises(driver_queries.NotHere, match=reason):
        driver_queries.answer(warehouse, statement.text, statement.relations, relations_of_sql)
    # Spark runs it (lazily: `status = 1` fails when its rows are read, in Spark's ANSI mode), or refuses
    # it at once (a WHERE that is not a boolean), where DuckDB would have answered
    from pyspark.errors import AnalysisException

    try:
        assert answer_small_query(warehouse, _wrap(sql)) is None
        outcome = execute(spark, warehouse, _wrap(sql))
    except AnalysisException as exc:
        assert "NOT_BOOLEAN" in str(exc)
    else:
        assert outcome.dataframe is not None


@pytest.mark.spark
def test_time_travel_read_before_spark_is_asked_goes_to_spark(spark, warehouse):
    # a data test's query is first read without the session, so its time travel is still in its text:
    # answered here it would read the latest version
    sql = _wrap("select id from shop.orders version as of 0 where id is null")
    statement = read_statement(None, warehouse, sql)
    with pytest.raises(driver_queries.NotHere, match="as of a version"):
        driver_queries.answer(warehouse, statement.text, statement.relations, relations_of_sql)
    assert answer_small_query(warehouse, sql) is None


@pytest.mark.spark
def test_tables_past_the_size_limit_go_to_spark(spark, warehouse, monkeypatch):
    monkeypatch.setattr(driver_queries, "MAX_BYTES", 100)
    statement = read_statement(spark, warehouse, _wrap(ANSWERED_HERE["not_null"]))
    with pytest.raises(driver_queries.NotHere, match="more than 100"):
        driver_queries.answer(warehouse, statement.text, statement.relations, relations_of_sql)


@pytest.mark.spark
def test_a_new_commit_is_read_not_the_cached_rows(spark, warehouse):
    sql = _wrap(ANSWERED_HERE["not_null"])
    assert _both(spark, warehouse, sql)[0] == [(2, True, True)]
    execute(spark, warehouse, "update shop.orders set customer_id = 5 where customer_id is null")
    assert _both(spark, warehouse, sql) == ([(0, False, False)], [(0, False, False)])


SEEDS = {"people.csv": "id,name,team\n1,ann,a\n2,bob,b\n3,,a\n3,cid,c\n"}
MODELS = {
    "teams.sql": "{{ config(materialized='view') }} select 'a' as team union all select 'b' as team",
    "members.sql": "{{ config(materialized='view') }} select id, name, team from {{ ref('people') }}",
    "schema.yml": """
version: 2
models:
  - name: members
    columns:
      - name: id
        data_tests: [unique, not_null]
      - name: name
        data_tests:
          - not_null:
              config: {severity: warn}
      - name: team
        data_tests:
          - accepted_values:
              arguments: {values: ['a', 'b']}
              config: {error_if: '>5', warn_if: '>0'}
          - relationships:
              arguments: {to: ref('teams'), field: team}
""",
}


@pytest.mark.dbt
class TestDataTestsHere:
    """A dbt build whose tests fail and warn: the same statuses and failure counts with the tests
    answered here and with every test on Spark."""

    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return SEEDS

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return MODELS

    @pytest.fixture(scope="class")
    @classmethod
    def dbt_profile_target(cls, dbt_profile_target):
        return dict(dbt_profile_target,
                    small_tests_here="{{ env_var('DELTALOG_TEST_SMALL_TESTS_HERE', 'True') | as_bool }}")

    def _results(self, monkeypatch, small_tests_here: bool):
        monkeypatch.setenv("DELTALOG_TEST_SMALL_TESTS_HERE", str(small_tests_here))
        results, log = run_dbt_and_capture(["--debug", "build"], expect_pass=False)
        by_test = {r.node.name: (str(r.status), r.failures) for r in results if r.node.resource_type == "test"}
        return by_test, log

    def test_same_outcomes_here_and_on_spark(self, project, monkeypatch):
        here, log = self._results(monkeypatch, True)
        # the view `teams` is a UNION ALL, which stays with Spark: so does the relationships test over it
        assert log.count("answered in this process by DuckDB") == 4 and len(here) == 5
        assert "run by Spark, not in this process: Union" in log
        on_spark, log = self._results(monkeypatch, False)
        assert "answered in this process" not in log
        assert here == on_spark
        assert here["unique_members_id"] == ("fail", 1)
        assert here["not_null_members_name"] == ("warn", 1)
        assert here["accepted_values_members_team__a__b"] == ("warn", 1)
        assert here["relationships_members_team__team__ref_teams_"] == ("fail", 1)
        assert here["not_null_members_id"] == ("pass", 0)


@pytest.mark.spark
def test_only_the_columns_the_query_reads_are_read(spark, warehouse):
    driver_queries._cache.clear()
    assert _both(spark, warehouse, _wrap(ANSWERED_HERE["not_null"]))[0] == [(2, True, True)]
    assert [key[3] for key in driver_queries._cache] == [("customer_id",)]
    # count(*) alone still needs the rows: one column is read
    driver_queries._cache.clear()
    assert _both(spark, warehouse, _wrap("select 1 as one from shop.orders"))[0] == [(7, True, True)]
    assert [key[3] for key in driver_queries._cache] == [("id",)]
