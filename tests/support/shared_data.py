"""Where the conformance tables live (`../shared/conformance/` beside the repository), and what a test
does when they are absent: outside CI it skips, saying so; in CI (`CI` set to true) the data must be
there, so the test fails instead of passing silently."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]  # tests/support/shared_data.py -> the repository
CONFORMANCE = (REPO_ROOT.parent / "shared" / "conformance").resolve()  # a symlinked ../shared too
GOLDEN = CONFORMANCE / "delta-golden"
WILD = CONFORMANCE / "wild"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(path: Path) -> Path:
    """`path` (a conformance table or folder), or skip / fail the test as described above."""
    if not path.exists():
        reason = (f"conformance data not found at {path}: these tests need ../shared/conformance beside "
                  f"the repository (tables written by Delta Lake and other engines)")
        if in_ci():
            pytest.fail(reason + "; CI=true requires it", pytrace=False)
        pytest.skip(reason)
    return path


def tables_naming(word: str) -> list[str]:
    """Tables under ../shared/conformance (paths relative to it) whose JSON log mentions `word`, e.g. a
    feature name; one placeholder case when the data is absent, so that the test skips (or fails in CI)
    saying so."""
    found = []
    for base in (GOLDEN, WILD):
        if not base.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(base):
            if "_delta_log" in dirnames:
                log = os.path.join(dirpath, "_delta_log")
                if any(word in open(os.path.join(log, n), errors="replace").read()
                       for n in sorted(os.listdir(log)) if n.endswith(".json")):
                    found.append(os.path.relpath(dirpath, CONFORMANCE))
                dirnames[:] = []
    return sorted(found) or ["<conformance data missing>"]
