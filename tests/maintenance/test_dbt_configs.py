"""The Delta model configs and maintenance macros through dbt: zorder_by / zorder / cluster_curve /
skip_optimize, isolation_level, checkpoint_interval, tblproperties; bad values fail the model before
anything is written; optimize / vacuum / history / restore via run-operation; as_of and table_changes in
models. Tables are read back with delta-rs."""
import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

pytestmark = pytest.mark.dbt

ZORDERED = """
{{ config(materialized='table', zorder_by=['a', 's'], isolation_level='Serializable',
          checkpoint_interval=5, tblproperties={'delta.deletedFileRetentionDuration': 'interval 2 days'}) }}
select id as a, cast(id * 7 % 13 as bigint) as b, concat('customer-account-000000-', cast(id as string)) as s
from range(300)
"""

SYNONYM = """
{{ config(materialized='table', zorder='b', cluster_curve='hilbert', partition_by=['p']) }}
select id as a, cast(id * 7 % 13 as bigint) as b, cast(id % 2 as int) as p from range(100)
"""

SKIPPED = """
{{ config(materialized='table', zorder_by='a', skip_optimize=true) }}
select id as a from range(50)
"""

INCREMENTAL = """
{{ config(materialized='incremental', incremental_strategy='append', zorder_by=['a'],
          checkpoint_interval=3, change_data_feed=true) }}
select id as a, cast(id % 5 as bigint) as b from range({{ var('lo', 0) }}, {{ var('hi', 5000) }})
"""

PAST = """
{{ config(materialized='table') }}
select count(*) as n from {{ as_of(ref('events'), version=var('past_version', 0)) }}
"""

ADDED = """
{{ config(materialized='table') }}
select a, _commit_version from {{ table_changes(ref('events'), var('since_version', 0)) }}
where _change_type = 'insert'
"""


def path(warehouse, project, name):
    return os.path.join(warehouse, project.test_schema, name)


def ops(uri):
    return [h["operation"] for h in reversed(deltalake.DeltaTable(uri).history())]


def version(uri):
    return deltalake.DeltaTable(uri).version()


class TestDeltaConfigs:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"zordered.sql": ZORDERED, "synonym.sql": SYNONYM, "skipped.sql": SKIPPED,
                "events.sql": INCREMENTAL}

    def test_1_configs_applied(self, project, deltalog_warehouse):
        run_dbt(["run"])
        z = path(deltalog_warehouse, project, "zordered")
        dt = deltalake.DeltaTable(z)
        conf = dt.metadata().configuration
        assert conf["delta.isolationLevel"] == "Serializable"
        assert conf["delta.checkpointInterval"] == "5"
        assert conf["delta.deletedFileRetentionDuration"] == "interval 2 days"
        assert ops(z) == ["CREATE TABLE AS SELECT", "OPTIMIZE"]  # the properties are in version 0
        opt = dt.history(1)[0]
        assert json.loads(opt["operationParameters"]["zOrderBy"]) == ["a", "s"]
        assert dt.to_pyarrow_table().num_rows == 300
        # the synonym and the curve
        s = path(deltalog_warehouse, project, "synonym")
        h = deltalake.DeltaTable(s).history(1)[0]
        assert h["operation"] == "OPTIMIZE" and h["operationParameters"]["curve"] == "hilbert"
        assert json.loads(h["operationParameters"]["zOrderBy"]) == ["b"]
        # skip_optimize: no OPTIMIZE commit
        assert "OPTIMIZE" not in ops(path(deltalog_warehouse, project, "skipped"))

    def test_2_rerun_without_changes_commits_nothing(self, project, deltalog_warehouse):
        e = path(deltalog_warehouse, project, "events")
        before = version(e)
        # an append of a few rows: only those new files are clustered
        run_dbt(["run", "--select", "events", "--vars", "{lo: 5000, hi: 5010}"])
        assert ops(e)[-2:] == ["WRITE", "OPTIMIZE"] or ops(e)[-2:] == ["STREAMING UPDATE", "OPTIMIZE"] \
            or ops(e)[-1] == "OPTIMIZE"
        m = deltalake.DeltaTable(e).history(1)[0]["operationMetrics"]
        table_bytes = sum(deltalake.DeltaTable(e).get_add_actions(flatten=True).column("size_bytes").to_pylist())
        assert int(m["numRemovedBytes"]) < 0.2 * table_bytes  # the new files, not the whole table again
        after_incremental = version(e)
        assert after_incremental > before
        # nothing new: no property commit (values unchanged), no OPTIMIZE commit, zero-row append
        run_dbt(["run", "--select", "events", "--vars", "{lo: 0, hi: 0}"])
        assert "OPTIMIZE" not in ops(e)[after_incremental + 1:]
        assert deltalake.DeltaTable(e).metadata().configuration["delta.checkpointInterval"] == "3"
        assert sorted(deltalake.DeltaTable(e).to_pyarrow_table().column("a").to_pylist()) == list(range(5010))

    def test_3_skip_optimize_var(self, project, deltalog_warehouse):
        e = path(deltalog_warehouse, project, "events")
        before = version(e)
        run_dbt(["run", "--select", "events", "--vars", "{lo: 6000, hi: 6010, deltalog_skip_optimize: true}"])
        assert "OPTIMIZE" not in ops(e)[before + 1:]

    def test_4_run_operations(self, project, deltalog_warehouse):
        e = path(deltalog_warehouse, project, "events")
        rel = f"{project.test_schema}.events"
        before = version(e)
        _, out = run_dbt_and_capture(["run-operation", "history", "--args", json.dumps({"relation": rel})])
        assert "OPTIMIZE" in out and "CREATE TABLE AS SELECT" in out
        run_dbt(["run-operation", "optimize", "--args", json.dumps({"relation": rel, "zorder_by": ["a"]})])
        assert version(e) == before + 1  # the skipped files of test 3 are clustered now
        run_dbt(["run-operation", "optimize", "--args", json.dumps({"relation": rel, "zorder_by": ["a"]})])
        assert version(e) == before + 1  # no-op
        _, out = run_dbt_and_capture(["run-operation", "vacuum", "--args",
                                      json.dumps({"relation": rel, "dry_run": True})])
        assert "would delete 0 file(s)" in out
        run_dbt(["run-operation", "restore", "--args", json.dumps({"relation": rel, "version": 0})])
        assert sorted(deltalake.DeltaTable(e).to_pyarrow_table().column("a").to_pylist()) == list(range(5000))
        assert deltalake.DeltaTable(e).history(1)[0]["operation"] == "RESTORE"
        # a retention below the table's is refused
        _, out = run_dbt_and_capture(["run-operation", "vacuum", "--args",
                                      json.dumps({"relation": rel, "retain_hours": 1})], expect_pass=False)
        assert "below the table's delta.deletedFileRetentionDuration" in out


