"""A model is all or nothing, through `dbt run`: a schema change and the data go in one commit or none;
rows that would duplicate keys or escape a replace-where predicate fail the model before anything is
committed. Each case reproduces a fault in which a failed (or wrong) run changed the table."""
from __future__ import annotations

import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.support.table_checks import data_files_on_disk

pytestmark = pytest.mark.dbt


def table_dir(warehouse, project, name):
    return os.path.join(warehouse, project.test_schema, name)


def state(path):
    """The log's file names and the live-or-not data files: equal means nothing was committed."""
    log = os.path.join(path, "_delta_log")
    return sorted(n for n in os.listdir(log) if n.endswith(".json")), deltalake.DeltaTable(path).schema().to_json()


def failed(results, name):
    r = {r.node.name: r for r in results}[name]
    assert str(r.status) in ("error", "RunStatus.Error"), f"{name} did not fail: {r.status}"
    return r.message or ""


def rows(path, cols):
    t = deltalake.DeltaTable(path).to_pyarrow_table(columns=cols)
    return sorted(zip(*[t.column(c).to_pylist() for c in cols]))


APPEND_NEW_SQL = """
{{ config(materialized='incremental', incremental_strategy='append', on_schema_change='append_new_columns') }}
select 1 as id
{% if var('round', 1) == 2 %}, null as untyped{% endif %}
"""

SYNC_SQL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          on_schema_change='sync_all_columns') }}
{% if var('round', 1) == 1 %}
select id, 'x' as old_col from range(5)
{% else %}
select id, case when id = 3 then raise_error('boom halfway') else 'y' end as new_col from range(5)
{% endif %}
"""

REPLACE_WHERE_SQL = """
{{ config(materialized='incremental', incremental_strategy='replace_where',
          incremental_predicates=['d >= 5']) }}
select id, id % 10 as d from range(100)
"""

MERGE_DUP_SQL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select 1 as id, 'a' as v
{% if var('round', 1) == 2 %} union all select 10 as id, 'b' as v union all select 10 as id, 'c' as v{% endif %}
"""

DELETE_INSERT_DUP_SQL = MERGE_DUP_SQL.replace("'merge'", "'delete+insert'")

UNKNOWN_KEY_SQL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='no_such_column') }}
select 1 as id
"""

MB_UPSTREAM_SQL = """
{{ config(materialized='table') }}
select id, timestamp'2024-01-01 00:00:00' + make_interval(0, 0, 0, cast(id % 3 as int)) as event_time
from range(30)
"""

MB_SQL = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin='2024-01-01') }}
select * from {{ ref('mb_upstream') }}
"""


