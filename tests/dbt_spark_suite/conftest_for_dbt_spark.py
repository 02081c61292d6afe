"""Replaces dbt-spark's `tests/functional/conftest.py` when its functional suite runs against this
adapter (tests/integration/test_dbt_spark_suite.py copies it there as conftest.py): the `deltalog` profile target, the
suite's own skip-by-profile fixture (no test names `deltalog`, so none is skipped by profile), and the
tests that cannot apply here skipped with their reason (cannot_apply.py), and, unless
DELTALOG_FULL_SUITE=1, the classes our own suite runs the same (same_as_ours.py)."""
import os

import pytest

from tests.functional.fixtures import skip_by_profile_type  # noqa: F401  (dbt-spark's, autouse)

from cannot_apply import CANNOT_APPLY
from same_as_ours import SAME_AS_OURS

FULL = os.environ.get("DELTALOG_FULL_SUITE") == "1"

pytest_plugins = ["dbt.tests.fixtures.project"]


def pytest_addoption(parser):
    parser.addoption("--profile", action="store", default="deltalog", type=str)


def pytest_configure(config):
    config.addinivalue_line("markers", "skip_profile(profile): skip test for the given profile")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for prefix, reason in CANNOT_APPLY.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"cannot apply here: {reason}"))
        for prefix, reason in ({} if FULL else SAME_AS_OURS).items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"in the full suite only (DELTALOG_FULL_SUITE=1): {reason}"))


@pytest.fixture(scope="session")
def deltalog_warehouse(tmp_path_factory):
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="session")
def dbt_profile_target(deltalog_warehouse):
    return {"type": "deltalog", "threads": 2, "master": "local[2]", "spark_server": False,
            "warehouse": deltalog_warehouse, "spark_conf": {"spark.sql.shuffle.partitions": "2"}}
