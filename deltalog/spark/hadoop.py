"""The Hadoop side of an object-store table: the same storage options delta-rs takes, spelled as the
settings of Spark's Hadoop connectors (S3A, ABFS, the GCS connector), and whether this Spark has the
connector for a URI's scheme at all.

`hadoop_settings` spells the options per bucket or account where Hadoop allows it
(`StorageOptions.hadoop_settings`, the one place options are translated for Hadoop). `apply` puts them
into the session's Hadoop configuration, which every later file scan and write of the session (and its
executors) uses. `connector` tells whether the JVM can load the
file system class for a scheme, and why not.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..storage.options import StorageOptions
from .connect import is_connect

# The Hadoop scheme Spark reads a URI of each object-store scheme through.
HADOOP_SCHEME = {"s3": "s3a", "s3a": "s3a", "gs": "gs", "gcs": "gs", "az": "abfss", "abfs": "abfs",
                 "abfss": "abfss", "azure": "abfss", "adl": "abfss"}
# Where each connector comes from, for the message when it is missing.
CONNECTOR_PACKAGE = {"s3a": "org.apache.hadoop:hadoop-aws (matching this Spark's Hadoop version)",
                     "abfss": "org.apache.hadoop:hadoop-azure (matching this Spark's Hadoop version)",
                     "abfs": "org.apache.hadoop:hadoop-azure (matching this Spark's Hadoop version)",
                     "gs": "com.google.cloud.bigdataoss:gcs-connector"}


def hadoop_settings(uri: str, storage_options: StorageOptions | dict[str, Any] | None) -> dict[str, str]:
    """Hadoop configuration keys (without `spark.hadoop.`) that reach `uri` with `storage_options`."""
    return StorageOptions.of(storage_options).hadoop_settings(uri)


def apply(spark: Any, uri: str, storage_options: dict[str, Any] | None) -> dict[str, str]:
    """Put `hadoop_settings` into the session's Hadoop configuration, leaving keys the user set
    (e.g. `spark.hadoop.fs.s3.impl` in spark_conf) alone. Returns what was set. Nothing over Spark
    Connect, where the server's Hadoop configuration is out of reach (tasks use pyarrow there)."""
    if is_connect(spark):
        return {}
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    applied = {}
    for key, value in hadoop_settings(uri, storage_options).items():
        if key == "fs.s3.impl" and conf.get(key) is not None:
            continue
        conf.set(key, value)
        applied[key] = value
    return applied


def connector(spark: Any, uri: str) -> tuple[str | None, str]:
    """(the Hadoop file system class for `uri`'s scheme, or None; why, in words)."""
    scheme = HADOOP_SCHEME.get(urlparse(str(uri)).scheme.lower())
    if scheme is None:
        return None, f"no Hadoop scheme for {uri}"
    if is_connect(spark):
        return None, (f"over Spark Connect this process cannot tell whether the server has a Hadoop connector "
                      f"for {scheme}:// nor hand it the store's settings")
    jvm = spark.sparkContext._jvm
    try:
        cls = jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(
            scheme, spark.sparkContext._jsc.hadoopConfiguration())
        return cls.getName(), f"Spark's {scheme} connector ({cls.getName()}) is on the class path"
    except Exception as exc:  # Py4J wraps UnsupportedFileSystemException / ClassNotFoundException
        first = str(exc).strip().splitlines()
        cause = next((ln for ln in first if "Exception" in ln), first[0] if first else type(exc).__name__)
        return None, (f"this Spark has no Hadoop connector for {scheme}:// ({cause.strip()[:160]}); it comes "
                      f"with {CONNECTOR_PACKAGE.get(scheme, 'a Hadoop file system package')}")


# Schemes whose URIs Spark's connector takes as they are (with `fs.s3.impl` set, s3:// too); `az://`
# names a container but no account, which ABFS needs in the host.
_AS_GIVEN = {"s3", "s3a", "gs", "abfs", "abfss"}
DIRECT_COMMIT_PROTOCOL = "write.DirectCommitProtocol"


def native_io(spark: Any, uri: str, task_options: dict[str, str] | None = None) -> tuple[bool, str]:
    """(whether Spark's own Parquet reader and writer serve the table at `uri` on an object store, why).

    They do where the JVM has the scheme's Hadoop connector and every task can load the jar's
    `DirectCommitProtocol` (writes at final keys, no rename). The store's options become the session's
    Hadoop settings for the bucket or account first. Otherwise executors read and write through
    pyarrow's file systems. `task_options`: the table store's (`LogStore.task_options`); without them,
    those configured for `uri`."""
    from ..storage.files import task_storage_options
    from .embedded import has_jar_class

    scheme = urlparse(str(uri)).scheme.lower()
    if is_connect(spark):
        return False, ("over Spark Connect this process can neither see the server's Hadoop connectors nor "
                       "hand it the store's settings, so the server's tasks use pyarrow's file systems")
    if scheme not in _AS_GIVEN:
        hint = (" (give the warehouse as abfss://<container>@<account>.dfs.core.windows.net/… for Spark's ABFS "
                "connector)" if HADOOP_SCHEME.get(scheme) == "abfss" else "")
        return False, f"Spark's Hadoop connectors do not take {scheme}:// URIs{hint}"
    sc = spark.sparkContext
    applied = sc.__dict__.setdefault("_deltalog_hadoop_applied", set())
    options = task_options if task_options is not None else task_storage_options(uri)
    key = (uri, tuple(sorted(options.items())))
    if key not in applied:
        apply(spark, uri, options)
        applied.add(key)
    decided = sc.__dict__.setdefault("_deltalog_native_io", {})
    if scheme not in decided:
        found, why = connector(spark, uri)
        if found is not None and not has_jar_class(spark, DIRECT_COMMIT_PROTOCOL):
            found, why = None, f"{why}, but not every task can load this package's jar (io.deltalog.{DIRECT_COMMIT_PROTOCOL})"
        decided[scheme] = (found is not None, why)
    return decided[scheme]
