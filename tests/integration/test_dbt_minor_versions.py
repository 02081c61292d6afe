"""dbt-core 1.11 beside the main environment's 1.12: the dbt-facing tests (`tests/functional`: dbt's own
adapter suites and ours) run again in an environment of their own with dbt-core 1.11, so that both minor
versions users run are tested in every CI run. The environment is made once under `.ci-cache/` and kept
while pyproject.toml is unchanged. Skipped, saying why, where PyPI cannot be reached (never in CI).

The suite runs a selection on 1.11 (`SELECTION`: dbt's own basic adapter suite, snapshots' hard deletes
and unit tests, where dbt-core's minor versions differ) to keep CI's time; `DELTALOG_DBT_VERSIONS_FULL=1`
(or `DELTALOG_FULL_SUITE=1`) runs all of tests/functional there."""
from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from tests.support import python_env

ROOT = Path(__file__).resolve().parents[2]
PIN = "dbt-core>=1.11,<1.12"
SELECTION = ["tests/functional/test_basic.py", "tests/functional/test_snapshot_hard_deletes.py",
             "tests/functional/test_unit_testing.py"]
FULL = os.environ.get("DELTALOG_DBT_VERSIONS_FULL") == "1" or os.environ.get("DELTALOG_FULL_SUITE") == "1"

pytestmark = [pytest.mark.dbt, pytest.mark.dbt_versions]


def _environment() -> Path:
    # this environment's pyspark pinned: the same as the main one's, from a wheel built once (python_env.py)
    return python_env.environment("dbt-1.11", ["-e", f"{ROOT}[test]", PIN, f"pyspark=={metadata.version('pyspark')}"],
                                  stamped_files=("pyproject.toml",))


def test_functional_suite_on_dbt_core_1_11(tmp_path):
    python = _environment()
    version = subprocess.run([str(python), "-c", "import dbt.version; print(dbt.version.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("1.11."), version
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYSPARK_"))}
    run = subprocess.run([str(python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "2",
                          "--dist", "loadfile", "--basetemp", str(tmp_path / "t"),
                          *(["tests/functional"] if FULL else SELECTION)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    tail = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, f"tests/functional on dbt-core {version}:\n{tail}"
    print(f"tests/functional on dbt-core {version}: {run.stdout.strip().splitlines()[-1]}")
