"""Profile `catalog: {type: hive, uri: ...}`: every table and view dbt builds is registered in a real Hive
Metastore (pyspark's own jars, started by the test) in the form Spark writes a data-source table; a plain
Spark session with Hive support on the same metastore lists them, with their locations, and reads the views'
SQL; a renamed or dropped relation leaves the metastore with it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dbt.adapters.deltalog.metastore import HiveMetastore, metastore_sql, parse_catalog
from tests.support.dbt_process import dbt, write_project
from tests.support.hive_metastore import hive_metastore, java_or_skip

pytestmark = pytest.mark.spark

MODELS = {
    "orders.sql": "{{ config(materialized='table', partition_by=['region']) }}\n"
                  "select id, case when id % 2 = 0 then 'eu' else 'us' end as region, id * 1.5 as amount "
                  "from range(0, 6)\n",
    "big_orders.sql": "{{ config(materialized='view') }}\nselect id, amount from {{ ref('orders') }} where amount > 3\n",
    "schema.yml": "version: 2\nmodels:\n  - name: orders\n    description: every order\n"
                  "    config: {persist_docs: {relation: true}}\n",
}

# what a Spark session with Hive support (no Delta jars) sees in the metastore
SPARK_READER = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.sql.catalogImplementation", "hive")
             .config("spark.hadoop.hive.metastore.uris", sys.argv[1]).config("spark.ui.enabled", "false")
             .config("spark.sql.warehouse.dir", sys.argv[2]).getOrCreate())
    tables = sorted(t.name for t in spark.catalog.listTables("analytics"))
    # the catalog's entry as Spark restores it (reading the rows would need Delta's jars: the delta-spark
    # tests do that)
    entry = spark._jsparkSession.sharedState().externalCatalog().getTable("analytics", "orders")
    view = spark._jsparkSession.sharedState().externalCatalog().getTable("analytics", "big_orders")
    print("READ " + json.dumps({"tables": tables, "provider": entry.provider().get(),
                                "types": [entry.tableType().name(), view.tableType().name()],
                                "location": entry.location().toString(), "comment": entry.comment().get(),
                                "partitions": list(entry.partitionColumnNames().mkString(",").split(",")),
                                "view_text": view.viewText().get()}))
""")


@pytest.fixture(scope="module", autouse=True)
def spark_servers():
    """The module's dbt commands share local Spark servers (spark_server: true), as a user's commands
    do; stopped when the module ends."""
    yield
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

    stop_servers()


@pytest.fixture(scope="module")
def metastore():
    with hive_metastore(java_or_skip()) as running:
        yield running


def test_tables_and_views_are_registered_and_spark_lists_them(metastore, tmp_path):
    project = write_project(tmp_path, "hms", MODELS, spark_server=True,
                            profile_extra=f"catalog: {{type: hive, uri: '{metastore.uri}'}}\n")
    result = dbt(project, "run")
    assert result.returncode == 0, result.stdout[-3000:]
    client = parse_catalog({"type": "hive", "uri": metastore.uri})
    assert "analytics" in client.databases()
    assert sorted(client.tables("analytics")) == ["big_orders", "orders"]
    orders = str(tmp_path / "warehouse" / "analytics" / "orders")
    assert client.location("analytics", "orders") == orders
    # the warehouse holds the tables and views dbt built, and nothing the metastore made beside them
    assert sorted(os.listdir(tmp_path / "warehouse" / "analytics")) == ["big_orders.view.check.json", "big_orders.view.sql",
                                                                          "orders"]
    assert client.location("analytics", "big_orders") is None  # a view has no location

    reader = tmp_path / "reader.py"
    reader.write_text(SPARK_READER)
    seen = subprocess.run([sys.executable, str(reader), metastore.uri, str(tmp_path / "spark-wh")],
                          capture_output=True, text=True, timeout=300)
    line = [x for x in seen.stdout.splitlines() if x.startswith("READ ")]
    assert line, "\n".join(x for x in seen.stderr.splitlines() if "Exception" in x or "Error" in x)[:3000]
    read = json.loads(line[0][5:])
    assert read["tables"] == ["big_orders", "orders"] and read["types"] == ["EXTERNAL", "VIEW"]
    assert read["provider"] == "delta" and read["location"] == "file:" + orders
    assert read["comment"] == "every order" and read["partitions"] == ["region"]
    assert "from `analytics`.`orders`" in read["view_text"]

    # a view that becomes a table changes its entry; a model removed and its relation dropped leaves it
    (project / "models" / "big_orders.sql").write_text(
        "{{ config(materialized='table') }}\nselect id, amount from {{ ref('orders') }} where amount > 3\n")
    assert dbt(project, "run").returncode == 0
    assert client.location("analytics", "big_orders") == str(tmp_path / "warehouse" / "analytics" / "big_orders")
    (project / "models" / "big_orders.sql").write_text(MODELS["big_orders.sql"])  # a view again
    assert dbt(project, "run").returncode == 0
    assert client.location("analytics", "big_orders") is None and "big_orders" in client.tables("analytics")
    (project / "macros").mkdir()
    (project / "macros" / "drop_it.sql").write_text(
        "{% macro drop_it() %}{% do adapter.drop_relation(api.Relation.create(schema='analytics', "
        "identifier='big_orders', type='view')) %}{% endmacro %}\n")
    dropped = dbt(project, "run-operation", "drop_it")
    assert dropped.returncode == 0, dropped.stdout[-2000:]
    assert client.tables("analytics") == ["orders"]


