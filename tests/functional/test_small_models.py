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

KINDS = """id,big,ratio,label,day,flag,mid,small,tiny
1,3000000000,1.5,ann,2026-01-03,true,100000,300,7
2,,-2.25,bo,2026-01-04,false,-5,,-3
3,7,,cy,,,,12,
4,-12,0.5,bo,2026-01-09,true,0,-1,60
"""
KINDS_TYPES = {"mid": "int", "small": "smallint", "tiny": "tinyint"}

# every construct the model rules allow, each typed here as Spark's analysis types it (spark_analysis.py)
KINDS_MART = """
with k as (select * from {{ ref('kinds') }})
select
    id, big, ratio, label, day, flag,
    id + 1 as id_plus, id + big as Mixed_Sum, id * ratio as scaled, -big as neg_big, big - id * 2 as diff,
    big / 2 as half, id / 100.0 as hundredths, big / 10.00 as tenths, id / 1.0 as ones,
    case when flag then 1 else 0 end as flag_int, case when flag then ratio else 0 end as ratio_or_zero,
    case when id > 1 then big else id end as wide_case, coalesce(big, 0) as big_or_zero,
    if(id = 1, label, null) as first_label, case when flag then day end as flagged_day,
    id in (1, 2) as small_id, day is null as no_day, not flag as unflagged, flag and id > 1 as both,
    upper(label) as loud, lower(label) as quiet, 'x' as const_text, 42 as const_int, true as const_true,
    mid + 1 as mid_plus, small + tiny as small_sum, tiny * 2 as tiny_twice, -small as neg_small,
    small / 10.0 as small_tenths, tiny / 100.0 as tiny_hundredths, mid / 1000.000 as mid_thousandths,
    coalesce(small, tiny) as small_or_tiny, case when flag then tiny else mid end as tiny_or_mid,
    mid * ratio as mid_scaled, small + big as small_big, tiny / 2 as tiny_half
from k
where id < 100
"""

KINDS_TOTALS = """
select label, count(*) as n, sum(id) as id_total, sum(ratio) as ratio_total, sum(big) as big_total,
       min(day) as first_day, max(label) as top_label, count(distinct flag) as flags,
       max(id) * 2 as doubled_max, sum(big / 2) as halves, sum(small) as small_total,
       sum(tiny) as tiny_total, sum(mid) as mid_total, max(tiny) as top_tiny, min(small) as low_small
from {{ ref('kinds') }}
group by label
"""

# a window function is not in the rules: Spark builds it
RANKED = """
select id, row_number() over (order by id) as n from {{ ref('orders') }}
"""

# a view's columns as Spark names them: aliases as written, a table's columns as the table spells them
CASED_VIEW = "select p.id as PaymentID, p.*, cents * 2 as Twice from {{ ref('payments') }} p"
# a column written in another case than its table's: Spark resolves it, and checks the view
MISMATCHED_VIEW = "select ID, Method as method_name from {{ ref('payments') }}"

MARTS = {"orders_mart": ORDERS_MART, "customers_mart": CUSTOMERS_MART, "kinds_mart": KINDS_MART,
         "kinds_totals": KINDS_TOTALS}
KEYS = {"orders_mart": "order_id", "customers_mart": "customer_id", "kinds_mart": "id", "kinds_totals": "label"}


def _said(out, name):
    """What the debug log says of a model's way (for a failing assertion's message)."""
    return "\n".join(line for line in out.splitlines() if f"{name}`:" in line and "adapter" in line)


def _last_commit(path):
    version = deltalake.DeltaTable(path).version()
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return {k: v for line in f for k, v in json.loads(line).items()}


def _rows(path, key):
    return deltalake.DeltaTable(path).to_pyarrow_table().sort_by(key).to_pylist()


