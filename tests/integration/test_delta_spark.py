"""delta-spark beside deltalog: `tests/delta_spark/` runs in an environment of its own with the pyspark
delta-spark is built for (pyspark 4.2 for delta-spark 4.4), this project installed in it as users install
it, and delta-spark's jars from Maven Central (tests/support/maven.py). The Kafka streaming tables run there
too: Maven Central serves Spark's Kafka source for Spark 4.2, none yet for pyspark 4.3. The environment is made once under
`.ci-cache/pyspark-4.2` and kept while pyproject.toml is unchanged. Skipped, saying why, where PyPI or
Maven Central cannot be reached; in CI it fails instead."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import python_env
from tests.support.maven import MavenUnavailable, in_ci, jars

ROOT = Path(__file__).resolve().parents[2]
PIN = "pyspark==4.2.0"

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark]


def _skip_or_fail(reason: str):
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def environment() -> Path:
    return python_env.environment("pyspark-4.2", ["-e", f"{ROOT}[test]", PIN, "-c", str(ROOT / "constraints.txt")],
                                  stamped_files=("pyproject.toml", "constraints.txt"))


def test_delta_spark_beside_deltalog(tmp_path):
    try:
        jars("delta-spark")  # resolved here, so that a Maven failure is reported once, by name
    except MavenUnavailable as exc:
        _skip_or_fail(str(exc))
    python = environment()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYSPARK_", "SPARK_HOME"))}
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadfile", "-rs", "--durations=8", "--basetemp", str(tmp_path / "t"), "tests/delta_spark"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    tail = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, f"tests/delta_spark on {PIN}:\n{tail}"
    # Its only skips may be the cases the selection leaves to the full suite (tests/support/selection.py).
    unexpected = [line for line in run.stdout.splitlines()
                  if line.startswith("SKIPPED") and "in the full suite only" not in line]
    assert not unexpected, f"tests/delta_spark skipped tests in its own environment:\n{tail}"
    print(f"tests/delta_spark on {PIN}:\n{tail}")
