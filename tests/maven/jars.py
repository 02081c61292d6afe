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
# it has pyspark 4.2.0 (tests/delta_spark_env.py). Spark's own jars come from pyspark: excluded here.
DELTA_SPARK_VERSION = "4.4.0"
# The Kafka broker the streaming tests start (KRaft mode, its own JVM: every jar of its tree).
KAFKA_VERSION = "4.1.1"


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
        # S3A and its AWS SDK bundle; pyspark's shaded hadoop-client-api / -runtime are the rest of Hadoop
        "hadoop-aws": [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"],
        # ABFS (Hadoop 3.5 removed WASB: its class only says to use ABFS)
        "hadoop-azure": [f"org.apache.hadoop:hadoop-azure:{hadoop_version()}"],
        "kafka": [f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}"],
        # Spark's Kafka source, as users add it with spark.jars.packages (the same coordinates)
        "spark-kafka": [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version()}",
                        f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{spark_version()}"],
    }

# Only these groups' jars join Spark's class path: the rest of a set's dependency tree (Hadoop, Parquet,
# Jackson, Scala, logging) is what pyspark already ships, at the versions Spark was built with.
GROUPS: dict[str, list[str]] = {
    "delta-spark": ["io.delta"],
    "hadoop-azure": ["org.apache.hadoop"],  # pyspark ships the HTTP client and codecs it uses
    "spark-kafka": ["org.apache.spark", "org.apache.kafka", "org.apache.commons"],  # + kafka-clients, pool2
}
_SPARK_GROUPS = ("org.apache.spark",)


class MavenUnavailable(RuntimeError):
    """The jars could not be resolved; the message says why."""


def _pom(coordinates: list[str]) -> str:
    deps = []
    for c in coordinates:
        group, artifact, version = c.split(":")
        exclusions = "".join(f"<exclusion><groupId>{g}</groupId><artifactId>*</artifactId></exclusion>"
                             for g in _SPARK_GROUPS)
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
    key = hashlib.sha256("\n".join(coordinates + GROUPS.get(name, [])).encode()).hexdigest()
    out = folder / "jars"
    if stamp.exists() and stamp.read_text() == key:
        return sorted(str(p) for p in out.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailable(f"{name}: Maven (`mvn`) is not installed, so {coordinates} cannot be resolved")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
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


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
