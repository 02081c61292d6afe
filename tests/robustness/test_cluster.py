"""dbt on a real Spark standalone cluster (master and two one-core workers on 127.0.0.1).

The second worker runs in a private mount namespace with an empty tmpfs over one folder: to it, that
folder is another machine's local disk. So:

- a warehouse in that folder is not shared: the run fails before any model writes, naming the cause,
  and nothing appears in the warehouse (before, a table committed version 0 with no files);
- a warehouse elsewhere is shared by every worker: the models build, delta-rs reads the rows, the
  executors load the jar (fast clustering path) and shuffle partitions follow the cluster's cores;
- the engine refuses to commit when the files found hold fewer rows than Spark wrote.

Marked `cluster`: slower than the rest (two dbt processes on a cluster, about a minute).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import deltalake
import pytest

from tests.support.standalone import private_mounts_available, standalone_cluster
from tests.support.selection import full_only

pytestmark = [pytest.mark.dbt, pytest.mark.cluster]
HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = {
    # 1,000 rows into 119 groups through a shuffle: with Spark's default of 200 shuffle partitions
    # this became dozens of tiny files on a cluster
    "grouped.sql": "{{ config(materialized='table') }} "
                   "select id % 119 as k, count(*) as n from range(1000) group by id % 119",
    "clustered.sql": "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', "
                     "zorder_by=['k']) }} "
                     "select id, id % 13 as k, {{ var('run', 0) }} as run from range({{ 200 + var('run', 0) * 50 }})"
                     "{% if is_incremental() %} where id >= 150 {% endif %}",
}


def _project(root: str, warehouse: str, master: str, storage_options: dict | None = None,
             spark_conf: dict | None = None) -> str:
    project = os.path.join(root, "project")
    os.makedirs(os.path.join(project, "models"))
    with open(os.path.join(project, "dbt_project.yml"), "w") as f:
        f.write("name: on_cluster\nversion: '1.0'\nprofile: on_cluster\nconfig-version: 2\n")
    with open(os.path.join(project, "profiles.yml"), "w") as f:
        f.write(textwrap.dedent(f"""\
            on_cluster:
              target: dev
              outputs:
                dev:
                  type: deltalog
                  schema: analytics
                  threads: 1
                  master: {master}
                  warehouse: {warehouse}
                  spark_conf:
                    spark.driver.host: 127.0.0.1
                    spark.driver.bindAddress: 127.0.0.1
                    spark.executor.memory: 1g
                    spark.cores.max: "2"
            """))
        f.write("".join(f"        {k}: '{v}'\n" for k, v in (spark_conf or {}).items()))
        if storage_options:
            f.write("      storage_options:\n"
                    + "".join(f"        {k}: '{v}'\n" for k, v in storage_options.items()))
    for name, sql in MODELS.items():
        with open(os.path.join(project, "models", name), "w") as f:
            f.write(sql)
    return project


def _run(master: str, project: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, os.path.join(HERE, "cluster_child.py"), master, project, *args],
                          capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("CLUSTER-CHILD "):
            return json.loads(line[len("CLUSTER-CHILD "):]) | {"output": proc.stdout}
    raise AssertionError(f"dbt on the cluster printed no report (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _check_first_run(report: dict, master: str) -> None:
    """The first `dbt run` succeeded on the cluster, with the jar on its executors."""
    assert report["success"], report["output"][-4000:]
    assert report["master"] == master
    assert report["jar_on_executors"] is True
    assert report["shuffle_partitions"] == "4"  # 2 executor cores x 2


def _check_tables(grouped, clustered) -> None:
    """The tables after both runs, as delta-rs reads them: the clustered model merged once and clustered
    after each run."""
    assert sorted((r["k"], r["n"]) for r in grouped.to_pyarrow_table().to_pylist()) == sorted(
        (k, sum(1 for i in range(1000) if i % 119 == k)) for k in range(119))
    got = sorted((r["id"], r["k"], r["run"]) for r in clustered.to_pyarrow_table().to_pylist())
    assert got == sorted([(i, i % 13, 0) for i in range(150)] + [(i, i % 13, 1) for i in range(150, 250)])
    operations = [h["operation"] for h in clustered.history()]
    assert operations.count("MERGE") == 1 and operations.count("OPTIMIZE") == 2, operations


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = private_mounts_available()
    if why:
        pytest.skip(f"cluster tests need a worker in a private mount namespace: {why}")
    private = str(tmp_path_factory.mktemp("workers_own_disk"))
    with standalone_cluster(workers=2, cores=1, memory="1536m", private_folders=[private]) as c:
        c.private_folder = private
        yield c


def test_local_warehouse_that_executors_do_not_share_fails_before_writing(cluster, tmp_path):
    warehouse = os.path.join(cluster.private_folder, "warehouse")
    project = _project(str(tmp_path), warehouse, cluster.master_url)
    report = _run(cluster.master_url, project, "run")
    assert not report["success"]
    assert "do not share" in report["output"] and "network file system" in report["output"], report["output"][-3000:]
    # nothing was written: no schema folder, no table, no probe files left behind
    assert not os.path.exists(os.path.join(warehouse, "analytics"))
    assert [e for e in os.listdir(warehouse) if not e.startswith(".")] == []
    assert not os.path.exists(os.path.join(warehouse, ".deltalog-shared-check")) or \
        os.listdir(os.path.join(warehouse, ".deltalog-shared-check")) == []


@full_only("the S3 build below runs the same models on this cluster, and test_executor_loss.py builds a table "
           "model and a merge on a cluster's shared local warehouse")
def test_shared_warehouse_builds_on_the_cluster(cluster, tmp_path):
    warehouse = str(tmp_path / "warehouse")
    project = _project(str(tmp_path), warehouse, cluster.master_url)
    _check_first_run(_run(cluster.master_url, project, "run", "--vars", "{run: 0}"), cluster.master_url)
    grouped = deltalake.DeltaTable(os.path.join(warehouse, "analytics", "grouped"))
    assert len(grouped.file_uris()) <= 4

    second = _run(cluster.master_url, project, "run", "--vars", "{run: 1}", "--select", "clustered")
    assert second["success"], second["output"][-4000:]
    _check_tables(grouped, deltalake.DeltaTable(os.path.join(warehouse, "analytics", "clustered")))


@pytest.mark.parametrize("connector", [pytest.param(False, marks=full_only(
    "the same build through S3A below; Python workers writing to S3 with pyarrow: test_object_store_warehouse.py's "
    "S3 build")),
    True], ids=["pyarrow", "s3a"])
def test_s3_warehouse_builds_on_the_cluster_with_the_other_machine_writing(cluster, tmp_path, connector):
    """The worker in the private namespace writes its files straight to S3: nothing is stranded on its
    disk, every row lands, delta-rs reads them from the bucket. Through pyarrow's file system, and
    through Spark's S3A connector (shipped to the executors with `spark.jars`)."""
    from tests.support.hadoop_aws import WHY_SKIPPED, connector_jars, s3a_spark_conf
    from tests.support.seaweed import seaweedfs_or_skip

    if connector and not connector_jars():
        pytest.skip(WHY_SKIPPED)
    with seaweedfs_or_skip() as s3:
        options = s3.storage_options()
        project = _project(str(tmp_path), s3.uri("wh"), cluster.master_url, options,
                           s3a_spark_conf() if connector else None)
        _check_first_run(_run(cluster.master_url, project, "run", "--vars", "{run: 0}"), cluster.master_url)
        log = open(os.path.join(project, "logs", "dbt.log"), errors="replace").read()
        assert ("Spark's own Parquet writer" in log) == connector
        assert ("(org.apache.hadoop.fs.s3a.S3AFileSystem) is on the class path" in log) == connector
        second = _run(cluster.master_url, project, "run", "--vars", "{run: 1}", "--select", "clustered")
        assert second["success"], second["output"][-4000:]
        _check_tables(deltalake.DeltaTable(s3.uri("wh", "analytics", "grouped"), storage_options=options),
                      deltalake.DeltaTable(s3.uri("wh", "analytics", "clustered"), storage_options=options))
        assert not os.path.exists(os.path.join(project, "warehouse"))


