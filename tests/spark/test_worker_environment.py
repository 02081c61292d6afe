"""A Spark whose Python workers run an interpreter without this environment (as on a cluster whose
workers lack the package): the write fails, nothing is committed, and the error says which module the
workers could not import, which interpreter they ran and how to give them the environment."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import os, sys
sys.path.insert(0, {root!r})
from dbt.adapters.deltalog.runtime.session import get_spark
from dbt.adapters.deltalog.connections import _short_error
from deltalog.spark.operations import write_dataframe
spark = get_spark("local[1]", {{}})
try:
    write_dataframe(spark.range(10), {table!r}, method="arrow")  # Python tasks write the files
except Exception as exc:
    print("ERROR:", _short_error(exc))
"""


def test_workers_without_the_environment_are_named(tmp_path):
    bare = os.path.join(sys.base_prefix, "bin", "python3")
    probe = subprocess.run([bare, "-c", "import pyarrow"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{bare} has pyarrow: no interpreter without this environment to run the workers with")
    table = str(tmp_path / "t")
    env = dict(os.environ, PYSPARK_PYTHON=bare)
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(root=ROOT, table=table)], env=env,
                          capture_output=True, text=True, timeout=300)
    error = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR:")), None)
    assert error, proc.stdout[-2000:] + proc.stderr[-3000:]
    # the module named is one the bare interpreter really lacks (whichever the package imports first)
    named = re.search(r"Spark's Python workers could not import '([\w.]+)'", error)
    assert named, error
    assert subprocess.run([bare, "-c", f"import {named.group(1)}"], capture_output=True).returncode != 0
    assert bare in error and "spark.archives" in error
    assert not os.path.exists(os.path.join(table, "_delta_log"))  # nothing committed
