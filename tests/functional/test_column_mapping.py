"""Column mapping through dbt: `column_mapping: name|id` (or tblproperties delta.columnMapping.mode)
writes physical names and field ids; on_schema_change: sync_all_columns drops a column as a metadata
change, and a column dropped and added again reads NULL for the rows written before, on every
incremental strategy, with or without column mapping configured first. Read back with delta-rs."""
import json
import os
import shutil

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

pytestmark = pytest.mark.dbt

# var('step'): 1 builds (id, v), 2 drops v, 3 adds v back with new values
SYNCING = """
{{ config(materialized='incremental', unique_key='id', incremental_strategy=var('strategy', 'merge'),
          on_schema_change='sync_all_columns', column_mapping=var('mapping', none)) }}
{% if var('step', 1) == 1 %}
select id, id * 10 as v from range(4)
{% elif var('step') == 2 %}
select 10L as id
{% else %}
select 20L as id, 7L as v
{% endif %}
"""

MAPPED = """
{{ config(materialized='table', column_mapping='id', partition_by=['part']) }}
select id, cast(id % 2 as string) as part, named_struct('a', id, 'b', 'x') as s from range(6)
"""


def delta_rs_rows(path, version=None):
    dt = deltalake.DeltaTable(path, version=version)
    from deltalake import QueryBuilder

    table = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    return dt, sorted(tuple(r.values()) for r in table.to_pylist())


class TestColumnMapping:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"syncing.sql": SYNCING, "mapped.sql": MAPPED}

    @pytest.mark.parametrize("strategy", ["merge", "append", "delete+insert"])
    @pytest.mark.parametrize("mapping", [None, "name"])
    def test_dropped_column_added_again_reads_null_for_old_rows(self, project, deltalog_warehouse, strategy,
                                                                mapping):
        path = os.path.join(deltalog_warehouse, project.test_schema, "syncing")
        shutil.rmtree(path, ignore_errors=True)  # each case starts from a table that was never mapped
        for step in (1, 2, 3):
            run_dbt(["run", "--select", "syncing", "--vars",
                     json.dumps({"step": step, "strategy": strategy, "mapping": mapping})])
        dt, got = delta_rs_rows(path)
        assert got == [(0, None), (1, None), (2, None), (3, None), (10, None), (20, 7)]
        assert dt.metadata().configuration["delta.columnMapping.mode"] == "name"
        ops = [h["operation"] for h in dt.history()]
        assert len(ops) == 3, ops  # build, drop, re-add: no extra commit for the mapping
        assert delta_rs_rows(path, 0)[1] == [(0, 0), (1, 10), (2, 20), (3, 30)]  # time travel keeps v
        shown = run_dbt(["show", "--inline", "select * from {{ ref('syncing') }} order by id"])
        assert shown.results[0].agate_table.rows[0]["v"] is None

    def test_id_mode_table_with_nested_and_partition_columns(self, project, deltalog_warehouse):
        run_dbt(["run", "--select", "mapped"])
        path = os.path.join(deltalog_warehouse, project.test_schema, "mapped")
        dt, got = delta_rs_rows(path)
        assert got == sorted((i, str(i % 2), {"a": i, "b": "x"}) for i in range(6))
        assert dt.metadata().configuration["delta.columnMapping.mode"] == "id"
        assert "columnMapping" in dt.protocol().reader_features
        schema = json.loads(dt.schema().to_json())
        assert all(f["metadata"]["delta.columnMapping.physicalName"].startswith("col-") for f in schema["fields"])

    def test_bad_mode_names_the_config(self, project):
        _, out = run_dbt_and_capture(["run", "--select", "syncing", "--vars", json.dumps({"mapping": "ids"})],
                                     expect_pass=False)
        assert "column_mapping" in out and "name, id or none" in out
