"""The README's project built with `warehouse: s3://…` on a real S3 server (SeaweedFS on 127.0.0.1,
started here), on a local Spark the builds share (spark_server): both batches build, and every table
delta-rs reads back from S3 holds exactly the rows of the same project built on local disk. Twice: as
the Spark here is (no S3 connector: executors write files at their final keys with pyarrow, a Python
data source reads them), and, in the full suite, with Spark's S3A connector on its class path
(hadoop-aws, tests/support/hadoop_aws.py: Spark's own Parquet writer through the jar's DirectCommitProtocol, and
its own reader). The log goes through obstore's put-if-absent either way."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.shop_project import BATCH_2, EVERY_KIND, SCHEMA_OF, SPARK_LITTER
from tests.support.hadoop_aws import WHY_SKIPPED as NO_CONNECTOR, connector_jars, s3a_spark_conf
from tests.support.seaweed import seaweedfs_or_skip
from tests.support.selection import FULL, full_only

deltalake = pytest.importorskip("deltalake")

pytestmark = [pytest.mark.dbt, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
# Columns that hold the time of the run (snapshots' validity and its hash, a load time): not compared.
RUN_TIME_COLUMNS = {"dbt_valid_from", "dbt_valid_to", "dbt_updated_at", "dbt_scd_id", "first_loaded_at"}


@pytest.fixture(scope="module", autouse=True)
def spark_servers():
    """The builds share a local Spark server (spark_server: true), as a user's commands do: one JVM start
    instead of one per command. Stopped when the module ends."""
    yield
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

    stop_servers()


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        yield server


def _s3_lines(s3, prefix: str) -> list[str]:
    return ([f"warehouse: {s3.uri(prefix)}", "storage_options:"]
            + [f"  {k}: '{v}'" for k, v in s3.storage_options().items()])


def _project(base: Path, warehouse_lines: list[str]) -> Path:
    project = base / "integration_tests"
    shutil.copytree(ROOT / "integration_tests", project, ignore=shutil.ignore_patterns(
        "target", "logs", "warehouse", "dbt_packages", *SPARK_LITTER))
    profiles = project / "profiles.yml"
    profiles.write_text(profiles.read_text().rstrip("\n") + "\n      spark_server: true\n"
                        + "".join(f"      {line}\n" for line in warehouse_lines))
    return project


# The suite builds the models that cover every kind of node on S3 (EVERY_KIND); test_shop_project.py
# builds the whole project on local disk. DELTALOG_FULL_SUITE=1 builds the whole project on S3.
SELECTION = EVERY_KIND
TABLES = sorted(SCHEMA_OF) if FULL else ["customers", "dim_customers", "fct_orders", "orders", "orders_merge",
                                              "orders_snapshot", "payments", "payments_daily", "product_sales"]


# Through S3A the full suite builds a smaller selection still holding seeds, views, an incremental merge, a
# replace_where model and a snapshot (each a different write through Spark's S3A connector). CI's selection
# leaves it out: test_cluster.py builds models through S3A on a cluster, and test_spark_native_s3.py runs
# writes, DML with deletion vectors, OPTIMIZE, VACUUM and a failed write through S3A in a session.
THROUGH_S3A = full_only("dbt builds through S3A run on the cluster (tests/robustness/test_cluster.py); writes, "
                        "DML, OPTIMIZE and VACUUM through S3A in tests/spark/test_spark_native_s3.py")
S3A_SELECTION = ["--select", "+orders_merge +orders_snapshot +payments_daily", "--indirect-selection", "cautious"]
S3A_TABLES = TABLES if FULL else ["orders", "orders_merge", "orders_snapshot", "payments", "payments_daily"]


def _build_both_batches(project: Path, selection: list[str] | None = None) -> list[str]:
    """Each build in its own dbt process: an adapter holding an s3:// warehouse must not outlive it in
    this test process, whose other dbt tests use local warehouses."""
    import json
    import subprocess
    import sys

    dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
    failures = []
    for args in (["build", *(selection or [])], ["build", *(selection or []), *BATCH_2]):
        proc = subprocess.run([dbt, *args, "--profiles-dir", str(project), "--project-dir", str(project)],
                              cwd=project, capture_output=True, text=True, timeout=1200)
        results = json.loads((project / "target" / "run_results.json").read_text())["results"]
        failures += [f"{r['unique_id']}: {r['status']}: {r.get('message')}" for r in results
                     if r["status"] not in ("success", "pass")]
        if proc.returncode != 0 and not failures:
            failures.append(f"dbt {' '.join(args)} exit {proc.returncode}: {proc.stdout[-2000:]}")
    return failures


@pytest.fixture(scope="module")
def builds(s3, tmp_path_factory):
    local = _project(tmp_path_factory.mktemp("local"), [])
    remote = _project(tmp_path_factory.mktemp("s3"), _s3_lines(s3, "wh"))
    selection = None if FULL else SELECTION
    return {"local": (local, _build_both_batches(local, selection)),
            "s3": (remote, _build_both_batches(remote, selection))}


@pytest.fixture(scope="module")
def s3a_build(builds, s3, tmp_path_factory):
    """The project on S3 again, in a Spark that has the S3A connector."""
    if not connector_jars():
        pytest.skip(NO_CONNECTOR)
    spark_conf = ["spark_conf:"] + [f"  {k}: '{v}'" for k, v in s3a_spark_conf().items()]
    project = _project(tmp_path_factory.mktemp("s3a"), _s3_lines(s3, "wh_s3a") + spark_conf)
    return project, _build_both_batches(project, None if FULL else S3A_SELECTION)


def _rows(table: pa.Table) -> list[tuple]:
    keep = [c for c in table.column_names if c not in RUN_TIME_COLUMNS]
    return sorted((tuple(r[c] for c in keep) for r in table.select(keep).to_pylist()), key=repr)


def test_the_project_builds_on_s3_as_on_local_disk(builds):
    assert builds["local"][1] == []
    assert builds["s3"][1] == []


@pytest.mark.parametrize("name", TABLES)
def test_each_table_on_s3_holds_the_rows_of_the_local_build(builds, s3, name):
    _same_as_local(builds, s3, "wh", name)


@THROUGH_S3A
def test_the_project_builds_through_spark_s3a_connector(s3a_build):
    assert s3a_build[1] == []


@THROUGH_S3A
@pytest.mark.parametrize("name", S3A_TABLES)
def test_each_table_written_through_s3a_holds_the_rows_of_the_local_build(builds, s3a_build, s3, name):
    _same_as_local(builds, s3, "wh_s3a", name)


@THROUGH_S3A
def test_the_log_says_spark_s3a_connector_serves_the_data(s3a_build, s3):
    log = (s3a_build[0] / "logs" / "dbt.log").read_text(errors="replace")
    assert "written and read by Spark's own Parquet writer" in log
    assert "(org.apache.hadoop.fs.s3a.S3AFileSystem) is on the class path" in log
    assert "through pyarrow's file system" not in log
    assert s3.storage_options()["AWS_SECRET_ACCESS_KEY"] not in log
    # nothing staged, renamed or listed beside the tables: only what the logs name
    from deltalog.storage import files as filesystem

    keys = [i.path for i in filesystem.list_files(s3.uri("wh_s3a"), storage_options=s3.storage_options())]
    assert not [k for k in keys if "_delta_staging" in k or "_temporary" in k or k.endswith("_SUCCESS")]


def _same_as_local(builds, s3, prefix: str, name: str) -> None:
    local_project, _ = builds["local"]
    local = deltalake.DeltaTable(str(local_project / "warehouse" / SCHEMA_OF[name] / name))
    remote = deltalake.DeltaTable(s3.uri(prefix, SCHEMA_OF[name], name), storage_options=s3.storage_options())
    assert remote.schema().to_arrow() == local.schema().to_arrow()
    expected = local.to_pyarrow_table()
    got = remote.to_pyarrow_table()
    assert got.num_rows == expected.num_rows > 0
    assert _rows(got) == _rows(expected)
    # the same kinds of commits, in the same order
    assert [h["operation"] for h in remote.history()] == [h["operation"] for h in local.history()]


def test_views_and_schemas_live_in_the_bucket(builds, s3):
    from deltalog.storage import files as filesystem

    options = s3.storage_options()
    schemas = {i.path for i in filesystem.list_files(s3.uri("wh"), recursive=False, storage_options=options)}
    assert {"shop", "shop_raw", "shop_snapshots", "shop_staging"} <= schemas
    sql = filesystem.read_bytes(s3.uri("wh", "shop_staging", "stg_orders.view.sql"), options).decode()
    assert "select" in sql.lower()
    assert not any(p in SPARK_LITTER for p in os.listdir(builds["s3"][0]))
    assert not (builds["s3"][0] / "warehouse").exists(), "an s3:// warehouse must not become a local folder"


def test_the_log_says_which_data_path_is_in_use_and_keeps_secrets_out(builds, s3):
    log = (builds["s3"][0] / "logs" / "dbt.log").read_text(errors="replace")
    assert "through pyarrow's file system" in log
    assert "no Hadoop connector for s3a://" in log and "hadoop-aws" in log
    assert s3.storage_options()["AWS_SECRET_ACCESS_KEY"] not in log