class TestReadingThePast:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"events.sql": INCREMENTAL, "past.sql": PAST, "added.sql": ADDED}

    def test_as_of_and_table_changes(self, project, deltalog_warehouse):
        run_dbt(["run", "--select", "events"])
        e = path(deltalog_warehouse, project, "events")
        v = version(e)
        run_dbt(["run", "--select", "events", "--vars", "{lo: 5000, hi: 5025}"])
        run_dbt(["run", "--select", "past", "added", "--vars", json.dumps({"past_version": 0, "since_version": v + 1})])
        past = deltalake.DeltaTable(path(deltalog_warehouse, project, "past")).to_pyarrow_table()
        assert past.column("n").to_pylist() == [5000]
        added = deltalake.DeltaTable(path(deltalog_warehouse, project, "added")).to_pyarrow_table()
        assert sorted(added.column("a").to_pylist()) == list(range(5000, 5025))
        assert set(added.column("_commit_version").to_pylist()) == {v + 1}  # the OPTIMIZE after it changed no rows


BAD = {
    "bad_isolation.sql": ("{{ config(materialized='table', isolation_level='Snapshot') }}", "isolation_level",
                          "Serializable or WriteSerializable"),
    "bad_interval.sql": ("{{ config(materialized='table', checkpoint_interval=0) }}", "checkpoint_interval",
                         "integer >= 1"),
    "bad_zorder_column.sql": ("{{ config(materialized='table', zorder_by=['nope']) }}", "zorder_by",
                              "columns of the model"),
    "bad_zorder_partition.sql": ("{{ config(materialized='table', zorder_by=['p'], partition_by=['p']) }}",
                                 "zorder_by", "non-partition columns"),
    "bad_curve.sql": ("{{ config(materialized='table', zorder_by=['a'], cluster_curve='peano') }}",
                      "cluster_curve", "zorder or hilbert"),
    "bad_property.sql": ("{{ config(materialized='table', tblproperties={'delta.fooBar': 'x'}) }}",
                         "tblproperties.delta.fooBar", "known Delta property"),
    "bad_property_value.sql": ("{{ config(materialized='table', tblproperties={'delta.appendOnly': 'maybe'}) }}",
                               "tblproperties.delta.appendOnly", "true or false"),
    "bad_conflict.sql": ("{{ config(materialized='table', isolation_level='Serializable', "
                         "tblproperties={'delta.isolationLevel': 'WriteSerializable'}) }}",
                         "isolation_level", "same value as tblproperties"),
}


class TestBadValues:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        body = "\nselect id as a, cast(id % 2 as int) as p from range(10)\n"
        return {name: cfg + body for name, (cfg, _, _) in BAD.items()}

    def test_bad_values_fail_before_anything_is_written(self, project, deltalog_warehouse):
        results, out = run_dbt_and_capture(["run"], expect_pass=False)
        by_name = {r.node.name: r for r in results}
        for name, (_, config_name, allowed) in BAD.items():
            model = name[:-4]
            r = by_name[model]
            assert r.status == "error", model
            assert f"Model '{model}'" in r.message and f"config {config_name}=" in r.message, r.message
            assert allowed in r.message, r.message
            assert not os.path.exists(path(deltalog_warehouse, project, model)), model
