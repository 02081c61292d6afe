"""The log reader under fuzzing (issue: every input loads or raises a DeltaError naming the file).

- Every input in `tests/fuzz/corpus/<target>/` (inputs that once crashed the reader, kept as regression
  tests) and every seed loads or raises a DeltaError.
- A short coverage-guided run of each target with atheris (`tests/fuzz/fuzz_log.py`): no crash, no hang.
  6 s a target in CI's selection, 30 s with `DELTALOG_FULL_SUITE=1`, `DELTALOG_FUZZ_SECONDS=N` to choose.
  Longer runs: `python tests/fuzz/fuzz_log.py <target> -max_total_time=600 <corpus folder>`."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS, run_one, seed_inputs
from tests.support.selection import FULL

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
# Each second is a core's second of the suite's time; the corpus above keeps every crash found so far.
SECONDS = int(os.environ.get("DELTALOG_FUZZ_SECONDS", "30" if FULL else "6"))


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
    # One input may take at most 60 s (a hang); a whole run that overstays is killed with its process
    # group and reported with its output, as a failure.
    cmd = [sys.executable, str(HERE / "fuzz_log.py"), target, f"-max_total_time={SECONDS}", "-timeout=60",
           "-rss_limit_mb=4096", f"-artifact_prefix={tmp_path}/", str(corpus)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=SECONDS + 240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{target}: the fuzzing run did not end within {SECONDS + 240} s (a hang in native code?)\n"
                    f"{err[-1500:]}\n{out[-1500:]}")
    crashes = [p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))]
    assert proc.returncode == 0 and not crashes, (
        f"{target}: exit {proc.returncode}, {crashes}; copy the input into tests/fuzz/corpus/{target}/ once fixed\n"
        f"{err[-1500:]}\n{out[-1500:]}")
