"""What differs when the SparkSession is a Spark Connect client (`sc://host:port`) rather than a JVM
this process drives through Py4J.

Over Connect this process holds no SparkContext and no JVM: DataFrames, SQL, `mapInArrow` and session
settings reach the server; `sparkContext`, RDDs and Py4J calls do not. The engine therefore asks the
few things it used the SparkContext for (the master, the default parallelism, an empty DataFrame)
through here, and takes the plain-Spark paths where it would have called the jar's classes through
Py4J (see embedded.py): same results, computed with Spark expressions.
"""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)



def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (pyspark.sql.connect.session.SparkSession). Told by
    its class's module: importing Connect's module needs grpc, which a classic install may lack."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master(spark: Any) -> str:
    """The session's master URL (over Connect, the server's)."""
    if is_connect(spark):
        return spark.conf.get("spark.master", "") or ""
    return spark.sparkContext.master


def default_parallelism(spark: Any) -> int:
    """Spark's default parallelism: the cores of a local master, the executors' total cores on a
    cluster. Over Connect, read once per session from how many partitions Spark splits a range into
    (one small job: the server does not tell it otherwise)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    known = getattr(spark, "_deltalog_parallelism", None)
    if known is None:
        from pyspark.sql import functions as F

        known = max(1, spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).distinct().count())
        spark._deltalog_parallelism = known
    return known


def empty_dataframe(spark: Any, schema: Any) -> Any:
    """A DataFrame of no rows with `schema` (over Connect there is no empty RDD to build it from)."""
    if is_connect(spark):
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)
