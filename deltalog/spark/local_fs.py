"""Faster local writes for a Spark the process starts itself.

Without Hadoop's native library (pyspark ships none), Hadoop's local file system runs the `chmod`
program for every file and folder it creates: three processes per Parquet file, ~10 ms each, which
made a 256-file OPTIMIZE spend seconds forking. `jars/deltalog-hadoop.jar` (source and build script
in `java/`) holds a subclass that sets permissions with a system call and writes no `.crc` files.

Only for a local master whose JVM is not yet running: the class must be on the driver's class path
from the start, and executors elsewhere would not have it.
"""
from __future__ import annotations

import os

JAR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars", "deltalog-hadoop.jar")
FILE_SYSTEM_CLASS = "io.deltalog.hadoop.NoForkLocalFileSystem"


def local_file_system_conf(conf: dict[str, str]) -> dict[str, str]:
    """Settings to add to `conf` (a new local session's) for the no-fork local file system; none when
    the jar is missing or the user chose another file system for file:// paths."""
    if not os.path.exists(JAR) or conf.get("spark.hadoop.fs.file.impl"):
        return {}
    class_path = conf.get("spark.driver.extraClassPath")
    return {
        "spark.driver.extraClassPath": JAR if not class_path else class_path + os.pathsep + JAR,
        "spark.hadoop.fs.file.impl": FILE_SYSTEM_CLASS,
    }
