"""delta-spark (Delta Lake's own Spark connector) beside deltalog, in one Spark session: delta-spark's
jars from Maven (tests/support/maven.py), its SQL extension and catalog, and deltalog's engine as the adapter
builds it. The session also has Spark's Kafka source (its jar for this Spark from Maven Central, which
serves none for pyspark 4.3), for the Kafka streaming tables.

delta-spark 4.4 runs on Spark 4.2: these tests need pyspark 4.2, so in the main environment (pyspark 4.3)
they skip, and `tests/integration/test_delta_spark.py` runs them in an environment of their own
(`.ci-cache/pyspark-4.2`) where they must pass.
"""
from __future__ import annotations

import pytest

from tests.support.maven import DELTA_SPARK_VERSION, MavenUnavailable, in_ci, jars

SPARK_LINE = "4.2."  # the Spark delta-spark DELTA_SPARK_VERSION is built against


def pytest_collection_modifyitems(config, items):
    import pyspark

    if pyspark.__version__.startswith(SPARK_LINE):
        return
    skip = pytest.mark.skip(reason=f"delta-spark {DELTA_SPARK_VERSION} (and the Kafka source Maven Central serves) "
                                   f"need pyspark {SPARK_LINE}x (this is "
                                   f"{pyspark.__version__}); tests/integration/test_delta_spark.py runs these "
                                   f"in an environment with it")
    for item in items:
        if "tests/delta_spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark():
    """One session with delta-spark's extension and catalog and deltalog's own settings."""
    try:
        delta_jars = (jars("delta-spark") + jars("hadoop-aws")  # S3A: the side-by-side writers on S3
                      + jars("spark-kafka"))
    except MavenUnavailable as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    import logging

    from dbt.adapters.deltalog.runtime.jvm import start_spark

    # pyspark logs every failed statement's JVM trace (our merge probes an expression against the source)
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return start_spark("local[2]", {
        "spark.jars": ",".join(delta_jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": "2",
        # delta-spark rebuilds each snapshot's state in 50 partitions by default: on these small tables and
        # two cores that is most of every read (measured: 8 s a versioned read of 500 rows, 2 s with 2)
        "spark.databricks.delta.snapshotPartitions": "2",
        # VACUUM lists the table in a Spark job of this many tasks (10,000 by default): 59 s for a table of
        # 30 files on two cores, 6 s with 4
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
        # delta-spark checks each version's .crc against the state it computes
        "spark.databricks.delta.checksum.mismatch.fatal": "true",
        "spark.databricks.delta.stateReconstructionValidation.enabled": "true",
    })
