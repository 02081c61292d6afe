"""Settings for a local Spark whose JVM this process starts (the adapter's embedded default).

- No `chmod` process per file. Without Hadoop's native library (pyspark ships none), Hadoop's local
  file system runs the `chmod` program for every file and folder it creates: three processes per
  Parquet file, ~10 ms each, which made a 256-file OPTIMIZE spend seconds forking.
  `jars/deltalog-spark.jar` (source and build script in `java/`) holds a subclass that sets
  permissions with a system call and writes no `.crc` files.
- Clustering's per-row work in JVM code: `io.deltalog.cluster` ranks values among sampled cut points
  with a branch-free search, keys strings straight from their bytes and computes curve keys
  (zorder.py uses them when `runs_jar_classes`, over Spark Connect too, where the jar is an artifact
  of the session; other sessions get the same numbers from plain Spark expressions).
- Deletion vectors in JVM code: `io.deltalog.dv.DeletedRows` tells a scanned row (file, row index)
  deleted by looking its file up once per run of rows (reader.py, when `has_jar_class`; otherwise an
  anti-join on the row index).
- Large generated methods are JIT-compiled. The JVM leaves methods over 8,000 bytes of bytecode
  interpreted; a query with many projections (the Hilbert curve's ~40 bit steps) is generated as one
  such method and ran 7x slower for it.

Only for a JVM not yet running: class path and JVM options are fixed when it starts. A cluster's
executors get the jar through `spark.jars`; whether they load it is checked once (`cluster.py`).
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING, Callable

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)


if TYPE_CHECKING:
    from pyspark.sql import Column

JAR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars", "deltalog-spark.jar")
FILE_SYSTEM_CLASS = "io.deltalog.hadoop.NoForkLocalFileSystem"
JIT_OPTION = "-XX:-DontCompileHugeMethods"
# A local Spark runs its tasks in the driver JVM on this machine's few cores, where G1 (the JVM's choice
# on two or more) spends them on concurrent collection: the throughput collector builds the dev loop's
# project 15 % faster on a new JVM and 10 % on the next build (bench/dev_loop.py, 2 cores).
LOCAL_GC_OPTION = "-XX:+UseParallelGC"


def _joined(conf: dict[str, str], key: str, value: str, sep: str) -> str:
    current = conf.get(key)
    return value if not current else current + sep + value


def embedded_session_conf(conf: dict[str, str], master: str = "local[*]") -> dict[str, str]:
    """Settings to add to `conf`, the configuration of a new session whose driver JVM this process
    starts. A local master also gets the throughput collector (unless the user chose one) and the
    no-fork file system (left alone when the jar is missing or the user chose one for file:// paths);
    a cluster master ships the jar to its executors (`spark.jars`) and gives them the JIT option too."""
    out = {}
    driver_options = conf.get("spark.driver.extraJavaOptions", "")
    if JIT_OPTION not in driver_options:
        driver_options = _joined(conf, "spark.driver.extraJavaOptions", JIT_OPTION, " ")
    if master.startswith("local") and not re.search(r"-XX:\+Use\w*GC\b", driver_options):
        driver_options += " " + LOCAL_GC_OPTION  # unless the user chose a collector
    if driver_options != conf.get("spark.driver.extraJavaOptions", ""):
        out["spark.driver.extraJavaOptions"] = driver_options
    if not os.path.exists(JAR):
        return out
    out["spark.driver.extraClassPath"] = _joined(conf, "spark.driver.extraClassPath", JAR, os.pathsep)
    if master.startswith("local"):
        if not conf.get("spark.hadoop.fs.file.impl"):
            out["spark.hadoop.fs.file.impl"] = FILE_SYSTEM_CLASS
        return out
    if JAR not in conf.get("spark.jars", ""):
        out["spark.jars"] = _joined(conf, "spark.jars", JAR, ",")
    if JIT_OPTION not in conf.get("spark.executor.extraJavaOptions", ""):
        out["spark.executor.extraJavaOptions"] = _joined(conf, "spark.executor.extraJavaOptions", JIT_OPTION, " ")
    return out


_PROBE = "__deltalog_jar_probe"  # the function add_jar_artifact registers to check the server loads the jar


def add_jar_artifact(spark) -> bool:
    """Sends the jar to a Spark Connect session as an artifact: its classes join that session's class
    path on the server and its executors, and its UDFs are registered by class name (`jar_function`).
    False, with the reason in `spark._deltalog_jar_refused`, where the server refuses it (the plain-Spark
    paths are used then)."""
    if not os.path.exists(JAR):
        spark._deltalog_jar_artifact, spark._deltalog_jar_refused = False, f"{JAR} is not installed"
        return False
    try:
        spark.addArtifacts(JAR)
        spark.udf.registerJavaFunction(_PROBE, "io.deltalog.cluster.Rank$WithArgs")
        spark._deltalog_jar_artifact = True
    except Exception as exc:
        spark._deltalog_jar_artifact = False
        spark._deltalog_jar_refused = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return spark._deltalog_jar_artifact


def runs_jar_classes(spark) -> bool:
    """Whether every task of `spark` can load the jar's classes: a local master (its tasks run in this
    JVM) that has the jar on its class path, a cluster whose executors were shown to load them (one tiny
    job, once per session), or a Spark Connect session the jar was added to (`add_jar_artifact`)."""
    from .connect import is_connect

    if is_connect(spark):
        return bool(getattr(spark, "_deltalog_jar_artifact", False))
    try:
        sc = spark.sparkContext
        if not sc.master.startswith("local"):
            from .cluster import executors_load_jar

            return executors_load_jar(spark)
        cached = getattr(sc, "_deltalog_jar_classes", None)
        if cached is None:
            from py4j.java_gateway import JavaClass
            cached = isinstance(sc._jvm.io.deltalog.cluster.RangeId, JavaClass)
            sc._deltalog_jar_classes = cached
        return cached
    except Exception:  # no JVM behind this session
        return False


def reads_with_jar_format(spark, class_name: str) -> bool:
    """Whether `spark.read.format("io.deltalog.<class_name>")` works in every task: over Connect, when
    the jar is this session's artifact (the server looks the format up in the session's class loader);
    else as `has_jar_class` says."""
    from .connect import is_connect

    return runs_jar_classes(spark) if is_connect(spark) else has_jar_class(spark, class_name)


def has_jar_class(spark, class_name: str) -> bool:
    """Whether every task of `spark` can load the jar's `io.deltalog.<class_name>` through Py4J (a Spark
    server started by an older install of this package may run an older jar). False over Connect: what
    this asks for is used through Py4J."""
    from .connect import is_connect

    if is_connect(spark) or not runs_jar_classes(spark):
        return False
    try:
        from py4j.java_gateway import JavaClass

        return isinstance(jar_class(spark, class_name), JavaClass)
    except Exception:
        return False


def jar_class(spark, class_name: str):
    """The JVM's `io.deltalog.<class_name>` (a dotted name below io.deltalog), through Py4J. Kept per
    SparkContext: finding it costs a call into the JVM per part of its name."""
    sc = spark.sparkContext
    known = sc.__dict__.setdefault("_deltalog_jar_class", {})
    found = known.get(class_name)
    if found is None:
        found = sc._jvm.io.deltalog
        for part in class_name.split("."):
            found = getattr(found, part)
        from py4j.java_gateway import JavaClass
        if isinstance(found, JavaClass):  # (a missing class is a JavaPackage: asked again next time)
            known[class_name] = found
    return found


def jar_function(spark, class_name: str, *args, returns: str = "IntegerType") -> Callable[..., Column]:
    """The jar's UDF `io.deltalog.<class_name>` built from `args`, as a function of columns. Over Spark
    Connect its `WithArgs` sibling is registered by class name and `args` go with each call as literals
    (Connect builds registered classes with no arguments)."""
    from pyspark.sql import functions as F

    from .connect import is_connect

    if is_connect(spark):
        name = f"__deltalog_{class_name.replace('.', '_').lower()}_with_args"
        registered = spark.__dict__.setdefault("_deltalog_registered", set())
        if name not in registered:
            from pyspark.sql import types as T

            spark.udf.registerJavaFunction(name, f"io.deltalog.{class_name}$WithArgs", getattr(T, returns)())
            registered.add(name)
        literals = [F.lit(bytes(a) if isinstance(a, bytearray) else a) for a in args]
        return lambda *columns: F.call_function(name, *literals, *columns)
    name = register_jar_function(spark, class_name, *args, returns=returns)
    return lambda *columns: F.call_function(name, *columns)


def register_jar_function(spark, class_name: str, *args, returns: str = "IntegerType",
                          deterministic: bool = True) -> str:
    """Registers the jar's UDF `io.deltalog.<class_name>`, built from `args`, as a session function
    returning the Spark type `returns` names. It is named after its arguments, so registering the same
    one again replaces it with itself. A function registered not `deterministic` (its class must offer
    `nondeterministic()`) stays where the query puts it: the optimizer does not push it below a join."""
    digest = hashlib.sha1(repr((class_name, deterministic, *[bytes(a) if isinstance(a, bytearray) else a
                                                             for a in args])).encode()).hexdigest()[:20]
    name = f"__deltalog_{class_name.replace('.', '_').lower()}_{digest}"
    jvm = spark.sparkContext._jvm
    found = jar_class(spark, class_name)
    if deterministic:
        spark._jsparkSession.udf().register(name, found(*args), getattr(jvm.org.apache.spark.sql.types.DataTypes, returns))
    else:  # the class builds its function itself: Py4J would pick the untyped Scala overload of udf()
        spark._jsparkSession.udf().register(name, found(*args).nondeterministic())
    return name
