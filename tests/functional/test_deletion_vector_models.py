"""`deletion_vectors: true` on incremental models: merge and delete+insert runs mark the changed rows in
deletion vectors instead of rewriting files, and delta-rs reads the same rows; a bad value is refused
by name before anything is written."""
import json
import os

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import QueryBuilder

from deltalog.snapshot import Snapshot

pytestmark = pytest.mark.dbt

MODEL = """
{{ config(materialized='incremental', unique_key='id', incremental_strategy=var('strategy', 'merge'),
          deletion_vectors=var('dvs', true)) }}
{% if is_incremental() %}
select id, 'changed' as state from range(0, 400, 40)
{% else %}
select id, 'new' as state from range(400)
{% endif %}
"""


def _rows(path):
    dt = deltalake.DeltaTable(path)
    table = pa.table(QueryBuilder().register("t", dt).execute("select id, state from t").read_all())
    return dt, dict(zip(table.column("id").to_pylist(), table.column("state").to_pylist()))


class TestDeletionVectorModels:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"events.sql": MODEL}

    @pytest.mark.parametrize("strategy", ["merge", "delete+insert"])
    def test_incremental_runs_mark_rows(self, project, deltalog_warehouse, strategy):
        vars_ = json.dumps({"strategy": strategy})
        run_dbt(["run", "--full-refresh", "--vars", vars_])
        path = os.path.join(deltalog_warehouse, project.test_schema, "events")
        first = set(pa.table(deltalake.DeltaTable(path).get_add_actions(flatten=True)).column("path").to_pylist())
        run_dbt(["run", "--vars", vars_])
        dt, rows = _rows(path)
        assert "deletionVectors" in dt.protocol().reader_features
        assert rows == {i: ("changed" if i % 40 == 0 else "new") for i in range(400)}
        actions = pa.table(dt.get_add_actions(flatten=True))
        assert first <= set(actions.column("path").to_pylist())  # no file rewritten
        assert any(a.deletion_vector for a in Snapshot.load(path).add_files())
        assert dt.history()[0]["operationMetrics"]["numTargetRowsCopied"] == "0"

    def test_purge_macro_rewrites_the_files_with_deleted_rows(self, project, deltalog_warehouse):
        run_dbt(["run", "--full-refresh"])
        run_dbt(["run"])
        path = os.path.join(deltalog_warehouse, project.test_schema, "events")
        assert any(a.deletion_vector for a in Snapshot.load(path).add_files())
        _, before = _rows(path)
        run_dbt(["run-operation", "purge_deletion_vectors", "--args",
                 json.dumps({"relation": f"{project.test_schema}.events"})])
        assert not any(a.deletion_vector for a in Snapshot.load(path).add_files())
        dt, after = _rows(path)
        assert after == before and dt.history()[0]["operation"] == "REORG"
        _, out = run_dbt_and_capture(["run-operation", "purge_deletion_vectors", "--args",
                                      json.dumps({"relation": f"{project.test_schema}.events"})])
        assert "found no deleted rows to purge" in out

    def test_a_bad_value_names_the_config(self, project):
        _, out = run_dbt_and_capture(["run", "--vars", json.dumps({"dvs": "sometimes"})], expect_pass=False)
        assert "deletion_vectors" in out and "true or false" in out
