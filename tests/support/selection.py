"""What the suite runs of its slowest tests. CI (and `python -m pytest … tests`) runs a selection so that
the whole suite stays inside CI's time; `DELTALOG_FULL_SUITE=1` runs every case and every trial.
Cases left out are reported as skipped, with how to run them."""
from __future__ import annotations

import os

import pytest

FULL = os.environ.get("DELTALOG_FULL_SUITE") == "1"


def full_only(why: str):
    """A mark for a case the selection leaves out; `why` says what already covers its path."""
    return pytest.mark.skipif(not FULL, reason=f"in the full suite only (DELTALOG_FULL_SUITE=1): {why}")
