"""Spark's own Iceberg connector (`iceberg-spark-runtime-4.1_2.13` 1.12.0, from Maven Central) reads our
`table_format: iceberg` tables: by metadata file, every version equal to delta-rs on the Delta version it
names, time travel by snapshot id, and by name through a Hive Metastore.

The connector is built for Spark 4.1 (Maven Central has none for 4.2 or 4.3 yet), so its reader runs in an
environment of its own with pyspark 4.1 (`.ci-cache/pyspark-4.1`, made once; nothing else installed
there). Skipped, saying why, where PyPI or Maven Central cannot be reached; in CI it fails instead."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import iceberg_readers as ice
from tests.support import python_env
from tests.support.maven import MavenUnavailable, in_ci, jars

ROOT = Path(__file__).resolve().parents[2]
PIN = "pyspark==4.1.1"

pytestmark = [pytest.mark.spark]

READER = r"""
import json, sys
from pyspark.sql import SparkSession
jar, requests = sys.argv[1], json.loads(sys.argv[2])
spark = (SparkSession.builder.master("local[1]").config("spark.jars", jar)
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
out = {}
for key, (location, snapshot_id, columns) in requests.items():
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("versionAsOf", str(snapshot_id))
    rows = reader.load(location).select(*columns).collect()
    out[key] = [[v.strftime("%Y%m%d%H%M%S%f") if hasattr(v, "strftime") and hasattr(v, "hour") else str(v)
                 for v in row] for row in rows]
print("ROWS " + json.dumps(out))
spark.stop()
"""


def _skip_or_fail(reason: str):
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def _environment() -> Path:
    return python_env.environment("pyspark-4.1", [PIN])


def _text(value) -> str:
    import datetime as dt

    if isinstance(value, dt.datetime):  # both sides as UTC wall time, to the microsecond
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        value = value.strftime("%Y%m%d%H%M%S%f")
    return "".join(ch for ch in str(value) if ch.isalnum())


V2 = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true",
      "delta.universalFormat.enabledFormats": "iceberg"}
# IcebergCompatV3: the DELETE marks rows in deletion vectors, which Iceberg v3 readers read from Puffin files
V3 = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV3": "true", "delta.enableRowTracking": "true",
      "delta.enableDeletionVectors": "true", "delta.universalFormat.enabledFormats": "iceberg"}


def test_spark_iceberg_reads_every_version_as_delta_rs_does(spark, tmp_path):
    from deltalog.spark.operations import delete, write_dataframe
    from deltalog.spark.optimize import optimize

    try:
        jar = jars("iceberg-spark")[0]
    except MavenUnavailable as exc:
        _skip_or_fail(str(exc))
    python = _environment()

    def rows(start: int, n: int):
        return spark.sql(f"""select id, concat('page ', id % 7) as page, cast(id * 0.5 as decimal(9, 1)) as secs,
                             date_add(date'2026-05-01', cast(id % 3 as int)) as day,
                             timestamp_micros(1777593600000000 + id * 777) as at,
                             named_struct('agent', concat('a', id % 2), 'depth', cast(id % 4 as int)) as client,
                             array(id, id * 2) as marks, map('k', cast(id as int)) as tags
                             from range({start}, {start + n})""")

    requests, paths = {}, {}
    for name, conf in (("v2", V2), ("v3", V3)):
        path = paths[name] = str(tmp_path / f"visits_{name}")
        write_dataframe(rows(0, 30), path, partition_by=["day"], configuration=conf)
        write_dataframe(rows(30, 30), path)
        delete(spark, path, "id % 5 = 0")
        if name == "v3":
            delete(spark, path, "id % 5 = 1")  # a second DV for the same files: the first one's entry goes
        optimize(spark, path)
        table = ice.iceberg_table(path)
        for n in range(1, len(os.listdir(os.path.join(path, "metadata"))) + 1):
            if os.path.exists(f"{path}/metadata/v{n}.metadata.json"):
                requests[f"{name} v{n}"] = (f"{path}/metadata/v{n}.metadata.json", None,
                                            ["id", "page", "secs", "day", "at"])
        for snapshot in table.metadata.snapshots:
            requests[f"{name} snapshot {snapshot.summary['delta-version']}"] = (
                table.metadata_location, snapshot.snapshot_id,
                ["id", "client.agent", "client.depth", "marks", "tags"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HOME"))}
    env["TZ"] = "UTC"  # pyspark gives timestamps in the process's time zone
    run = subprocess.run([str(python), "-c", READER, jar, json.dumps(requests)], capture_output=True, text=True,
                         timeout=600, env=env)
    line = next((x for x in run.stdout.splitlines() if x.startswith("ROWS ")), None)
    assert run.returncode == 0 and line, run.stdout[-2000:] + run.stderr[-4000:]
    read = json.loads(line[len("ROWS "):])
    assert len(read) >= 18

    import deltalake
    import pyarrow as pa

    def delta(path, version, select: str) -> list:
        t = deltalake.DeltaTable(path, version=version)
        got = pa.table(deltalake.QueryBuilder().register("t", t).execute(f"select {select} from t").read_all())
        return sorted([_text(v) for v in r.values()] for r in got.to_pylist())

    for key, values in read.items():
        name, kind, *number = key.split()
        path = paths[name]
        if not number:
            version = int(ice.iceberg_table(path, int(kind[1:])).metadata.properties["delta-version"])
            expected = delta(path, version, "id, page, secs, day, at")
        else:
            version = int(number[0])
            expected = delta(path, version, "id, client['agent'], client['depth'], marks, tags")
        assert sorted([_text(v) for v in r] for r in values) == expected, f"{key} (Delta version {version})"
    operations = {name: [s.summary.operation.value for s in ice.iceberg_table(path).metadata.snapshots]
                  for name, path in paths.items()}
    assert operations == {"v2": ["append", "append", "overwrite", "replace"],
                          "v3": ["append", "append", "delete", "delete", "replace"]}
    assert ice.iceberg_table(paths["v3"]).metadata.format_version == 3


BY_NAME = r"""
import json, sys
from pyspark.sql import SparkSession
jar, uri, warehouse = sys.argv[1:4]
spark = (SparkSession.builder.master("local[1]").config("spark.jars", jar)
         .config("spark.sql.catalog.hms", "org.apache.iceberg.spark.SparkCatalog")
         .config("spark.sql.catalog.hms.type", "hive").config("spark.sql.catalog.hms.uri", uri)
         .config("spark.sql.catalog.hms.warehouse", warehouse)
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
rows = spark.sql("select id, item, qty from hms.analytics.orders").collect()
print("ROWS " + json.dumps(sorted([r.id, r.item, r.qty] for r in rows)))
spark.stop()
"""

ORDERS_MODEL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', table_format='iceberg') }}
select id, concat('item ', id, ' r', {{ var('round', 1) }}) as item, cast(id * {{ var('round', 1) }} as int) as qty
from range({{ (var('round', 1) - 1) * 3 }}, {{ (var('round', 1) - 1) * 3 + 6 }})
"""


def test_iceberg_engines_find_the_table_by_name_in_the_metastore(tmp_path):
    """One metastore entry for both formats: Spark sees the Delta table it always saw, and Iceberg's Hive
    catalog (table_type = ICEBERG, metadata_location) reads the newest Iceberg metadata by name."""
    from dbt.adapters.deltalog.metastore import parse_catalog
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers
    from deltalog.iceberg import latest_metadata
    from deltalog.storage import log_store_for
    from tests.support.dbt_process import dbt, write_project
    from tests.support.hive_metastore import hive_metastore, java_or_skip

    try:
        jar = jars("iceberg-spark")[0]
    except MavenUnavailable as exc:
        _skip_or_fail(str(exc))
    python = _environment()
    with hive_metastore(java_or_skip()) as metastore:
        project = write_project(tmp_path / "p", "hms_ice", {"orders.sql": ORDERS_MODEL}, spark_server=False,
                                profile_extra=f"catalog: {{type: hive, uri: '{metastore.uri}'}}\n")
        try:
            for round_ in (1, 2):
                built = dbt(project, "run", "--vars", f"{{round: {round_}}}")
                assert built.returncode == 0, built.stdout[-3000:]
        finally:
            stop_servers()
        path = str(project / "warehouse" / "analytics" / "orders")
        client = parse_catalog({"type": "hive", "uri": metastore.uri})
        assert client.location("analytics", "orders") == path  # Spark's Delta entry, as before
        with client._client() as raw:
            params = raw.get_table("analytics", "orders").parameters
        assert params["spark.sql.sources.provider"] == "delta" and params["table_type"] == "ICEBERG"
        number, _ = latest_metadata(path, log_store_for(path))
        assert params["metadata_location"].endswith(f"/metadata/v{number}.metadata.json")
        assert params["previous_metadata_location"].endswith(f"/metadata/v{number - 1}.metadata.json")

        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_HOME"))}
        run = subprocess.run([str(python), "-c", BY_NAME, jar, metastore.uri, str(tmp_path / "ice-wh")],
                             capture_output=True, text=True, timeout=600, env=env)
        line = next((x for x in run.stdout.splitlines() if x.startswith("ROWS ")), None)
        assert run.returncode == 0 and line, run.stdout[-2000:] + run.stderr[-4000:]
        expected = sorted([r["id"], r["item"], r["qty"]] for r in _rows_of(path))
        assert json.loads(line[len("ROWS "):]) == expected
        assert len(expected) == 9  # ids 0..8: round 2 updated 3..5 and added 6..8


def _rows_of(path: str) -> list:
    import deltalake
    import pyarrow as pa

    table = deltalake.DeltaTable(path)
    return pa.table(deltalake.QueryBuilder().register("t", table).execute("select id, item, qty from t")
                    .read_all()).to_pylist()
