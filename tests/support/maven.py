"""Jars from Maven Central for tests, CI and benchmarks (never for the product's own install): each set
is resolved with `mvn dependency:copy-dependencies` from a small generated pom into
`.ci-cache/maven/<name>/` (Maven's own repository, ~/.m2, keeps the downloads between clones).

`jars(name)` returns the jar paths of one set, or raises `MavenUnavailable` saying why (no `mvn`, Maven
Central unreachable, an artifact missing): tests skip with that reason, and fail with it in CI.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".ci-cache" / "maven"

# delta-spark 4.4.0 is built against Spark 4.2.0 (its pom's spark-sql version): the environment that runs
# it (made by tests/integration/test_delta_spark.py) has pyspark 4.2.0. Spark's own jars come from pyspark:
# excluded here.
DELTA_SPARK_VERSION = "4.4.0"
# The Kafka broker the streaming tests start (KRaft mode, its own JVM: every jar of its tree).
KAFKA_VERSION = "4.1.1"
# Spark's Iceberg connector, the reader our Iceberg metadata is proven by: built for Spark 4.1 (Maven Central
# has none for 4.2 or 4.3 yet), so it runs in an environment with pyspark 4.1 (tests/integration/test_iceberg_spark.py).
ICEBERG_SPARK_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"


def hadoop_version() -> str:
    """The Hadoop this pyspark ships (its `hadoop-client-api-<version>.jar`): Hadoop's cloud connectors
    must match it."""
    import pyspark

    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    match = re.search(r"hadoop-client-api-(.+)\.jar$", found[0]) if found else None
    if match is None:
        raise MavenUnavailable("this pyspark ships no hadoop-client-api jar: its Hadoop version is unknown")
    return match.group(1)


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def _sets() -> dict[str, list[str]]:
    return {
        "delta-spark": [f"io.delta:delta-spark_2.13:{DELTA_SPARK_VERSION}"],
        # S3A and the AWS SDK modules it loads (SDK_MODULES); pyspark's shaded hadoop-client-api / -runtime
        # are the rest of Hadoop
        "hadoop-aws": [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"],
        # ABFS (Hadoop 3.5 removed WASB: its class only says to use ABFS)
        "hadoop-azure": [f"org.apache.hadoop:hadoop-azure:{hadoop_version()}"],
        "kafka": [f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}"],
        "iceberg-spark": [ICEBERG_SPARK_RUNTIME],  # one shaded jar
        # Spark's Kafka source, as users add it with spark.jars.packages (the same coordinates)
        "spark-kafka": [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version()}",
                        f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{spark_version()}"],
    }

# Only these groups' jars join Spark's class path: the rest of a set's dependency tree (Hadoop, Parquet,
# Jackson, Scala, logging) is what pyspark already ships, at the versions Spark was built with.
GROUPS: dict[str, list[str]] = {
    "delta-spark": ["io.delta"],
    "iceberg-spark": ["org.apache.iceberg"],
    "hadoop-azure": ["org.apache.hadoop"],  # pyspark ships the HTTP client and codecs it uses
    # pyspark ships Netty, Apache's HTTP client, codecs and logging, which the SDK modules also name
    "hadoop-aws": ["org.apache.hadoop", "software.amazon", "org.reactivestreams", "org.wildfly"],
    "spark-kafka": ["org.apache.spark", "org.apache.kafka", "org.apache.commons"],  # + kafka-clients, pool2
}
_SPARK_GROUPS = ("org.apache.spark",)

# hadoop-aws depends on the AWS SDK's `bundle`: every AWS service in one 690 MB jar, which Spark copies
# into each session and each executor that lists it in `spark.jars` (3 s a local session here). S3A loads
# only these modules; they are taken at the bundle's own version instead.
SDK_BUNDLE = "software.amazon.awssdk:bundle"
SDK_MODULES = {"hadoop-aws": ["s3", "sts", "s3-transfer-manager"]}


class MavenUnavailable(RuntimeError):
    """The jars could not be resolved; the message says why."""


def _pom(coordinates: list[str], excluded: tuple[str, ...] = ()) -> str:
    deps = []
    for c in coordinates:
        group, artifact, version = c.split(":")
        exclusions = "".join(f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
                             for g, a in [(g, "*") for g in _SPARK_GROUPS] + [tuple(e.split(":")) for e in excluded])
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
            "<groupId>dbt-deltalog.tests</groupId><artifactId>jars</artifactId><version>0</version>"
            f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>\n")


def jars(name: str) -> list[str]:
    """The jars of one set, resolved once per machine; test processes that ask at once wait for each other."""
    coordinates = _sets()[name]
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _resolve(name, coordinates)


def _resolve(name: str, coordinates: list[str]) -> list[str]:
    folder = CACHE / name
    stamp = folder / ".stamp"
    named = coordinates + GROUPS.get(name, []) + SDK_MODULES.get(name, [])
    key = hashlib.sha256("\n".join(named).encode()).hexdigest()
    out = folder / "jars"
    if stamp.exists() and stamp.read_text() == key:
        return sorted(str(p) for p in out.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailable(f"{name}: Maven (`mvn`) is not installed, so {coordinates} cannot be resolved")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if name in SDK_MODULES:
        version = _dependency_version(mvn, folder, coordinates, SDK_BUNDLE)
        coordinates = coordinates + [f"software.amazon.awssdk:{m}:{version}" for m in SDK_MODULES[name]]
        (folder / "pom.xml").write_text(_pom(coordinates, excluded=(SDK_BUNDLE,)))
    else:
        (folder / "pom.xml").write_text(_pom(coordinates))
    run = subprocess.run([mvn, "-q", "-B", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
                          f"-DoutputDirectory={out}", "-DincludeScope=runtime",
                          *([f"-DincludeGroupIds={','.join(GROUPS[name])}"] if name in GROUPS else [])],
                         capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        lines = [line for line in (run.stdout + run.stderr).splitlines() if "ERROR" in line][:6]
        raise MavenUnavailable(f"{name}: Maven could not resolve {coordinates}: " + " ".join(lines)[-1500:])
    stamp.write_text(key)
    return sorted(str(p) for p in out.glob("*.jar"))


def _dependency_version(mvn: str, folder: Path, coordinates: list[str], dependency: str) -> str:
    """The version of `dependency` (group:artifact) in the tree of `coordinates`, read from Maven."""
    (folder / "pom.xml").write_text(_pom(coordinates))
    tree = folder / "tree.txt"
    run = subprocess.run([mvn, "-q", "-B", "-f", str(folder / "pom.xml"), "dependency:tree", f"-DoutputFile={tree}",
                          f"-DincludeGroupIds={dependency.split(':')[0]}"], capture_output=True, text=True, timeout=1800)
    match = re.search(re.escape(dependency) + r":jar:([^:\s]+)", tree.read_text() if tree.exists() else "")
    if run.returncode != 0 or match is None:
        shutil.rmtree(folder, ignore_errors=True)
        raise MavenUnavailable(f"Maven could not read the version of {dependency} that {coordinates} name: "
                               + (run.stdout + run.stderr)[-1500:])
    return match.group(1)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
