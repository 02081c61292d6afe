"""Spark's S3A connector for tests of the native data path on S3: Apache `hadoop-aws` at the version of the
Hadoop this pyspark ships (pyspark 4.3: 3.5.0) and the AWS SDK modules it calls (not the 690 MB bundle),
resolved from Maven Central by `tests/support/maven.py` into `.ci-cache/maven/hadoop-aws` (never part of the
product's install). `$DELTALOG_HADOOP_AWS_JARS` (a folder of jars) points elsewhere. Tests skip, saying
why, without them; in CI they fail."""
from __future__ import annotations

import glob
import os

from tests.support.maven import MavenUnavailable, in_ci, jars

WHY_SKIPPED = ("Spark's S3A connector (org.apache.hadoop:hadoop-aws) could not be resolved from Maven Central "
               "(tests/support/maven.py needs `mvn` and a reachable repository)")


def connector_jars() -> list[str]:
    """The connector's jars, or [] (then `WHY_SKIPPED` says why; in CI, an error instead)."""
    folder = os.environ.get("DELTALOG_HADOOP_AWS_JARS")
    if folder:
        return sorted(glob.glob(os.path.join(folder, "*.jar")))
    try:
        return jars("hadoop-aws")
    except MavenUnavailable as exc:
        if in_ci():
            raise
        print(f"{WHY_SKIPPED}: {exc}")
        return []


def s3a_spark_conf() -> dict[str, str]:
    """Spark settings that put the connector on the class path; the connector matches Spark's Hadoop, so
    its own defaults stand."""
    return {"spark.jars": ",".join(connector_jars())}
