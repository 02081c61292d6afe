"""dbt-databricks' merge configs on an incremental model: matched_condition, not_matched_condition,
not_matched_by_source_action (delete / update with not_matched_by_source_set) and its condition,
source_alias / target_alias, merge_with_schema_evolution with new top-level columns and new nested
struct fields. Each run is one MERGE commit; results are read back with delta-rs."""
import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

pytestmark = pytest.mark.dbt

SYNCED = """
{{ config(materialized='incremental', unique_key='id', incremental_strategy='merge',
          source_alias='src', target_alias='tgt',
          matched_condition='src.version > tgt.version',
          not_matched_condition="src.status <> 'void'",
          not_matched_by_source_action=var('by_source', 'ignore'),
          not_matched_by_source_condition="tgt.status <> 'archived'",
          not_matched_by_source_set={'status': "'archived'"} if var('by_source', 'ignore') == 'update' else none) }}
{% if is_incremental() %}
select * from values (1, 2, 'open'), (2, 0, 'stale-update'), (5, 1, 'void'), (6, 1, 'new')
  as t(id, version, status)
{% else %}
select * from values (1, 1, 'open'), (2, 1, 'open'), (3, 1, 'open'), (4, 1, 'archived')
  as t(id, version, status)
{% endif %}
"""

EVOLVING = """
{{ config(materialized='incremental', unique_key='id', merge_with_schema_evolution=true) }}
{% if is_incremental() %}
select 2 as id, named_struct('city', 'Oslo', 'zip', '0150') as address, 'x' as extra
union all select 3, named_struct('city', 'Rome', 'zip', '00100'), 'y'
{% else %}
select 1 as id, named_struct('city', 'Lyon') as address
union all select 2, named_struct('city', 'Nice')
{% endif %}
"""


def rows(warehouse, project, name):
    dt = deltalake.DeltaTable(os.path.join(warehouse, project.test_schema, name))
    return dt, sorted(dt.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


class TestMergeClauses:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"synced.sql": SYNCED, "evolving.sql": EVOLVING}

    def test_1_update_by_source(self, project, deltalog_warehouse):
        run_dbt(["run", "--vars", json.dumps({"by_source": "update"})])
        run_dbt(["run", "--select", "synced", "--vars", json.dumps({"by_source": "update"})])
        dt, got = rows(deltalog_warehouse, project, "synced")
        assert [(r["id"], r["version"], r["status"]) for r in got] == [
            (1, 2, "open"),          # matched, newer: updated
            (2, 1, "open"),          # matched, older: matched_condition keeps the row
            (3, 1, "archived"),      # not in the source: not_matched_by_source_set
            (4, 1, "archived"),      # already archived: the by-source condition leaves it
            (6, 1, "new"),           # new; 5 ('void') fails not_matched_condition
        ]
        assert dt.history(1)[0]["operation"] == "MERGE"

    def test_2_delete_by_source(self, project, deltalog_warehouse):
        run_dbt(["run", "--select", "synced", "--full-refresh"])
        run_dbt(["run", "--select", "synced", "--vars", json.dumps({"by_source": "delete"})])
        _, got = rows(deltalog_warehouse, project, "synced")
        assert [r["id"] for r in got] == [1, 2, 4, 6]

    def test_3_bad_values_name_the_config(self, project):
        _, out = run_dbt_and_capture(["run", "--select", "synced", "--vars", json.dumps({"by_source": "drop"})],
                                     expect_pass=False)
        assert "not_matched_by_source_action" in out and "ignore, delete or update" in out

    def test_4_schema_evolution_with_nested_fields(self, project, deltalog_warehouse):
        run_dbt(["run", "--select", "evolving"])  # built by test_1's run: this is its incremental run
        dt, got = rows(deltalog_warehouse, project, "evolving")
        assert got == [
            {"id": 1, "address": {"city": "Lyon", "zip": None}, "extra": None},
            {"id": 2, "address": {"city": "Oslo", "zip": "0150"}, "extra": "x"},
            {"id": 3, "address": {"city": "Rome", "zip": "00100"}, "extra": "y"},
        ]
        assert [h["operation"] for h in reversed(dt.history())] == ["CREATE TABLE AS SELECT", "MERGE"], dt.history()
