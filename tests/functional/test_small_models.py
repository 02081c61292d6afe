"""Small `table` models built in the dbt process by DuckDB and the engine's Arrow writer (small_models.py)
are the tables Spark's path builds: the same rows, schema, properties, protocol and commit operation, on a
first build and a rebuild, read by delta-rs. What the rules do not cover goes to Spark with the reason,
and what Spark fails (an overflow, a division by zero) still fails, with nothing committed."""
from __future__ import annotations

import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

from deltalog import Snapshot
from dbt.adapters.deltalog import small_models
from dbt.adapters.deltalog.impl import DeltalogAdapter

PAYMENTS = """id,order_id,method,cents
1,1,card,1025
2,1,coupon,250
3,2,card,9999
4,3,transfer,1
5,3,card,
6,4,gift,-300
7,,card,75
"""

ORDERS = """id,customer_id,day,status
1,1,2026-01-03,placed
2,1,2026-01-09,shipped
3,2,2026-02-01,completed
4,,2026-02-03,returned
5,3,2026-03-01,
"""

CUSTOMERS = """id,name
1,ann
2,bo
3,
4,dee
"""

STG_PAYMENTS = """
select id as payment_id, order_id, method, cents / 4 as amount, cents, cents / 100.0 as dollars
from {{ ref('payments') }}
"""

# jaffle_shop's marts' shapes: a pivot of CASE sums, left joins, min / max / count, coalesce, arithmetic
ORDERS_MART = """
with paid as (
    select
        order_id,
        sum(case when method = 'card' then amount else 0 end) as card_amount,
        sum(case when method = 'coupon' then amount else 0 end) as coupon_amount,
        sum(amount) as total,
        sum(cents) as total_cents,
        max(dollars) as top_dollars,
        count(*) as payments
    from {{ ref('stg_payments') }}
    group by order_id
)
select
    o.id as order_id, o.customer_id, o.day, o.status,
    paid.card_amount, paid.coupon_amount, coalesce(paid.total, 0) as amount, paid.top_dollars,
    coalesce(paid.total_cents, 0) * 2 + 1 as odd_cents, -paid.payments as negated,
    if(o.status = 'returned', true, false) as is_returned
from {{ ref('orders') }} o
left join paid on o.id = paid.order_id
"""

CUSTOMERS_MART = """
with per_customer as (
    select customer_id, min(day) as first_order, max(day) as last_order, count(id) as orders,
           count(distinct status) as statuses
    from {{ ref('orders') }}
    group by customer_id
)
select c.id as customer_id, c.name, upper(c.name) as name_code, p.first_order, p.last_order, coalesce(p.orders, 0) as orders, p.statuses
from {{ ref('customers') }} c
left join per_customer p on c.id = p.customer_id
where c.id > 0
"""

# a window function is not in the rules: Spark builds it
RANKED = """
select id, row_number() over (order by id) as n from {{ ref('orders') }}
"""

MARTS = {"orders_mart": ORDERS_MART, "customers_mart": CUSTOMERS_MART}


def _last_commit(path):
    version = deltalake.DeltaTable(path).version()
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return {k: v for line in f for k, v in json.loads(line).items()}


def _rows(path, key):
    return deltalake.DeltaTable(path).to_pyarrow_table().sort_by(key).to_pylist()


