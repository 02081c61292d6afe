"""Tests that need a JVM of their own (a connector on the class path from the start) run their file
again in a pytest process of its own, with a flag set that makes the file define its real tests."""
from __future__ import annotations

import os
import subprocess
import sys

# the repository (this file is in tests/support/)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def in_own_process(flag: str) -> bool:
    """True inside the process `run_file_in_own_process` started with `flag`."""
    return os.environ.get(flag) == "1"


def run_file_in_own_process(path: str, flag: str, timeout: int) -> None:
    """Run the test file `path` in a pytest process of its own with `flag` set; fail unless every test
    there passed (a skip there is a failure: the caller checked what the tests need first)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           os.path.abspath(path)], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, flag: "1"})
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-3000:]
