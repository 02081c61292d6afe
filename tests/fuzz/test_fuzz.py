"""The log reader under fuzzing (issue: every input loads or raises a DeltaError naming the file).

- Every input in `tests/fuzz/corpus/<target>/` (inputs that once crashed the reader, kept as regression
  tests) and every seed loads or raises a DeltaError.
- A short coverage-guided run of each target with atheris (`tests/fuzz/fuzz_log.py`): no crash, no hang.
  Longer runs: `python tests/fuzz/fuzz_log.py <target> -max_total_time=600 <corpus folder>`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS, run_one, seed_inputs

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
SECONDS = int(os.environ.get("DELTALOG_FUZZ_SECONDS", "12"))


def _inputs() -> list[tuple[str, str, bytes]]:
    out = [(target, f"seed{i}", data) for target, seeds in seed_inputs().items() for i, data in enumerate(seeds)]
    for folder in sorted(CORPUS.iterdir()) if CORPUS.is_dir() else []:
        out += [(folder.name, f.name, f.read_bytes()) for f in sorted(folder.iterdir())]
    return out


@pytest.mark.parametrize("target, name, data", _inputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_corpus_input_loads_or_raises_a_delta_error(target, name, data):
    run_one(target, data)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_short_fuzzing_run_finds_no_crash(target, tmp_path):
    try:
        import atheris  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("atheris is not installed (pip install -e '.[test]' brings it)")
        pytest.skip("atheris is not installed (pip install -e '.[test]' brings it)")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, data in enumerate(seed_inputs()[target]):
        (corpus / f"seed{i}").write_bytes(data)
    for f in (CORPUS / target).iterdir() if (CORPUS / target).is_dir() else []:
        (corpus / f.name).write_bytes(f.read_bytes())
    run = subprocess.run([sys.executable, str(HERE / "fuzz_log.py"), target, f"-max_total_time={SECONDS}",
                          "-timeout=20", "-rss_limit_mb=4096", f"-artifact_prefix={tmp_path}/", str(corpus)],
                         capture_output=True, text=True, timeout=SECONDS + 240)
    crashes = [p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))]
    assert run.returncode == 0 and not crashes, (
        f"{target}: exit {run.returncode}, {crashes}; copy the input into tests/fuzz/corpus/{target}/ once fixed\n{run.stderr[-1500:]}\n{run.stdout[-1500:]}")
