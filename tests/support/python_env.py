"""The Python environments some tests run in beside the main one (another pyspark, another dbt-core, a
DuckDB with its Iceberg extension): made under `.ci-cache/<name>` once, and kept while what they were made
from (their stamp) is unchanged. Made with uv (the `test` extra installs it): with a warm cache it makes
the pyspark 4.2 environment in ~25 s where `python -m venv` and pip take ~95 s, and CI makes four in every
fresh clone. pip where uv is not there. Where the install fails (no PyPI), the test is skipped, saying why;
in CI it fails instead."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.maven import in_ci

ROOT = Path(__file__).resolve().parents[2]


def environment(name: str, requirements: list[str], *, stamped_files: tuple[str, ...] = (),
                what: str | None = None) -> Path:
    """The python of `.ci-cache/<name>`, with `requirements` installed (pip's syntax; `-c`/`-e` allowed).
    `stamped_files` (under the repository) are what the environment must be made again after a change of."""
    folder = ROOT / ".ci-cache" / name
    python = folder / "bin" / "python"
    stamp_file = folder / ".stamp"
    stamp = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in stamped_files)
                           + " ".join(requirements).encode()).hexdigest()
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    shutil.rmtree(folder, ignore_errors=True)
    try:
        from uv import find_uv_bin
        uv = find_uv_bin()
    except (ImportError, FileNotFoundError):
        uv = None
    if uv:
        made = subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(folder)],
                              capture_output=True, text=True, timeout=300)
        install = [uv, "pip", "install", "--quiet", "--python", str(python)]
    else:
        made = subprocess.run([sys.executable, "-m", "venv", str(folder)], capture_output=True, text=True, timeout=300)
        install = [str(python), "-m", "pip", "install", "--quiet"]
    done = made if made.returncode else subprocess.run([*install, *requirements], capture_output=True, text=True,
                                                       timeout=1800)
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        reason = (f"the environment {folder.name} ({what or ' '.join(requirements)}) could not be made: "
                  f"{done.stderr.strip()[-800:]}")
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    stamp_file.write_text(stamp)
    return python
