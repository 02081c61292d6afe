"""Maintenance tests share the Spark session fixture of tests/spark (one local[2] session per run)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "spark"))

from conftest import spark  # noqa: E402,F401  (tests/spark/conftest.py's session fixture)
