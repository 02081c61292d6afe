"""Bad input that is a model's concern, through `dbt run`: the model fails with a message naming the
model and what is allowed, the other models still build, and the table is left as it was (same
version, same files)."""
from __future__ import annotations

import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.support.table_checks import data_files_on_disk

pytestmark = pytest.mark.dbt

BASE_SQL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% if var('round', 1) == 1 %}
select 1 as id, 'a' as name union all select 2 as id, 'b' as name
{% elif var('round') == 'dup' %}
select 2 as id, 'x' as name union all select 2 as id, 'y' as name
{% elif var('round') == 'null' %}
select cast(null as int) as id, 'nobody' as name union all select 3 as id, 'c' as name
{% else %}
select 1 as id, 'a' as name, 42 as extra
{% endif %}
"""

STRICT_SQL = """
{{ config(materialized='incremental', incremental_strategy='append', on_schema_change='fail') }}
{% if var('round', 1) == 1 %}
select 1 as id, 'a' as name
{% else %}
select 2 as id, 'b' as name, 42 as extra
{% endif %}
"""

GOOD_SQL = "{{ config(materialized='table') }} select 1 as id"

BAD_ISOLATION_SQL = "{{ config(materialized='table', isolation_level='Snapshot') }} select 1 as id"
BAD_INTERVAL_SQL = "{{ config(materialized='table', checkpoint_interval=0) }} select 1 as id"
BAD_INTERVAL_TEXT_SQL = "{{ config(materialized='table', checkpoint_interval='often') }} select 1 as id"
BAD_INTERVAL_SUPERSCRIPT_SQL = "{{ config(materialized='table', checkpoint_interval='\u00b2') }} select 1 as id"
BAD_STRATEGY_SQL = ("{{ config(materialized='incremental', incremental_strategy='upsert', unique_key='id') }}"
                    " select 1 as id")


def table_dir(warehouse, project, name):
    return os.path.join(warehouse, project.test_schema, name)


def state(path: str):
    if not os.path.isdir(path):
        return None
    log = os.path.join(path, "_delta_log")
    names = sorted(n for n in os.listdir(log) if not n.startswith("."))
    return names, frozenset(data_files_on_disk(path))


def failed(results, name):
    by_name = {r.node.name: r for r in results}
    r = by_name[name]
    assert str(r.status) in ("error", "RunStatus.Error"), f"{name} did not fail: {r.status}"
    return r.message or ""


class TestBadModelInput:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"keyed.sql": BASE_SQL, "strict.sql": STRICT_SQL, "good.sql": GOOD_SQL}

    def test_1_build(self, project, deltalog_warehouse):
        assert len(run_dbt(["run"])) == 3
        assert deltalake.DeltaTable(table_dir(deltalog_warehouse, project, "keyed")).version() == 0

    def test_2_duplicate_keys_in_merge_source(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "keyed")
        before = state(path)
        results = run_dbt(["run", "--select", "keyed", "--vars", "{round: dup}"], expect_pass=False)
        msg = failed(results, "keyed")
        assert "appears 2 times in the source" in msg, msg
        assert "id=2" in msg or "'id'" in msg or "unique_key" in msg, msg
        assert "Nothing was committed" in msg
        assert state(path) == before

    def test_3_null_in_unique_key(self, project, deltalog_warehouse):
        """A NULL key never matches, so every run would insert the row again: the model must fail,
        naming the key column, before anything is committed."""
        path = table_dir(deltalog_warehouse, project, "keyed")
        before = state(path)
        results = run_dbt(["run", "--select", "keyed", "--vars", "{round: 'null'}"], expect_pass=False)
        msg = failed(results, "keyed")
        assert "null" in msg.lower() and "id" in msg, msg
        assert state(path) == before

    def test_4_schema_change_with_on_schema_change_fail(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "strict")
        before = state(path)
        results = run_dbt(["run", "--select", "strict", "--vars", "{round: 2}"], expect_pass=False)
        msg = failed(results, "strict")
        assert "out of sync" in msg and "strict" in msg and "extra" in msg.lower(), msg
        assert state(path) == before

    def test_5_bad_configs_fail_their_model_only(self, project, deltalog_warehouse):
        models = os.path.join(project.project_root, "models")
        bad = {"bad_isolation": (BAD_ISOLATION_SQL, ["isolation_level", "Snapshot", "Serializable",
                                                      "WriteSerializable"]),
               "bad_interval": (BAD_INTERVAL_SQL, ["checkpoint_interval", "0"]),
               "bad_interval_text": (BAD_INTERVAL_TEXT_SQL, ["checkpoint_interval", "often"]),
               "bad_interval_superscript": (BAD_INTERVAL_SUPERSCRIPT_SQL, ["checkpoint_interval", "\u00b2",
                                                                           "integer >= 1"])}
        for name, (sql, _) in bad.items():
            with open(os.path.join(models, f"{name}.sql"), "w") as f:
                f.write(sql)
        try:
            good_before = deltalake.DeltaTable(table_dir(deltalog_warehouse, project, "good")).version()
            results = run_dbt(["run", "--select", "good", *bad], expect_pass=False)
            assert str({r.node.name: r for r in results}["good"].status) in ("success", "RunStatus.Success")
            assert deltalake.DeltaTable(table_dir(deltalog_warehouse, project, "good")).version() == good_before + 1
            problems = []
            for name, (_, fragments) in bad.items():
                try:
                    msg = failed(results, name)
                except AssertionError as e:
                    problems.append(str(e))
                    continue
                missing = [f for f in fragments if f not in msg]
                if missing:
                    problems.append(f"{name}: message lacks {missing}: {msg}")
                if state(table_dir(deltalog_warehouse, project, name)) is not None:
                    problems.append(f"{name}: a table was created although the model failed")
            assert not problems, "\n".join(problems)
        finally:
            for name in bad:
                os.remove(os.path.join(models, f"{name}.sql"))

    def test_6_unknown_incremental_strategy_fails_on_the_first_build(self, project, deltalog_warehouse):
        path = os.path.join(project.project_root, "models", "bad_strategy.sql")
        with open(path, "w") as f:
            f.write(BAD_STRATEGY_SQL)
        try:
            results = run_dbt(["run", "--select", "bad_strategy"], expect_pass=False)
            msg = failed(results, "bad_strategy")
            assert "upsert" in msg and "merge" in msg and "append" in msg, msg
            assert state(table_dir(deltalog_warehouse, project, "bad_strategy")) is None
        finally:
            os.remove(path)


ESCAPING_TABLE_SQL = "{{ config(materialized='table', alias='../../escaped_table') }} select 1 as id"
ESCAPING_VIEW_SQL = "{{ config(materialized='view', alias='../../victim/precious') }} select 1 as id"
SLASHED_INCREMENTAL_SQL = ("{{ config(materialized='incremental', incremental_strategy='append', "
                           "alias='a/b') }} select 1 as id")


class TestNamesStayInsideTheWarehouse:
    """Schema, alias, identifier and relation arguments resolve inside the warehouse or fail naming the
    value: nothing outside is ever read, written or deleted."""

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"escaping_table.sql": ESCAPING_TABLE_SQL, "escaping_view.sql": ESCAPING_VIEW_SQL,
                "slashed.sql": SLASHED_INCREMENTAL_SQL, "inside.sql": GOOD_SQL}

    def test_escaping_names_fail_and_touch_nothing_outside(self, project, deltalog_warehouse):
        import pyarrow as pa
        from deltalog import write_deltalake

        schema_dir = os.path.join(deltalog_warehouse, project.test_schema)
        victim = os.path.normpath(os.path.join(schema_dir, "..", "..", "victim", "precious"))
        write_deltalake(victim, pa.table({"x": [1, 2, 3]}))
        victim_before = state(victim)
        outside_table = os.path.normpath(os.path.join(schema_dir, "..", "..", "escaped_table"))

        results = run_dbt(["run"], expect_pass=False)
        for name, value in (("escaping_table", "../../escaped_table"), ("escaping_view", "../../victim/precious"),
                            ("slashed", "a/b")):
            msg = failed(results, name)
            assert value in msg and "warehouse" in msg, msg
        assert str({r.node.name: r for r in results}["inside"].status) in ("success", "RunStatus.Success")
        assert state(victim) == victim_before
        assert deltalake.DeltaTable(victim).to_pyarrow_table().num_rows == 3
        assert not os.path.exists(outside_table)
        assert not os.path.exists(victim + ".view.sql")

    def test_maintenance_relation_arguments_stay_inside(self, project, deltalog_warehouse, tmp_path):
        import pyarrow as pa
        from deltalog import write_deltalake

        other = str(tmp_path / "other.tbl")
        write_deltalake(other, pa.table({"x": [1]}))
        write_deltalake(other, pa.table({"x": [2]}), mode="overwrite")
        before = state(other)
        for op, args in (("vacuum", f"{{relation: '{other}', retain_hours: 0, force: true}}"),
                         ("optimize", f"{{relation: '{other}'}}"),
                         ("history", "{relation: 'x/y.z'}")):
            _, out = run_dbt_and_capture(["run-operation", op, "--args", args], expect_pass=False)
            assert "cannot name a table or view of the warehouse" in out, out
        assert state(other) == before
