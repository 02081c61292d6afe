"""A warehouse on a full disk or a read-only file system, through `dbt run`: the model fails with one
message saying what is wrong (no JVM stack trace), and the table still reads at its last landed
version with every row. A real 2 MB tmpfs, mounted by the test (root only; skipped elsewhere)."""
from __future__ import annotations

import os
import subprocess
import uuid

import deltalake
import pytest
from dbt.tests.util import run_dbt_and_capture

pytestmark = pytest.mark.dbt

MOUNT = f"/tmp/deltalog-tmpfs-{uuid.uuid4().hex[:8]}"

MODEL_SQL = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id, sha2(cast(id + {{ var('offset', 0) }} as string), 512) as h
from range({{ var('rows', 100) }})
"""


def _mount(options: str) -> bool:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", MOUNT],
                          capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def tmpfs():
    os.makedirs(MOUNT, exist_ok=True)
    if not _mount("size=2m"):
        os.rmdir(MOUNT)
        pytest.skip("cannot mount a tmpfs here (needs root): the disk-full and read-only cases are not run")
    yield MOUNT
    subprocess.run(["umount", MOUNT], capture_output=True)
    os.rmdir(MOUNT)


class TestWarehouseOnAFullOrReadOnlyDisk:
    @pytest.fixture(scope="class")
    @classmethod
    def dbt_profile_target(cls, tmpfs):
        return {"type": "deltalog", "threads": 1, "master": "local[2]", "spark_server": False,
                "warehouse": os.path.join(tmpfs, "wh"),
                "spark_conf": {"spark.sql.shuffle.partitions": "2"}}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"events.sql": MODEL_SQL}

    def _table(self, project):
        return os.path.join(MOUNT, "wh", project.test_schema, "events")

    def test_1_full_disk(self, project):
        run_dbt_and_capture(["run"])
        path = self._table(project)
        assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == 100
        _, out = run_dbt_and_capture(["run", "--vars", "{rows: 200000, offset: 1}"], expect_pass=False)
        assert "The disk holding the warehouse is full" in out, out
        assert "\tat org.apache" not in out and "Unhandled error" not in out, out
        dt = deltalake.DeltaTable(path)
        assert dt.version() == 0 and dt.to_pyarrow_table().num_rows == 100

    def test_2_read_only(self, project):
        path = self._table(project)
        assert subprocess.run(["mount", "-o", "remount,ro", MOUNT], capture_output=True).returncode == 0
        try:
            _, out = run_dbt_and_capture(["run", "--vars", "{rows: 10, offset: 2}"], expect_pass=False)
        finally:
            subprocess.run(["mount", "-o", "remount,rw", MOUNT], capture_output=True)
        assert "read-only file system" in out.lower(), out
        assert "\tat org.apache" not in out and "Unhandled error" not in out, out
        dt = deltalake.DeltaTable(path)
        assert dt.version() == 0 and dt.to_pyarrow_table().num_rows == 100