def test_a_source_registered_by_someone_else_is_found_by_name(metastore, tmp_path):
    import deltalake
    import pyarrow as pa

    from deltalog import Snapshot, write_deltalake

    elsewhere = str(tmp_path / "crm-lake" / "customers")
    write_deltalake(elsewhere, pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["ann", "bo"]}))
    client = parse_catalog({"type": "hive", "uri": metastore.uri})
    client.ensure_database("crm", str(tmp_path / "crm-lake"))
    snap = Snapshot.load(elsewhere)
    client.register_table("crm", "customers", elsewhere, snap.schema_json, [], None)
    # someone else's table, registered in the dbt schema itself: listed with the schema's own relations
    partners = str(tmp_path / "crm-lake" / "partners")
    write_deltalake(partners, pa.table({"id": pa.array([9], pa.int64()), "name": ["cy"]}))
    client.ensure_database("analytics", str(tmp_path / "p" / "warehouse" / "analytics"))
    client.register_table("analytics", "partners", partners, Snapshot.load(partners).schema_json, [], None)
    project = write_project(tmp_path / "p", "hms2", spark_server=True, models={
        "sources.yml": "version: 2\nsources:\n  - name: crm\n    freshness: {warn_after: {count: 1, period: day}}\n"
                       "    tables:\n      - name: customers\n",
        "names.sql": "{{ config(materialized='table') }}\nselect upper(name) as name from {{ source('crm', 'customers') }}\n"
                     "union all select upper(name) from analytics.partners\n",
    }, profile_extra=f"catalog: {{type: hive, uri: '{metastore.uri}'}}\n")
    (project / "macros").mkdir()
    (project / "macros" / "found.sql").write_text(
        "{% macro found() %}{% do log('FOUND ' ~ adapter.get_relation(none, 'analytics', 'partners'), info=true) %}"
        "{% endmacro %}\n"
        "{% macro shown() %}{% set t = run_query('show tables in analytics') %}"
        "{% do log('SHOWN ' ~ (t.columns[1].values() | sort | join(',')), info=true) %}{% endmacro %}\n")
    result = dbt(project, "run")
    assert result.returncode == 0, result.stdout[-3000:]
    table = deltalake.DeltaTable(str(tmp_path / "p" / "warehouse" / "analytics" / "names"))
    assert sorted(table.to_pyarrow_table().column("name").to_pylist()) == ["ANN", "BO", "CY"]
    found = dbt(project, "run-operation", "found")
    assert "FOUND `analytics.partners`" in found.stdout, found.stdout[-2000:]
    # SHOW TABLES lists them too, as list_relations does
    shown = dbt(project, "run-operation", "shown")
    listed = next(line.split("SHOWN ", 1)[1].split(",") for line in shown.stdout.splitlines() if "SHOWN " in line)
    assert {"names", "partners"} <= set(listed), shown.stdout[-2000:]  # (and what other tests registered)
    assert client.location("analytics", "partners") == partners  # theirs: left as it was
    assert client.location("analytics", "names") == table.table_uri.removeprefix("file://").rstrip("/")
    docs = dbt(project, "docs", "generate")
    assert docs.returncode == 0, docs.stdout[-3000:]
    catalog = json.loads((project / "target" / "catalog.json").read_text())
    source = catalog["sources"]["source.hms2.crm.customers"]
    assert sorted(source["columns"]) == ["id", "name"]
    fresh = dbt(project, "source", "freshness")
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    results = json.loads((project / "target" / "sources.json").read_text())["results"]
    assert [(r["unique_id"], r["status"]) for r in results] == [("source.hms2.crm.customers", "pass")]


