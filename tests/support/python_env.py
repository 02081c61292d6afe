"""The Python environments some tests run in beside the main one (another pyspark, another dbt-core, a
DuckDB with its Iceberg extension): made under `.ci-cache/<name>` once, and kept while what they were made
from (their stamp) is unchanged. Made with uv (the `test` extra installs it): with a warm cache it makes
the pyspark 4.2 environment in ~25 s where `python -m venv` and pip take ~95 s, and CI makes four in every
fresh clone. pip where uv is not there. Where the install fails (no PyPI), the test is skipped, saying why;
in CI it fails instead.

pyspark is published as a source archive only. uv builds it again each time its index does not let it
keep the download (as here): ~25 s and ~2.3 GB left in uv's cache per environment, three environments per
CI run, until the disk was full. So a pinned pyspark is installed from a wheel pip builds (pip keeps the
wheel it built: once per machine), kept in `~/.cache/deltalog-tests/wheels`: one path per version, which uv
unpacks once."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
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
    wheels = _built_wheels(requirements)
    if wheels:
        install += ["--find-links", wheels]
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


_SOURCE_ONLY = re.compile(r"^(pyspark)(\[[\w,-]+\])?==([\w.]+)$")  # on PyPI as a source archive only


def _built_wheels(requirements: list[str]) -> str | None:
    """The folder holding a wheel of each pinned source-only requirement, built with pip where it is
    missing; None when there is none to build or pip could not (then the installer builds it)."""
    pinned = [m for m in map(_SOURCE_ONLY.match, requirements) if m]
    if not pinned:
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "deltalog-tests" / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:  # one builder at a time (tests make environments in parallel)
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(folder, [(m.group(1), m.group(3)) for m in pinned])


def _build(folder: Path, pinned: list[tuple[str, str]]) -> str | None:
    for name, version in pinned:
        if any(folder.glob(f"{name}-{version}-*.whl")):
            continue  # kept as it is: a new file (or time) at the same path is a new copy in uv's cache
        with tempfile.TemporaryDirectory(dir=folder) as scratch:  # whole, or not there
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                                    f"{name}=={version}", "-w", scratch], capture_output=True, timeout=1800)
            for wheel in Path(scratch).glob("*.whl") if built.returncode == 0 else ():
                os.replace(wheel, folder / wheel.name)
        if not any(folder.glob(f"{name}-{version}-*.whl")):
            return None
    return str(folder)