def test_engine_never_commits_rows_it_cannot_see(cluster):
    """Without the adapter's check: the executor on the 'other machine' writes its files to its own
    disk; both write methods refuse to commit instead of committing a table missing those rows."""
    table = os.path.join(cluster.private_folder, "engine", "t")
    report = _run(cluster.master_url, "--engine-write", table)
    for method in ("native", "arrow"):
        assert report[method].get("error") == "IncompleteWriteError", report
        assert "Spark wrote 1000 row(s)" in report[method]["message"]
    assert not os.path.exists(os.path.join(table, "_delta_log"))


# The README project on the cluster, on a few models that cover every kind of node (seeds, views,
# tables with Z-order, an incremental merge, a python model, a snapshot): the whole project twice on a
# two-core cluster would not fit CI's time.
SHOP_SELECTION = ["--select", "+orders_merge +dim_customers +product_sales +orders_snapshot",
                  "--indirect-selection", "cautious"]  # not the tests that also need unselected models
SHOP_BATCH_2 = ["--vars", "{shop_batch: 2}", "--event-time-start", "2026-10-01", "--event-time-end", "2026-11-01"]
RUN_TIME_COLUMNS = {"dbt_valid_from", "dbt_valid_to", "dbt_updated_at", "dbt_scd_id", "first_loaded_at"}


