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

# The files that take minutes, slowest first (measured in a CI run). xdist (`--dist loadfile`) hands whole
# files to the two workers, in collection order once its own reordering (by number of tests, which put
# these one-test files last) is off: starting with the longest lets both workers finish together instead
# of one running the nested suites alone at the end.
SLOWEST_FIRST = [
    "tests/integration/test_delta_spark.py",
    "tests/robustness/test_cluster.py",
    "tests/integration/test_object_store_warehouse.py",
    "tests/integration/test_dbt_spark_suite.py",
    "tests/robustness/test_s3_spark_writers.py",
    "tests/integration/test_dbt_minor_versions.py",
    "tests/integration/test_spark_connect.py",
    "tests/integration/test_soak.py",
    "tests/integration/test_iceberg_spark.py",
    "tests/robustness/test_random_kills.py",
    "tests/robustness/test_load_dbt.py",
    "tests/robustness/test_streaming_kills.py",
    "tests/functional/test_hive_metastore.py",
    "tests/functional/test_spark_server.py",
    "tests/functional/test_change_data_feed.py",
    "tests/functional/test_three_part_names.py",
    "tests/robustness/test_crash.py",
    "tests/robustness/test_executor_loss.py",
    "tests/spark/test_deletion_vectors_spark.py",
    "tests/robustness/test_concurrent_spark.py",
    "tests/integration/test_shop_project.py",
    "tests/functional/test_day_two.py",
    "tests/maintenance/test_zorder.py",
    "tests/functional/test_incremental_suites.py",
    "tests/functional/test_session.py",
    "tests/functional/test_in_process_is_spark.py",
]


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# Folders whose tests start no local JVM of this environment's Spark, or a few (tests/delta_spark runs in a
# pyspark 4.2 environment of its own, one session per worker): recording an archive first would cost more
# than it saves.
_FEW_JVMS = ("tests/engine", "tests/docs", "tests/fuzz", "tests/delta_spark")


def pytest_sessionstart(session):
    """The local driver's class archive, recorded before the first test when this Java and Spark have
    none. The suite's few hundred JVM starts then map it (a third faster each). A command's own recorder
    (runtime/archive_recorder.py) waits for an idle machine, which a running suite never is: in a fresh
    clone every JVM of the run would start without one. Only for a run of whole folders (the suite, a
    group), not of named files (a developer's one test, the nested runs' selections), where the recording
    (about 50 s) would cost more than it saves. Once, in the controller, before xdist's workers start; in a
    process of its own, so this one never holds a JVM."""
    if hasattr(session.config, "workerinput"):
        return
    args = [str(a).split("::")[0] for a in session.config.args] or ["."]
    folders = [os.path.relpath(os.path.abspath(a), ROOT).replace(os.sep, "/") for a in args if os.path.isdir(a)]
    if not folders or len(folders) < len(args) or all(f.startswith(_FEW_JVMS) for f in folders):
        return
    import json
    import subprocess

    from dbt.adapters.deltalog.runtime.jvm import session_conf
    from deltalog.spark import class_archive

    master, spark_conf = "local[2]", {"spark.sql.shuffle.partitions": "2"}
    conf = session_conf(master, spark_conf)
    if class_archive.driver_options(conf, conf.get("spark.driver.extraClassPath", ""))[1] is None:
        return  # there already, or sharing is off
    subprocess.run([sys.executable, "-m", "dbt.adapters.deltalog.runtime.archive_recorder"],
                   input=json.dumps({"master": master, "spark_conf": spark_conf}), text=True,
                   env={**os.environ, "DELTALOG_ARCHIVE_RECORDER_YIELDS": "0"},
                   capture_output=True, timeout=600, check=False)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}

    def order(item):
        path = os.path.relpath(str(item.fspath), ROOT).replace(os.sep, "/")
        return rank.get(path, len(rank))

    items.sort(key=order)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def golden():
    """The Delta Lake golden tables (../shared/conformance/delta-golden): skip outside CI, fail in CI."""
    from tests.support.shared_data import GOLDEN, require

    return require(GOLDEN)


@pytest.fixture(scope="session", autouse=True)
def spark_server_folder(tmp_path_factory):
    """Spark servers (spark_server: true) that tests start live in a folder of this test run, never
    the user's, and are stopped when the tests end."""
    folder = str(tmp_path_factory.mktemp("spark-servers"))
    previous = os.environ.get("DBT_DELTALOG_SERVER_DIR")
    os.environ["DBT_DELTALOG_SERVER_DIR"] = folder
    yield folder
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

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
    from dbt.adapters.deltalog.runtime.session import get_spark

    return get_spark("local[2]", {"spark.sql.shuffle.partitions": "2",
                                  "spark.sql.execution.arrow.pyspark.enabled": "true"})