class TestModelIsAllOrNothing:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"append_new.sql": APPEND_NEW_SQL, "sync.sql": SYNC_SQL, "replace_where.sql": REPLACE_WHERE_SQL,
                "merge_dup.sql": MERGE_DUP_SQL, "delete_insert_dup.sql": DELETE_INSERT_DUP_SQL,
                "mb_upstream.sql": MB_UPSTREAM_SQL, "mb_model.sql": MB_SQL}

    def test_1_build(self, project):
        results = run_dbt(["run", "--exclude", "mb_model"])
        assert len(results) == 6

    def test_2_bare_null_column_fails_without_committing(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "append_new")
        before = state(path)
        results = run_dbt(["run", "--select", "append_new", "--vars", "{round: 2}"], expect_pass=False)
        msg = failed(results, "append_new")
        assert "untyped" in msg and "cast" in msg, msg
        assert state(path) == before
        run_dbt(["run", "--select", "append_new"])  # the next good run still works

    def test_3_sync_all_columns_that_fails_halfway_commits_nothing(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "sync")
        before = state(path)
        results = run_dbt(["run", "--select", "sync", "--vars", "{round: 2}"], expect_pass=False)
        assert "boom halfway" in failed(results, "sync")
        assert state(path) == before
        assert [f.name for f in deltalake.DeltaTable(path).schema().fields] == ["id", "old_col"]

    def test_4_replace_where_refuses_rows_outside_its_predicate(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "replace_where")
        before = state(path)
        results = run_dbt(["run", "--select", "replace_where"], expect_pass=False)
        msg = failed(results, "replace_where")
        assert "d >= 5" in msg and '"d":' in msg, msg
        assert state(path) == before
        assert len(rows(path, ["id"])) == 100

    def test_5_duplicate_new_keys_fail_merge_and_delete_insert(self, project, deltalog_warehouse):
        for name in ("merge_dup", "delete_insert_dup"):
            path = table_dir(deltalog_warehouse, project, name)
            before = state(path)
            results = run_dbt(["run", "--select", name, "--vars", "{round: 2}"], expect_pass=False)
            msg = failed(results, name)
            assert "id=10" in msg and "2 times" in msg and "Nothing was committed" in msg, msg
            assert state(path) == before
            assert rows(path, ["id"]) == [(1,)]

    def test_6_unknown_unique_key_is_named_on_the_first_build(self, project, deltalog_warehouse):
        """dbt's contract (its adapter suite asserts it): a first build passes without applying the key.
        It warns, naming the column, and the first incremental run fails before committing."""
        models = os.path.join(project.project_root, "models")
        with open(os.path.join(models, "unknown_key.sql"), "w") as f:
            f.write(UNKNOWN_KEY_SQL)
        try:
            _, out = run_dbt_and_capture(["run", "--select", "unknown_key"])
            assert "no_such_column" in out and "next incremental run will fail" in out, out
            path = table_dir(deltalog_warehouse, project, "unknown_key")
            before = state(path)
            results = run_dbt(["run", "--select", "unknown_key"], expect_pass=False)
            assert "no_such_column" in failed(results, "unknown_key")
            assert state(path) == before
        finally:
            os.remove(os.path.join(models, "unknown_key.sql"))

    def test_7_microbatch_over_an_upstream_without_event_time_writes_each_row_once(self, project,
                                                                                  deltalog_warehouse):
        window = ["--event-time-start", "2024-01-01", "--event-time-end", "2024-01-04"]
        run_dbt(["run", "--select", "mb_model", *window])
        path = table_dir(deltalog_warehouse, project, "mb_model")
        assert rows(path, ["id"]) == [(i,) for i in range(30)]
        run_dbt(["run", "--select", "mb_model", *window])
        assert rows(path, ["id"]) == [(i,) for i in range(30)]


SNAPSHOT_SOURCE_SQL = """
{{ config(materialized='table') }}
select id, 'v' as name, timestamp'2024-01-01 00:00:00' as updated_at
{% if var('round', 1) == 2 %}, case when id = 2 then raise_error('snapshot boom') else 'e' end as extra{% endif %}
from range(4)
"""

SNAPSHOT_YML = """
snapshots:
  - name: snap
    relation: ref('snap_source')
    config:
      unique_key: id
      strategy: check
      check_cols: all
"""


class TestFailingSnapshotCommitsNothing:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"snap_source.sql": SNAPSHOT_SOURCE_SQL}

    @pytest.fixture(scope="class")
    @classmethod
    def snapshots(cls):
        return {"snap.yml": SNAPSHOT_YML}

    def test_failed_snapshot_adds_no_columns(self, project, deltalog_warehouse):
        run_dbt(["run"])
        run_dbt(["snapshot"])
        path = table_dir(deltalog_warehouse, project, "snap")
        before = state(path)
        # the source is a view-like table: rebuild it with the failing column (lazy: fails in the snapshot)
        models = os.path.join(project.project_root, "models", "snap_source.sql")
        with open(models, "w") as f:
            f.write(SNAPSHOT_SOURCE_SQL.replace("materialized='table'", "materialized='view'"))
        run_dbt(["run", "--vars", "{round: 2}"])
        results = run_dbt(["snapshot", "--vars", "{round: 2}"], expect_pass=False)
        assert "snapshot boom" in failed(results, "snap")
        assert state(path) == before
