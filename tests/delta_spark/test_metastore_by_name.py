"""A table dbt builds with `catalog: {type: hive}` is read BY NAME by delta-spark in a session on the same
Hive Metastore (a real one from pyspark's jars, tests/support/hive_metastore.py): `select * from analytics.orders`
through the metastore's entry, rows equal to ours, and DESCRIBE DETAIL shows the location and the partition
column; delta-spark's own `CREATE TABLE ... USING delta` beside it is found by a dbt source by name."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import deltalake
import pytest

from tests.support.dbt_process import dbt, write_project
from tests.support.hive_metastore import hive_metastore, java_or_skip
from tests.support.maven import jars

pytestmark = pytest.mark.spark

READER = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    uri, warehouse, delta_jars, theirs = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.jars", delta_jars)
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.sql.catalogImplementation", "hive").config("spark.hadoop.hive.metastore.uris", uri)
             .config("spark.sql.warehouse.dir", warehouse).getOrCreate())
    rows = sorted(tuple(r) for r in spark.sql("select id, region, amount from analytics.orders").collect())
    detail = spark.sql("describe detail analytics.orders").collect()[0]
    view = sorted(tuple(r) for r in spark.sql("select id from analytics.big_orders").collect())
    spark.sql("create database if not exists crm")
    spark.sql(f"create table crm.customers (id bigint, name string) using delta location '{theirs}'")
    spark.sql("insert into crm.customers values (1, 'ann'), (2, 'bo')")
    print("READ " + json.dumps({"rows": rows, "location": detail.location, "format": detail.format,
                                "partitions": list(detail.partitionColumns), "view": view}))
""")

MODELS = {
    "orders.sql": "{{ config(materialized='table', partition_by=['region']) }}\n"
                  "select id, case when id % 2 = 0 then 'eu' else 'us' end as region, id * 2 as amount "
                  "from range(0, 6)\n",
    "big_orders.sql": "{{ config(materialized='view') }}\nselect id from {{ ref('orders') }} where amount > 4\n",
}


def test_delta_spark_reads_our_tables_by_name_and_we_read_its(tmp_path):
    with hive_metastore(java_or_skip()) as metastore:
        project = write_project(tmp_path / "p", "hms_ds", MODELS,
                                profile_extra=f"catalog: {{type: hive, uri: '{metastore.uri}'}}\n")
        built = dbt(project, "run")
        assert built.returncode == 0, built.stdout[-3000:]
        orders = str(project / "warehouse" / "analytics" / "orders")

        reader = tmp_path / "reader.py"
        reader.write_text(READER)
        theirs = str(tmp_path / "theirs" / "customers")
        seen = subprocess.run([sys.executable, str(reader), metastore.uri, str(tmp_path / "spark-wh"),
                               ",".join(jars("delta-spark")), theirs], capture_output=True, text=True, timeout=600)
        line = [x for x in seen.stdout.splitlines() if x.startswith("READ ")]
        assert line, "\n".join(x for x in seen.stderr.splitlines() if "Exception" in x or "Error" in x)[:3000]
        read = json.loads(line[0][5:])
        ours = sorted((r["id"], r["region"], r["amount"])
                      for r in deltalake.DeltaTable(orders).to_pyarrow_table().to_pylist())
        assert [tuple(r) for r in read["rows"]] == ours and len(ours) == 6
        assert read["format"] == "delta" and read["partitions"] == ["region"]
        assert read["location"].removeprefix("file:").rstrip("/") == orders
        assert read["view"] == [[3], [4], [5]]

        # delta-spark's table, registered by delta-spark: a dbt source finds it by name
        (project / "models" / "sources.yml").write_text(
            "version: 2\nsources:\n  - name: crm\n    tables:\n      - name: customers\n")
        (project / "models" / "names.sql").write_text(
            "{{ config(materialized='table') }}\nselect upper(name) as name from {{ source('crm', 'customers') }}\n")
        again = dbt(project, "run", "--select", "names")
        assert again.returncode == 0, again.stdout[-3000:]
        names = deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "names")).to_pyarrow_table()
        assert sorted(names.column("name").to_pylist()) == ["ANN", "BO"]