def test_an_attached_catalog_registers_in_its_own_metastore(metastore, tmp_path):
    """`catalogs: {lake: {warehouse, catalog}}`: what a model builds in `lake` is registered in lake's
    metastore, and a source of `lake` with no location is found there by name."""
    import deltalake
    import pyarrow as pa

    from deltalog import Snapshot, write_deltalake

    elsewhere = str(tmp_path / "sales-lake" / "deals")
    write_deltalake(elsewhere, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "size": [5, 50, 500]}))
    client = parse_catalog({"type": "hive", "uri": metastore.uri})
    client.ensure_database("sales", str(tmp_path / "sales-lake"))
    client.register_table("sales", "deals", elsewhere, Snapshot.load(elsewhere).schema_json, [], None)
    project = write_project(tmp_path / "p", "hms4", spark_server=True, models={
        "sources.yml": "version: 2\nsources:\n  - name: sales\n    database: lake\n    tables:\n      - name: deals\n",
        "big_deals.sql": "{{ config(materialized='table', database='lake', schema='marts') }}\n"
                         "select id from {{ source('sales', 'deals') }} where size > 10\n",
        "deal_count.sql": "{{ config(materialized='table') }}\nselect count(*) as n from {{ ref('big_deals') }}\n",
    }, profile_extra=f"catalogs:\n  lake: {{warehouse: {tmp_path / 'lake_wh'}, "
                     f"catalog: {{type: hive, uri: '{metastore.uri}'}}}}\n")
    result = dbt(project, "run")
    assert result.returncode == 0, result.stdout[-3000:]
    built = tmp_path / "lake_wh" / "analytics_marts" / "big_deals"
    assert sorted(deltalake.DeltaTable(str(built)).to_pyarrow_table().column("id").to_pylist()) == [2, 3]
    assert client.location("analytics_marts", "big_deals") == str(built)
    # the profile's own warehouse has no metastore: its table is not registered in lake's
    assert (tmp_path / "p" / "warehouse" / "analytics" / "deal_count" / "_delta_log").is_dir()
    assert "deal_count" not in client.tables("analytics")


def test_the_metastore_reads_view_sql_with_its_own_names():
    assert metastore_sql("select * from `shop.orders` o join `shop.x` using (id) where s = '`a.b`'") == \
        "select * from `shop`.`orders` o join `shop`.`x` using (id) where s = '`a.b`'"
    # in the metastore of the attached catalog `raw`, its own relations have two parts, others' three
    assert metastore_sql("select * from `raw.shop.a` join `lake.shop.b` using (id)", "raw") == \
        "select * from `shop`.`a` join `lake`.`shop`.`b` using (id)"


@pytest.mark.parametrize("catalog, message", [
    ("unity", "a catalog name, as dbt-databricks takes it"),
    ({"type": "glue"}, "not one this adapter takes"),
    ({"type": "hive", "uri": "http://host:9083"}, "thrift://host:port"),
    ({"type": "hive", "uri": "thrift://h:1", "user": "x"}, "unknown keys: user"),
])
def test_a_wrong_catalog_is_refused_by_name(catalog, message):
    from dbt_common.exceptions import DbtRuntimeError

    with pytest.raises(DbtRuntimeError, match=message):
        parse_catalog(catalog)


def test_an_unreachable_metastore_is_named():
    from dbt.adapters.deltalog.metastore import MetastoreError
    from tests.support.standalone import free_port

    with pytest.raises(MetastoreError, match="cannot be reached"):
        HiveMetastore("127.0.0.1", free_port()).databases()


def test_a_run_with_an_unreachable_metastore_fails_before_committing(tmp_path):
    from tests.support.standalone import free_port

    address = f"thrift://127.0.0.1:{free_port()}"
    project = write_project(tmp_path, "hms3", {"orders.sql": MODELS["orders.sql"]}, spark_server=True,
                            profile_extra=f"catalog: {{type: hive, uri: '{address}'}}\n")
    result = dbt(project, "run")
    assert result.returncode != 0
    assert f"the Hive Metastore at {address} (profile `catalog`) cannot be reached" in result.stdout
    assert not (tmp_path / "warehouse" / "analytics" / "orders" / "_delta_log").exists()
    debug = dbt(project, "debug")
    assert debug.returncode != 0 and address in debug.stdout
