"""Spark's S3A connector for tests of the native data path on S3: the Apache `hadoop-aws` jar and the AWS
SDK bundle it calls. No Maven repository is reachable here, but PyPI's `sagemaker_pyspark` sdist carries
both (hadoop-aws 3.3.1); `.ci/run` extracts them into `.ci-cache/hadoop-aws`. `$DELTALOG_HADOOP_AWS_JARS`
(a folder) points elsewhere. Tests skip, saying so, without them."""
from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHY_SKIPPED = ("Spark's S3A connector jars are not here (.ci/run extracts hadoop-aws and the AWS SDK bundle "
               "from PyPI's sagemaker_pyspark into .ci-cache/hadoop-aws)")


def connector_jars() -> list[str]:
    folder = os.environ.get("DELTALOG_HADOOP_AWS_JARS") or os.path.join(ROOT, ".ci-cache", "hadoop-aws")
    jars = sorted(glob.glob(os.path.join(folder, "hadoop-aws-*.jar")) + glob.glob(os.path.join(folder, "aws-java-sdk-bundle-*.jar")))
    return jars if len(jars) == 2 else []


def s3a_spark_conf() -> dict[str, str]:
    """Spark settings that put the connector on the class path. hadoop-aws 3.3.1 is older than this
    Spark's Hadoop (3.4+): it reads some of the newer defaults wrongly (durations written `60s`, the
    SDK v2 credential providers), so those are given in the form it reads. A cluster would use the
    hadoop-aws matching its Hadoop and need none of them."""
    return {
        "spark.jars": ",".join(connector_jars()),
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.threads.keepalivetime": "60",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "30000",
        "spark.hadoop.fs.s3a.connection.timeout": "200000",
        "spark.hadoop.fs.s3a.multipart.purge.age": "86400",
    }