class TestSmallModelsHere:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"payments.csv": PAYMENTS, "orders.csv": ORDERS, "customers.csv": CUSTOMERS}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        twins = {}
        for name, sql in MARTS.items():
            twins[f"{name}.sql"] = "{{ config(materialized='table') }}" + sql
            twins[f"{name}_by_spark.sql"] = "{{ config(materialized='table') }}" + sql
        return {"stg_payments.sql": STG_PAYMENTS, "ranked.sql": "{{ config(materialized='table') }}" + RANKED,
                **twins}

    def _compare(self, folder, operation):
        for name, key in (("orders_mart", "order_id"), ("customers_mart", "customer_id")):
            ours, spark = os.path.join(folder, name), os.path.join(folder, f"{name}_by_spark")
            a, b = Snapshot.load(ours), Snapshot.load(spark)
            assert a.protocol == b.protocol
            assert a.schema_json == b.schema_json
            assert a.configuration == b.configuration
            assert a.partition_columns == b.partition_columns == []
            a, b = _last_commit(ours), _last_commit(spark)
            assert a.keys() == b.keys()  # the same kinds of actions: metaData where Spark's path has one
            assert a["commitInfo"]["operation"] == b["commitInfo"]["operation"] == operation
            assert a["commitInfo"]["dbtUniqueId"] == f"model.test.{name}"
            assert _rows(ours, key) == _rows(spark, key)  # read by delta-rs

    def test_built_here_as_spark_builds_them(self, project, deltalog_warehouse, monkeypatch):
        refusal = small_models._refusal

        def forced(adapter, relation, *args):
            if relation.identifier.endswith("_by_spark"):
                raise small_models.NotHere("forced by the test")
            return refusal(adapter, relation, *args)

        monkeypatch.setattr(small_models, "_refusal", forced)
        folder = os.path.join(deltalog_warehouse, project.test_schema)
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["--debug", "run"])
        for name in MARTS:
            assert f"{name}`: built in this process by DuckDB" in out
            assert f"{name}_by_spark`: built by Spark, not in this process: forced by the test" in out
        assert "ranked`: built by Spark, not in this process: Window" in out
        self._compare(folder, "CREATE TABLE AS SELECT")
        rows = {r["order_id"]: r for r in _rows(os.path.join(folder, "orders_mart"), "order_id")}
        assert rows[1]["card_amount"] == 256.25 and rows[1]["coupon_amount"] == 62.5 and rows[1]["amount"] == 318.75
        assert rows[3]["amount"] == 0.25 and rows[3]["odd_cents"] == 3 and rows[3]["negated"] == -2
        assert rows[5]["amount"] == 0 and rows[5]["negated"] is None and rows[4]["is_returned"] is True
        customers = _rows(os.path.join(folder, "customers_mart"), "customer_id")
        assert [(c["customer_id"], c["orders"], c["statuses"]) for c in customers] == \
               [(1, 2, 2), (2, 1, 1), (3, 1, 0), (4, 0, None)]

        # a rebuild: one overwrite commit each way; Spark's analysis of the unchanged SQL is not made again
        analysed = []
        dataframe = DeltalogAdapter._dataframe
        monkeypatch.setattr(DeltalogAdapter, "_dataframe", lambda self, sql: analysed.append(sql) or dataframe(self, sql))
        _, out = run_dbt_and_capture(["--debug", "run"])
        self._compare(folder, "CREATE OR REPLACE TABLE AS SELECT")
        assert deltalake.DeltaTable(os.path.join(folder, "orders_mart")).version() == 1
        assert len([sql for sql in analysed if "per_customer" in sql]) == 1  # the twin's, for Spark's write
        assert "dbtModelAnalysis" in _last_commit(os.path.join(folder, "orders_mart"))["commitInfo"]

        # the SQL changed: Spark analyses it again, and the table takes the new schema
        write_file("{{ config(materialized='table') }}" + CUSTOMERS_MART.replace(
            "c.name,", "c.name, c.id * 10 as tenfold,"), project.project_root, "models", "customers_mart.sql")
        write_file("{{ config(materialized='table') }}" + CUSTOMERS_MART.replace(
            "c.name,", "c.name, c.id * 10 as tenfold,"), project.project_root, "models",
            "customers_mart_by_spark.sql")
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "customers_mart", "customers_mart_by_spark"])
        assert "customers_mart`: built in this process by DuckDB" in out
        self._compare(folder, "CREATE OR REPLACE TABLE AS SELECT")
        assert [c["tenfold"] for c in _rows(os.path.join(folder, "customers_mart"), "customer_id")] == [10, 20, 30, 40]


OVERFLOW = """
{{ config(materialized='table') }}
select sum(big) as total from {{ ref('bigs') }}
"""

LENIENT = """
{{ config(materialized='table') }}
select id, big from {{ ref('bigs') }}
"""
# a hook that turns ANSI mode off for the model: the rules assume it on, so Spark builds it, even with
# Spark's analysis of the same SQL kept from the last build
HOOKS = ("materialized='table', pre_hook=\"set spark.sql.ansi.enabled = false\", "
         "post_hook=\"set spark.sql.ansi.enabled = true\"")


# a table that reads its own last version: Spark's path commits against the version it read
SELFISH = """
{{ config(materialized='table') }}
select id from {{ ref('bigs') }}
{% if load_relation(this) %} where id > (select count(*) from {{ this }}) {% endif %}
"""

BY_ZERO = """
{{ config(materialized='table') }}
select id / 0 as q from {{ ref('bigs') }}
"""


class TestWhatSparkFailsStillFails:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"bigs.csv": "id,big\n1,9223372036854775807\n2,1\n"}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"overflow.sql": OVERFLOW, "by_zero.sql": BY_ZERO, "lenient.sql": LENIENT, "selfish.sql": SELFISH}

    def test_errors_are_sparks_and_nothing_is_committed(self, project, deltalog_warehouse):
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "overflow", "by_zero"], expect_pass=False)
        # DuckDB sums past a bigint; the result does not fit Spark's type, so Spark runs it and fails it
        assert "overflow`: built by Spark, not in this process: total:" in out
        assert "ARITHMETIC_OVERFLOW" in out
        assert "by_zero`: built by Spark, not in this process:" in out and "divides by" in out
        assert "DIVIDE_BY_ZERO" in out
        folder = os.path.join(deltalog_warehouse, project.test_schema)
        for name in ("overflow", "by_zero"):
            assert not os.path.exists(os.path.join(folder, name, "_delta_log", f"{0:020d}.json"))

    def test_a_session_set_otherwise_goes_to_spark(self, project):
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "lenient"])
        assert "lenient`: built in this process by DuckDB" in out
        # (the compiled SQL is the same: a config() call renders nothing)
        write_file(LENIENT.replace("materialized='table'", HOOKS), project.project_root, "models", "lenient.sql")
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "lenient"])
        assert "lenient`: built by Spark, not in this process: spark.sql.ansi.enabled is not true" in out

    def test_a_model_reading_its_own_table_goes_to_spark(self, project):
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "selfish"])
        assert "selfish`: built in this process by DuckDB" in out
        _, out = run_dbt_and_capture(["--debug", "run", "--select", "selfish"])
        assert "selfish`: built by Spark, not in this process: it reads its own table" in out
