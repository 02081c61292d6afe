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


TRACKED_MODEL = """
{{ config(materialized='incremental', unique_key='id', deletion_vectors=true,
          row_tracking=var('tracking', true)) }}
{% if is_incremental() %}
select id, 'changed' as state from range(0, 400, 40)
{% else %}
select id, 'new' as state from range(400)
{% endif %}
"""


class TestRowTrackingModels:
    """`row_tracking: true`: every file of the table carries row IDs; a merge keeps the IDs of the rows
    it leaves and gives the rows it writes fresh ones, above every earlier one."""

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"tracked.sql": TRACKED_MODEL}

    def test_merge_keeps_row_ids_of_untouched_rows(self, project, deltalog_warehouse):
        run_dbt(["run", "--full-refresh"])
        path = os.path.join(deltalog_warehouse, project.test_schema, "tracked")
        first = Snapshot.load(path)
        assert "rowTracking" in first.protocol.writer_features
        assert first.configuration["delta.enableRowTracking"] == "true"
        spans = sorted((a.base_row_id, a.num_records) for a in first.add_files())
        assert spans[0][0] == 0 and sum(n for _, n in spans) == 400
        run_dbt(["run"])
        snap = Snapshot.load(path)
        kept = {a.path: a.base_row_id for a in first.add_files()}
        for a in snap.add_files():
            if a.path in kept:  # rows marked, file kept: same row IDs
                assert a.base_row_id == kept[a.path] and a.default_row_commit_version == first.version
            else:  # the merged rows' new versions
                assert a.base_row_id >= 400 and a.default_row_commit_version == snap.version
        _, rows = _rows(path)
        assert rows == {i: ("changed" if i % 40 == 0 else "new") for i in range(400)}

    def test_a_bad_value_names_the_config(self, project):
        _, out = run_dbt_and_capture(["run", "--vars", json.dumps({"tracking": "maybe"})], expect_pass=False)
        assert "row_tracking" in out and "true or false" in out