def _shop_project(root: str, profile_lines: list[str]) -> str:
    import shutil

    project = os.path.join(root, "integration_tests")
    shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(HERE)), "integration_tests"), project,
                    ignore=shutil.ignore_patterns("target", "logs", "warehouse", "dbt_packages", "metastore_db",
                                                  "spark-warehouse", "derby.log"))
    with open(os.path.join(project, "profiles.yml"), "a") as f:
        f.write("      spark_server: false\n" + "".join(f"      {line}\n" for line in profile_lines))
    return project


def _rows(table) -> list:
    keep = [c for c in table.column_names if c not in RUN_TIME_COLUMNS]
    return sorted((tuple(r[c] for c in keep) for r in table.select(keep).to_pylist()), key=repr)


@full_only("the S3 warehouse case above builds on the cluster with S3 and a second writer")
def test_the_shop_project_on_s3_from_the_cluster_holds_the_local_build_rows(cluster, tmp_path):
    """integration_tests/ (the selection above, both batches) with `warehouse: s3://…` on the cluster, the
    worker on the 'other machine' writing too: every table delta-rs reads from S3 holds the rows of the
    same selection built on local disk by the embedded Spark. Through Spark's S3A connector where its
    jars are here, else through pyarrow."""
    from tests.support.hadoop_aws import connector_jars, s3a_spark_conf
    from tests.support.seaweed import seaweedfs_or_skip

    names = ["customers", "products", "orders", "order_items", "payments", "fct_orders", "dim_customers",
             "product_sales", "orders_merge", "orders_snapshot"]
    schema_of = {"customers": "shop_raw", "products": "shop_raw", "orders": "shop_raw", "order_items": "shop_raw",
                 "payments": "shop_raw", "orders_snapshot": "shop_snapshots"}
    local = _shop_project(str(tmp_path / "local"), [])
    for args in (["build", *SHOP_SELECTION], ["build", *SHOP_SELECTION, *SHOP_BATCH_2]):
        report = _run("local[2]", local, *args)
        assert report["success"], report["output"][-4000:]
    with seaweedfs_or_skip() as s3:
        options = s3.storage_options()
        spark_conf = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                      "spark.executor.memory": "1g", "spark.cores.max": "2",
                      **(s3a_spark_conf() if connector_jars() else {})}
        remote = _shop_project(str(tmp_path / "cluster"), [
            f"master: {cluster.master_url}", f"warehouse: {s3.uri('shop_wh')}", "storage_options:",
            *[f"  {k}: '{v}'" for k, v in options.items()], "spark_conf:",
            *[f"  {k}: '{v}'" for k, v in spark_conf.items()]])
        for args in (["build", *SHOP_SELECTION], ["build", *SHOP_SELECTION, *SHOP_BATCH_2]):
            report = _run(cluster.master_url, remote, *args)
            assert report["success"], report["output"][-4000:]
            assert report["master"] == cluster.master_url
        for name in names:
            schema = schema_of.get(name, "shop")
            expected = deltalake.DeltaTable(os.path.join(local, "warehouse", schema, name)).to_pyarrow_table()
            got = deltalake.DeltaTable(s3.uri("shop_wh", schema, name), storage_options=options).to_pyarrow_table()
            assert got.num_rows == expected.num_rows > 0, name
            assert _rows(got) == _rows(expected), name
