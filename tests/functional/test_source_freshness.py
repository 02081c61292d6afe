"""Source freshness without a loaded_at_field, from the Delta log: the newest commit's time (its
in-commit timestamp where the table has them), for tables this adapter built and tables another engine
wrote; a source whose table does not exist fails by name."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

pytestmark = pytest.mark.dbt

SOURCES = """
sources:
  - name: lake
    schema: "{{ target.schema }}"
    freshness:
      warn_after: {count: 1, period: hour}
      error_after: {count: 2, period: day}
    tables:
      - name: ours
      - name: by_delta_rs
      - name: old_by_ict
"""

MISSING = """
sources:
  - name: gone
    schema: "{{ target.schema }}"
    freshness:
      warn_after: {count: 1, period: hour}
    tables:
      - name: nowhere
"""


def _results(project) -> dict:
    data = json.loads((Path(project.project_root) / "target" / "sources.json").read_text())
    return {r["unique_id"].rsplit(".", 1)[1]: r for r in data["results"]}


class TestFreshnessFromTheLog:
    @pytest.fixture(scope="class")
    def models(self):
        return {"ours.sql": "{{ config(materialized='table') }} select 1 as id", "sources.yml": SOURCES}

    def test_freshness_of_ours_and_other_engines_tables(self, project, deltalog_warehouse):
        base = Path(deltalog_warehouse) / project.test_schema
        run_dbt(["run", "-s", "ours"])
        deltalake.write_deltalake(str(base / "by_delta_rs"), pa.table({"id": [1]}))
        # a table whose newest commit carries an in-commit timestamp three days old
        deltalake.write_deltalake(str(base / "old_by_ict"), pa.table({"id": [1]}))
        log = base / "old_by_ict" / "_delta_log" / ("%020d.json" % 0)
        three_days_ago = int((time.time() - 3 * 86400) * 1000)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        for line in lines:
            if "commitInfo" in line:
                line["commitInfo"]["inCommitTimestamp"] = three_days_ago
        log.write_text("\n".join(json.dumps(line) for line in lines) + "\n")

        run_dbt(["source", "freshness"], expect_pass=False)  # old_by_ict is past error_after
        results = _results(project)
        assert results["ours"]["status"] == "pass" and results["by_delta_rs"]["status"] == "pass"
        assert results["ours"]["max_loaded_at_time_ago_in_s"] < 600 and results["by_delta_rs"]["max_loaded_at_time_ago_in_s"] < 600
        assert results["old_by_ict"]["status"] == "error"
        loaded = datetime.fromisoformat(results["old_by_ict"]["max_loaded_at"].replace("Z", "+00:00"))
        assert abs(loaded.timestamp() * 1000 - three_days_ago) < 1000

    def test_a_source_without_a_table_is_named(self, project, deltalog_warehouse):
        path = Path(project.project_root) / "models" / "missing.yml"
        path.write_text(MISSING)
        try:
            results = run_dbt(["source", "freshness", "-s", "source:gone"], expect_pass=False)
            message = results.results[0].message
            assert "nowhere" in message and "no Delta table" in message, message
        finally:
            path.unlink()
