"""A relation's Spark session view is made when a statement names it (SessionViews.ensure), not after each
write: a process that runs several dbt commands (dbt's programmatic runner) reads each table as it is now."""
import os
import shutil

import pytest
from dbt.tests.util import run_dbt

pytestmark = pytest.mark.spark


class TestSessionViewsFollowWrites:
    @pytest.fixture(scope="class")
    def models(self):
        return {"numbers.sql": "{{ config(materialized='table') }} select {{ var('n', 1) }} as n",
                "doubled.sql": "{{ config(materialized='view') }} select n * 2 as d from {{ ref('numbers') }}"}

    def _shown(self, sql):
        return [tuple(r) for r in run_dbt(["show", "--inline", sql]).results[0].agate_table.rows]

    def test_a_table_dropped_and_built_again_at_the_same_version(self, project, deltalog_warehouse):
        run_dbt(["run", "--vars", '{"n": 1}'])
        assert self._shown("select n from {{ ref('numbers') }}") == [(1,)]
        assert self._shown("select d from {{ ref('doubled') }}") == [(2,)]
        # gone from under the process and written again: version 0 again, with other files
        shutil.rmtree(os.path.join(deltalog_warehouse, project.test_schema, "numbers"))
        run_dbt(["run", "--vars", '{"n": 5}'])
        assert self._shown("select n from {{ ref('numbers') }}") == [(5,)]
        assert self._shown("select d from {{ ref('doubled') }}") == [(10,)]
