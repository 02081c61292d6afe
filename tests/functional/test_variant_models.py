"""A model that selects semi-structured JSON as VARIANT (Spark 4's `parse_json`): the table, an
incremental merge over it, `dbt show` and `dbt docs generate` work, and delta-rs reads what was written."""
import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt

pytestmark = pytest.mark.dbt

EVENTS = """
{{ config(materialized='table') }}
select id, parse_json('{"user":' || id || ',"tags":["a","b"]}') as payload from range(5)
"""

LATEST = """
{{ config(materialized='incremental', unique_key='id', incremental_strategy='merge') }}
select id, payload, variant_get(payload, '$.user', 'int') * {{ var('factor', 1) }} as user_score
from {{ ref('events') }}
"""


class TestVariantModels:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"events.sql": EVENTS, "latest.sql": LATEST}

    def test_variant_models_build_merge_show_and_document(self, project, deltalog_warehouse):
        run_dbt(["run"])
        run_dbt(["run", "--select", "latest", "--vars", json.dumps({"factor": 10})])
        path = os.path.join(deltalog_warehouse, project.test_schema, "latest")
        dt = deltalake.DeltaTable(path)
        assert "variantType" in dt.protocol().reader_features
        rows = dt.to_pyarrow_table().to_pylist()
        assert sorted(r["user_score"] for r in rows) == [0, 10, 20, 30, 40]
        assert all(r["payload"]["value"] for r in rows)

        shown = run_dbt(["show", "--inline",
                         "select id, to_json(payload) as j from {{ ref('latest') }} order by id"])
        assert [r["j"] for r in shown.results[0].agate_table.rows] == [
            '{"tags":["a","b"],"user":%d}' % i for i in range(5)]

        catalog = run_dbt(["docs", "generate"])
        columns = next(n.columns for key, n in catalog.nodes.items() if key.endswith(".latest"))
        assert columns["payload"].type == "variant"
