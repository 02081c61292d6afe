"""The SQL gateway (sql_gateway.py): a statement is tokenized once, and quotes, comments and strings are
never mistaken for names, clauses or statement ends: what regular expressions got wrong before."""
from __future__ import annotations

import pyarrow as pa
import pytest

from deltalog import Snapshot, write_deltalake
from dbt.adapters.deltalog.warehouse import Warehouse
from dbt.adapters.deltalog.sql_gateway import execute, statements

pytestmark = pytest.mark.spark


@pytest.fixture
def warehouse(tmp_path):
    write_deltalake(str(tmp_path / "shop" / "orders"),
                    pa.table({"id": pa.array([1, 2, 3], pa.int64()), "note": ["a", "b", "c"]}))
    return Warehouse(str(tmp_path))


def _rows(spark, warehouse, sql):
    return sorted(tuple(r) for r in execute(spark, warehouse, sql).dataframe.collect())


def test_an_update_whose_string_holds_where_and_a_semicolon(spark, warehouse):
    execute(spark, warehouse, "update shop.orders set note = 'x where y; z' where id = 2")
    assert _rows(spark, warehouse, "select * from shop.orders") == [(1, "a"), (2, "x where y; z"), (3, "c")]
    assert Snapshot.load(warehouse.table_path("shop", "orders")).version == 1


def test_delete_with_an_alias_then_time_travel_by_unquoted_name(spark, warehouse):
    execute(spark, warehouse, "/* dbt */ delete from shop.orders o where o.note in ('a', 'it''s')")
    assert _rows(spark, warehouse, "select id from shop.orders") == [(2,), (3,)]
    assert _rows(spark, warehouse, "select id from shop.orders version as of 0") == [(1,), (2,), (3,)]


def test_names_in_strings_comments_and_column_qualifiers(spark, warehouse):
    sql = ("select shop.orders.id, 'shop.orders' as s from shop.orders -- from shop.orders\n"
           "where shop.orders.id = 1")
    assert _rows(spark, warehouse, sql) == [(1, "shop.orders")]


def test_insert_with_a_column_list_and_show(spark, warehouse):
    execute(spark, warehouse, "insert into shop.orders (`note`, id) values ('d;e', 4)")
    assert _rows(spark, warehouse, "select * from shop.orders where id = 4") == [(4, "d;e")]
    assert _rows(spark, warehouse, "show tables in shop") == [("shop", "orders", False)]


def test_a_script_splits_at_its_own_semicolons_only():
    script = "delete from t where a = ';' /* ; */; -- a comment; only\n; insert into t values (';')"
    assert statements(script) == ["delete from t where a = ';' /* ; */", "insert into t values (';')"]


def test_three_part_names_of_an_attached_catalog(spark, warehouse, tmp_path):
    raw = warehouse.attach("raw", str(tmp_path / "raw_wh"))
    write_deltalake(raw.table_path("shop", "orders"), pa.table({"id": pa.array([7, 8], pa.int64()), "note": ["p", "q"]}))
    # plain, backquoted part by part, or as one quoted name; the profile's own `shop.orders` stays itself
    assert _rows(spark, warehouse, "select id from raw.shop.orders") == [(7,), (8,)]
    assert _rows(spark, warehouse, "select o.id from `raw`.shop.`orders` o join shop.orders s on s.id * 4 = o.id") \
        == [(8,)]
    assert _rows(spark, warehouse, "select raw.shop.orders.note from `raw.shop.orders` where id = 8") == [("q",)]
    execute(spark, warehouse, "delete from raw.shop.orders where id = 7")
    assert _rows(spark, warehouse, "select id from raw.shop.orders version as of 0") == [(7,), (8,)]
    assert _rows(spark, warehouse, "select id from raw.shop.orders") == [(8,)]
    assert Snapshot.load(raw.table_path("shop", "orders")).version == 1
    assert Snapshot.load(warehouse.table_path("shop", "orders")).version == 0
    assert _rows(spark, warehouse, "show tables in raw.shop") == [("shop", "orders", False)]
    # a three-part name of a catalog that is not attached is not ours: Spark judges it
    with pytest.raises(Exception, match="REQUIRES_SINGLE_PART_NAMESPACE|TABLE_OR_VIEW_NOT_FOUND"):
        execute(spark, warehouse, "select * from other.shop.orders").dataframe.collect()
