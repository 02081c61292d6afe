"""A dbt view's SQL is checked by Spark once per shape of what it reads (view_check.py): built again
unchanged over unchanged inputs it is saved without a Spark job; a changed input, SQL or setting checks it
again, so a view that no longer compiles still fails its build and keeps its last good SQL."""
import json
import os

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.deltalog.view_check import _relations

pytestmark = pytest.mark.spark

REUSED = "saved as it was, without a Spark job"


def test_what_a_view_reads_is_followed_only_through_warehouse_relations():
    assert _relations("select * from `main.a` join `main.b` using (x)") == [("main", "a"), ("main", "b")]
    assert _relations("with c as (select 1 as x) select * from c") == []
    for unfollowed in ("select id from range(3)", "select * from parquet.`/tmp/x`", "select * from plain_name",
                       "select * from `main.a` version as of 3", "select * from db.tbl", "select * from (",
                       "select * from read_files('/x')"):
        assert _relations(unfollowed) is None, unfollowed


class TestAViewIsCheckedOncePerShapeOfItsInputs:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "numbers.sql": "{{ config(materialized='table') }} select 1 as {{ var('column', 'n') }}",
            "doubled.sql": "{{ config(materialized='view') }} select n * {{ var('factor', 2) }} as d "
                           "from {{ ref('numbers') }}",
            "quadrupled.sql": "{{ config(materialized='view') }} select d * 2 as q from {{ ref('doubled') }}",
            "from_spark.sql": "{{ config(materialized='view') }} select id from range(3)",
        }

    def _check(self, warehouse, schema, name):
        path = os.path.join(warehouse, schema, f"{name}.view.check.json")
        return json.load(open(path)) if os.path.exists(path) else None

    def _shown(self, sql):
        return [tuple(r) for r in run_dbt(["show", "--inline", sql]).results[0].agate_table.rows]

    def test_checked_once_then_again_when_an_input_or_the_sql_changes(self, project, deltalog_warehouse):
        schema = project.test_schema
        _, out = run_dbt_and_capture(["--debug", "run"])
        assert REUSED not in out
        assert self._check(deltalog_warehouse, schema, "doubled")["columns"] == ["d"]
        assert self._check(deltalog_warehouse, schema, "quadrupled")["columns"] == ["q"]
        assert self._check(deltalog_warehouse, schema, "from_spark") is None  # reads what this cannot follow

        # built again, nothing changed: both views saved without Spark; the table's new version is no change
        _, out = run_dbt_and_capture(["--debug", "run"])
        assert out.count(REUSED) == 2, out
        assert self._shown("select q from {{ ref('quadrupled') }}") == [(4,)]

        # the view's SQL changed: checked again
        _, out = run_dbt_and_capture(["--debug", "run", "-s", "doubled", "--vars", "{factor: 3}"])
        assert REUSED not in out
        assert self._shown("select q from {{ ref('quadrupled') }}") == [(6,)]

    def test_a_view_that_no_longer_compiles_still_fails_and_keeps_its_sql(self, project, deltalog_warehouse):
        schema = project.test_schema
        run_dbt(["run"])
        saved = open(os.path.join(deltalog_warehouse, schema, "quadrupled.view.sql")).read()
        # the table under both views loses column n; neither view's SQL changes
        run_dbt(["run", "-s", "numbers", "--vars", "{column: m}"])
        _, out = run_dbt_and_capture(["--debug", "run", "-s", "doubled", "quadrupled"], expect_pass=False)
        assert REUSED not in out
        assert "doubled" in out and "`n`" in out, out
        # quadrupled reads the table through doubled, which was not saved again: checked, and failing too
        _, out = run_dbt_and_capture(["--debug", "run", "-s", "quadrupled"], expect_pass=False)
        assert REUSED not in out
        assert open(os.path.join(deltalog_warehouse, schema, "quadrupled.view.sql")).read() == saved
        # the column back: the shape both views were last checked on, so their checks hold again
        run_dbt(["run", "-s", "numbers"])
        _, out = run_dbt_and_capture(["--debug", "run", "-s", "doubled", "quadrupled"])
        assert out.count(REUSED) == 2, out
        assert self._shown("select q from {{ ref('quadrupled') }}") == [(4,)]
