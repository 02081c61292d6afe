"""Custom incremental strategies, as dbt documents them: a project macro
`get_incremental_<name>_sql(arg_dict)` whose SQL runs against the target. Every statement it issues on
the target lands in one commit, or none does."""
from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

pytestmark = pytest.mark.dbt

MACROS = """
{% macro get_incremental_delete_then_insert_sql(arg_dict) %}
  delete from {{ arg_dict['target_relation'] }}
  where id in (select id from {{ arg_dict['temp_relation'] }});
  insert into {{ arg_dict['target_relation'] }} select * from {{ arg_dict['temp_relation'] }}
{% endmacro %}

{% macro get_incremental_only_new_sql(arg_dict) %}
  insert into {{ arg_dict['target_relation'] }} ({{ arg_dict['dest_columns'] | map(attribute='name') | join(', ') }})
  select * from {{ arg_dict['temp_relation'] }} s
  where s.id not in (select id from {{ arg_dict['target_relation'] }})
{% endmacro %}

{% macro get_incremental_broken_sql(arg_dict) %}
  delete from {{ arg_dict['target_relation'] }} where id >= 0;
  insert into {{ arg_dict['target_relation'] }} (id) select 1, 2, 3
{% endmacro %}
"""

MODEL = """
{{{{ config(materialized='incremental', incremental_strategy='{strategy}', unique_key='id') }}}}
select id, cast(id * {{{{ var('factor', 1) }}}} as bigint) as amount
from range({{{{ var('lo', 0) }}}}, {{{{ var('hi', 5) }}}})
"""


def _table(root, project, name):
    path = Path(root) / project.test_schema / name
    dt = deltalake.DeltaTable(str(path))
    return dt, sorted((r["id"], r["amount"]) for r in pa.table(dt.to_pyarrow_table()).to_pylist())


class TestCustomStrategies:
    @pytest.fixture(scope="class")
    def macros(self):
        return {"strategies.sql": MACROS}

    @pytest.fixture(scope="class")
    def models(self):
        return {f"{s}.sql": MODEL.format(strategy=s) for s in ("delete_then_insert", "only_new", "broken")}

    def test_delete_then_insert_is_one_commit(self, project, deltalog_warehouse):
        run_dbt(["run", "-s", "delete_then_insert"])
        run_dbt(["run", "-s", "delete_then_insert", "--vars", json.dumps({"factor": 10, "lo": 3, "hi": 7})])
        dt, rows = _table(deltalog_warehouse, project, "delete_then_insert")
        assert rows == [(0, 0), (1, 1), (2, 2), (3, 30), (4, 40), (5, 50), (6, 60)]
        assert dt.version() == 1  # both statements in one commit
        assert dt.history(1)[0]["operationParameters"]["strategy"] == "delete_then_insert"

    def test_an_insert_only_strategy_appends(self, project, deltalog_warehouse):
        run_dbt(["run", "-s", "only_new"])
        run_dbt(["run", "-s", "only_new", "--vars", json.dumps({"factor": 10, "lo": 3, "hi": 7})])
        dt, rows = _table(deltalog_warehouse, project, "only_new")
        assert rows == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 50), (6, 60)]
        assert dt.version() == 1
        assert len(dt.history(1)[0].get("operationParameters", {})) and dt.history(1)[0]["operation"] == "WRITE"

    def test_a_failing_statement_commits_nothing(self, project, deltalog_warehouse):
        run_dbt(["run", "-s", "broken"])
        results = run_dbt(["run", "-s", "broken"], expect_pass=False)
        message = results.results[0].message
        assert "broken" in message and "Nothing was committed" in message, message
        dt, rows = _table(deltalog_warehouse, project, "broken")
        assert dt.version() == 0 and rows == [(i, i) for i in range(5)]  # the delete did not land either

    def test_a_strategy_without_its_macro_is_named(self, project, deltalog_warehouse):
        path = Path(project.project_root) / "models" / "missing.sql"
        path.write_text(MODEL.format(strategy="nowhere"))
        try:
            results = run_dbt(["run", "-s", "missing"], expect_pass=False)
            message = results.results[0].message
            assert "get_incremental_nowhere_sql" in message and "merge" in message, message
        finally:
            path.unlink()


OVERRIDES = """
{# the project's merge never updates a row: new ids only #}
{% macro get_incremental_merge_sql(arg_dict) %}
  insert into {{ arg_dict['target_relation'] }}
  select * from {{ arg_dict['temp_relation'] }} s where s.id not in (select id from {{ arg_dict['target_relation'] }})
{% endmacro %}

{# the adapter's dispatch of append, overridden: rows whose id is there already are left out #}
{% macro deltalog__get_incremental_append_sql(arg_dict) %}
  delete from {{ arg_dict['target_relation'] }} where id in (select id from {{ arg_dict['temp_relation'] }});
  insert into {{ arg_dict['target_relation'] }} select * from {{ arg_dict['temp_relation'] }}
{% endmacro %}

{% macro get_incremental_delete_insert_sql(arg_dict) %}
  merge into {{ arg_dict['target_relation'] }} t using {{ arg_dict['temp_relation'] }} s on t.id = s.id
  when matched then update set *
{% endmacro %}
"""


class TestBuiltinStrategyOverridden:
    """A project's macro that overrides a built-in strategy's SQL (as dbt documents it) is what runs,
    in one commit; one this adapter cannot run (a MERGE statement) fails the model naming it."""

    @pytest.fixture(scope="class")
    def macros(self):
        return {"overrides.sql": OVERRIDES}

    @pytest.fixture(scope="class")
    def models(self):
        return {f"{s.replace('+', '_')}.sql": MODEL.format(strategy=s) for s in ("merge", "append", "delete+insert")}

    @pytest.mark.parametrize("name, expected", [
        ("merge", [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 50), (6, 60)]),  # built-in: 3 and 4 updated
        ("append", [(0, 0), (1, 1), (2, 2), (3, 30), (4, 40), (5, 50), (6, 60)]),  # built-in: 3 and 4 twice
    ])
    def test_the_project_s_sql_runs_in_one_commit(self, project, deltalog_warehouse, name, expected):
        run_dbt(["run", "-s", name])
        run_dbt(["run", "-s", name, "--vars", json.dumps({"factor": 10, "lo": 3, "hi": 7})])
        dt, rows = _table(deltalog_warehouse, project, name)
        assert rows == expected
        assert dt.version() == 1
        assert dt.history(1)[0]["operationParameters"]["strategy"] == name

    def test_an_override_that_cannot_run_is_named(self, project, deltalog_warehouse):
        run_dbt(["run", "-s", "delete_insert"])
        results = run_dbt(["run", "-s", "delete_insert"], expect_pass=False)
        message = results.results[0].message
        assert "get_incremental_delete_insert_sql" in message and "MERGE" in message, message
        assert "Nothing was committed" in message
        dt, rows = _table(deltalog_warehouse, project, "delete_insert")
        assert dt.version() == 0 and rows == [(i, i) for i in range(5)]
