"""Robustness tests: the child programs they start by path (`*_child.py`, beside them) importable by name
too, as they import one another when run as scripts (the `spark` fixture is tests/conftest.py's)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)
