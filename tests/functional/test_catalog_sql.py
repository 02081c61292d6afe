"""SHOW statements and time travel in SQL about warehouse relations, as hooks and spark-utils write them."""

from __future__ import annotations

import pyarrow as pa
import pytest
from dbt_common.exceptions import DbtRuntimeError
from deltalake import write_deltalake

from dbt.adapters.deltalog.warehouse import Warehouse
from dbt.adapters.deltalog.catalog_sql import like_pattern
from dbt.adapters.deltalog.connections import DeltalogCursor


@pytest.fixture
def warehouse(tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    orders = wh.table_path("shop", "orders")
    write_deltalake(orders, pa.table({"id": [1, 2], "amount": [10.0, 20.0]}))            # version 0
    write_deltalake(orders, pa.table({"id": [3], "amount": [30.0]}), mode="append")      # version 1
    write_deltalake(wh.table_path("shop", "customers"), pa.table({"id": [7]}))
    write_deltalake(wh.table_path("staging", "raw"), pa.table({"x": ["a"]}))
    wh.write_view_sql("shop", "big_orders", "select * from `shop.orders` where amount > 15")
    return wh


def run(spark, warehouse, sql):
    cursor = DeltalogCursor(lambda: spark, warehouse)
    cursor.execute(sql)
    return cursor


def rows(spark, warehouse, sql):
    return [tuple(r) for r in run(spark, warehouse, sql).fetchall()]


def test_show_tables_and_views_in_a_schema(spark, warehouse):
    assert rows(spark, warehouse, "show tables in shop") == [
        ("shop", "big_orders", False), ("shop", "customers", False), ("shop", "orders", False)]
    assert rows(spark, warehouse, "SHOW TABLES FROM shop LIKE 'ord*|cust*'") == [
        ("shop", "customers", False), ("shop", "orders", False)]
    assert rows(spark, warehouse, "show tables in `shop` 'BIG_*'") == [("shop", "big_orders", False)]
    assert rows(spark, warehouse, "show views in shop") == [("shop", "big_orders", False)]
    assert [f[0] for f in run(spark, warehouse, "show tables in shop").description] == [
        "namespace", "tableName", "isTemporary"]
    assert rows(spark, warehouse, "/* dbt */ show schemas") == [("shop",), ("staging",)]
    assert rows(spark, warehouse, "show databases like 'st*'") == [("staging",)]


def test_show_table_extended_gives_what_dbt_spark_parses(spark, warehouse):
    found = {r[1]: r[3] for r in run(spark, warehouse, "show table extended in shop like '*'").fetchall()}
    assert set(found) == {"orders", "customers", "big_orders"}
    assert "Type: MANAGED" in found["orders"] and "Provider: delta" in found["orders"]
    assert " |-- amount: double (nullable = true)" in found["orders"]
    assert "Type: VIEW" in found["big_orders"] and "amount > 15" in found["big_orders"]


def test_a_schema_not_in_the_warehouse_is_named(spark, warehouse):
    with pytest.raises(DbtRuntimeError, match=r"SCHEMA_NOT_FOUND.*`nowhere`.*shop, staging"):
        run(spark, warehouse, "show tables in nowhere")


def test_other_show_statements_are_spark_s(spark, warehouse):
    assert rows(spark, warehouse, "show functions like 'abs'")  # Spark answered it


def test_time_travel_by_version_and_timestamp(spark, warehouse):
    assert sorted(rows(spark, warehouse, "select id from shop.orders VERSION AS OF 0")) == [(1,), (2,)]
    assert sorted(rows(spark, warehouse, "select id from `shop.orders` for system_version as of 1")) == [
        (1,), (2,), (3,)]
    assert sorted(rows(spark, warehouse, "select id from shop.orders")) == [(1,), (2,), (3,)]
    joined = rows(spark, warehouse, "select o.id, n.id from shop.orders version as of 0 o "
                                    "join shop.orders n on o.id = n.id -- version as of 9 in a comment")
    assert sorted(joined) == [(1, 1), (2, 2)]
    assert sorted(rows(spark, warehouse, "select id from shop.orders TIMESTAMP AS OF '2999-01-01'")) == [
        (1,), (2,), (3,)]
    # a string that merely says so is left alone
    assert rows(spark, warehouse, "select 'shop.orders version as of 0' as s") == [("shop.orders version as of 0",)]


def test_bad_time_travel_is_named(spark, warehouse):
    with pytest.raises(DbtRuntimeError, match=r"VERSION AS OF on shop.orders: .*version 7"):
        run(spark, warehouse, "select * from shop.orders version as of 7")
    with pytest.raises(DbtRuntimeError, match=r"TIMESTAMP AS OF on shop.orders: give a literal"):
        run(spark, warehouse, "select * from shop.orders timestamp as of current_timestamp() - interval 1 day")
    with pytest.raises(DbtRuntimeError, match=r"TIMESTAMP AS OF on shop.orders: .*before the earliest available commit"):
        run(spark, warehouse, "select * from shop.orders timestamp as of '1970-01-01'")


def test_time_travel_past_a_vacuum_names_the_version_the_file_and_the_retention(spark, warehouse):
    from deltalog.operations.vacuum import vacuum

    orders = warehouse.table_path("shop", "orders")
    write_deltalake(orders, pa.table({"id": [9], "amount": [90.0]}), mode="overwrite")  # version 2
    vacuum(orders, retain_hours=0, force=True)
    with pytest.raises(DbtRuntimeError, match=r"version 0 needs data file part-.*VACUUM removed it.*"
                                              r"deletedFileRetentionDuration = 168 hours") as e:
        run(spark, warehouse, "select * from shop.orders version as of 0")
    assert "Traceback" not in str(e.value)
    assert rows(spark, warehouse, "select id from shop.orders version as of 2") == [(9,)]


@pytest.mark.parametrize("pattern, name, matches", [
    ("*", "anything", True), ("ord*", "orders", True), ("ord*", "customers", False),
    ("a|b*", "bx", True), ("a|b*", "ab", False), ("A.B", "a.b", True), ("A.B", "axb", False)])
def test_like_patterns_follow_spark(pattern, name, matches):
    assert bool(like_pattern(pattern).fullmatch(name)) is matches
