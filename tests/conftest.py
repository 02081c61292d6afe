"""Shared pytest set-up: the repository on sys.path (the package need not be installed), one
SparkSession and one warehouse folder per test process, and dbt's adapter-test fixtures wired to
`type: deltalog`."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

pytest_plugins = ["dbt.tests.fixtures.project"]


@pytest.fixture(scope="session")
def golden():
    """The Delta Lake golden tables (../shared/conformance/delta-golden): skip outside CI, fail in CI."""
    from tests.shared_data import GOLDEN, require

    return require(GOLDEN)


@pytest.fixture(scope="session", autouse=True)
def spark_server_folder(tmp_path_factory):
    """Spark servers (spark_server: true) that tests start live in a folder of this test run, never
    the user's, and are stopped when the tests end."""
    folder = str(tmp_path_factory.mktemp("spark-servers"))
    previous = os.environ.get("DBT_DELTALOG_SERVER_DIR")
    os.environ["DBT_DELTALOG_SERVER_DIR"] = folder
    yield folder
    from dbt.adapters.deltalog.spark_server import stop_servers

    stop_servers()
    if previous is None:
        os.environ.pop("DBT_DELTALOG_SERVER_DIR", None)
    else:
        os.environ["DBT_DELTALOG_SERVER_DIR"] = previous


@pytest.fixture(scope="session")
def deltalog_warehouse(tmp_path_factory):
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="class")
def dbt_profile_target(deltalog_warehouse):
    # embedded profile: nothing but the type, a schema (set by dbt's fixtures) and where tables go;
    # Spark in this test process (the `spark` fixture's), not on a server
    return {
        "type": "deltalog",
        "threads": 2,
        "master": "local[2]",
        "spark_server": False,
        "warehouse": deltalog_warehouse,
        "spark_conf": {"spark.sql.shuffle.partitions": "2"},
    }


@pytest.fixture(scope="session")
def spark():
    """The process-wide SparkSession, built exactly as the adapter builds it (dbt tests share it)."""
    from dbt.adapters.deltalog.session import get_spark

    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "2",
                                  "spark.sql.execution.arrow.pyspark.enabled": "true"})
