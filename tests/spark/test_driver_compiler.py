"""The local driver JVM's optimizing compiler starts late (dbt/adapters/deltalog/runtime/jvm.py,
LATE_COMPILER_OPTIONS): on by default, off by the setting, and the user's own JVM options still win
(they come after ours, and the JVM takes the last of a repeated option). Each JVM in a process of its own,
as `dbt` commands start them."""
from __future__ import annotations

import pytest

from dbt.adapters.deltalog import spark_settings
from dbt.adapters.deltalog.runtime import jvm
from tests.spark.test_class_archive import _start

pytestmark = pytest.mark.spark

NO_ARCHIVE = {spark_settings.CLASS_ARCHIVE: "false"}  # no archive recorded in the background after the test


def _threshold(options: list[str]) -> str | None:
    """The last -XX:Tier4InvocationThreshold the JVM was given (the one it uses)."""
    given = [o.split("=", 1)[1] for o in options if o.startswith("-XX:Tier4InvocationThreshold=")]
    return given[-1] if given else None


def test_a_local_jvm_compiles_late_unless_told_otherwise(tmp_path):
    cache, project = tmp_path / "cache", tmp_path / "project"
    project.mkdir()
    default = _start(cache, project, NO_ARCHIVE)
    assert default["rows"] == [[0, 34], [1, 33], [2, 33]]
    assert all(o in default["options"] for o in jvm.LATE_COMPILER_OPTIONS.split()), default["options"]
    # the class archive's switch, read by the same rule: off, the JVM neither maps nor records one
    assert not any("SharedArchiveFile" in o or "ArchiveClassesAtExit" in o for o in default["options"])

    off = _start(cache, project, {**NO_ARCHIVE, spark_settings.LATE_COMPILER: "false"})
    assert off["rows"] == default["rows"] and _threshold(off["options"]) is None

    users = _start(cache, project, {**NO_ARCHIVE, "spark.driver.extraJavaOptions": "-XX:Tier4InvocationThreshold=7000"})
    assert users["rows"] == default["rows"] and _threshold(users["options"]) == "7000"
