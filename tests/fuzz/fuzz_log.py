"""Coverage-guided fuzzing of the log reader with atheris (libFuzzer for Python).

    python tests/fuzz/fuzz_log.py <target> [libFuzzer flags, e.g. -max_total_time=60 corpus_dir]

Targets: commit, last_checkpoint, crc, checkpoint, deletion_vector (tests/fuzz/targets.py). An input
that raises anything but a DeltaError is a crash: libFuzzer writes it as crash-<sha1> (copy it into
tests/fuzz/corpus/<target>/, where tests/fuzz/test_fuzz.py replays it in every test run)."""
import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

with atheris.instrument_imports(include=["deltalog"]):
    from deltalog.errors import DeltaError  # noqa: F401
    from tests.fuzz import targets

# One thread for Arrow: an input's time is its own, and a timeout interrupts Python, not a thread pool.
import pyarrow  # noqa: E402

pyarrow.set_cpu_count(1)
pyarrow.set_io_thread_count(1)

NAME = sys.argv.pop(1)
TARGET = targets.TARGETS[NAME]


def one_input(data: bytes) -> None:
    targets.run_one(NAME, data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