class TestSmallModelsHere:
    @pytest.fixture(scope="class")
    @classmethod
    def project_config_update(cls):
        return {"seeds": {"test": {"kinds": {"+column_types": KINDS_TYPES}}}}

    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"payments.csv": PAYMENTS, "orders.csv": ORDERS, "customers.csv": CUSTOMERS, "kinds.csv": KINDS}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        twins = {}
        for name, sql in MARTS.items():
            twins[f"{name}.sql"] = "{{ config(materialized='table') }}" + sql
            twins[f"{name}_by_spark.sql"] = "{{ config(materialized='table') }}" + sql
        return {"stg_payments.sql": STG_PAYMENTS, "ranked.sql": "{{ config(materialized='table') }}" + RANKED,
                "cased_view.sql": CASED_VIEW, "mismatched_view.sql": MISMATCHED_VIEW, **twins}

    def _compare(self, folder, operation):
        for name, key in KEYS.items():
            ours, spark = os.path.join(folder, name), os.path.join(folder, f"{name}_by_spark")
            a, b = Snapshot.load(ours), Snapshot.load(spark)
            assert a.protocol == b.protocol
            assert [(f["name"], f["type"]) for f in a.schema_json["fields"]] == \
                   [(f["name"], f["type"]) for f in b.schema_json["fields"]], name
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
        analysed = []
        dataframe = DeltalogAdapter._dataframe
        monkeypatch.setattr(DeltalogAdapter, "_dataframe", lambda self, sql: analysed.append(sql) or dataframe(self, sql))
        folder = os.path.join(deltalog_warehouse, project.test_schema)
        run_dbt(["seed"])
        _, out = run_dbt_and_capture(["--debug", "run"])
        for name in MARTS:
            if name == "orders_mart":  # its CTE sums whole numbers: Spark adds groups DuckDB may never compute
                assert "orders_mart`: built by Spark, not in this process:" in out, _said(out, name)
                assert "a sum of whole numbers whose groups a HAVING or an outer query may leave out" in out
            else:
                assert f"{name}`: built in this process by DuckDB" in out, _said(out, name)
            assert f"{name}_by_spark`: built by Spark, not in this process: forced by the test" in out
        assert "ranked`: built by Spark, not in this process: Window" in out
        # a new table: its schema was worked out here, not by Spark's analysis (only the twins' SQL)
        assert len([sql for sql in analysed if "doubled_max" in sql]) == 1
        assert "stg_payments`: its SQL is within the model rules: its columns" in out
        assert "cased_view`: its SQL is within the model rules: its columns ['PaymentID', 'id', 'order_id', " \
               "'method', 'cents', 'Twice'] found without Spark" in out, _said(out, "cased_view")
        assert "the view's SQL is checked by Spark: not resolved as spelt" in out
        with open(os.path.join(folder, "mismatched_view.view.check.json")) as f:
            assert json.load(f)["columns"] == ["ID", "method_name"]  # Spark keeps the spelling of the SQL
        self._compare(folder, "CREATE TABLE AS SELECT")
        analysed.clear()
        rows = {r["order_id"]: r for r in _rows(os.path.join(folder, "orders_mart"), "order_id")}
        assert rows[1]["card_amount"] == 256.25 and rows[1]["coupon_amount"] == 62.5 and rows[1]["amount"] == 318.75
        assert rows[3]["amount"] == 0.25 and rows[3]["odd_cents"] == 3 and rows[3]["negated"] == -2
        assert rows[5]["amount"] == 0 and rows[5]["negated"] is None and rows[4]["is_returned"] is True
        customers = _rows(os.path.join(folder, "customers_mart"), "customer_id")
        assert [(c["customer_id"], c["orders"], c["statuses"]) for c in customers] == \
               [(1, 2, 2), (2, 1, 1), (3, 1, 0), (4, 0, None)]

        # a rebuild: one overwrite commit each way; Spark's analysis of the unchanged SQL is not made again
        _, out = run_dbt_and_capture(["--debug", "run"])
        self._compare(folder, "CREATE OR REPLACE TABLE AS SELECT")
        assert deltalake.DeltaTable(os.path.join(folder, "orders_mart")).version() == 1
        assert len([sql for sql in analysed if "per_customer" in sql]) == 1  # the twin's, for Spark's write
        assert "dbtModelAnalysis" in _last_commit(os.path.join(folder, "customers_mart"))["commitInfo"]

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
        # the sum's magnitudes pass a bigint, where Spark's running total may overflow: Spark runs it and fails it
        assert "overflow`: built by Spark, not in this process: DuckDB did not run it" in out
        assert "past a bigint: Spark decides" in out
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
