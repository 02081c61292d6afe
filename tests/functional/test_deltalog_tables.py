"""What a user checks after `dbt run`: the tables are Delta tables that another reader (delta-rs,
the `deltalake` package) reads the same, with the history dbt's commands should leave."""

import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

SEED_CSV = """id,name,region,amount,signup_date
1,alice,eu,10.5,2024-01-01
2,bob,us,20.0,2024-01-02
3,carol,eu,30.25,2024-01-03
4,dave,apac,40.0,2024-01-04
""".lstrip()

TABLE_SQL = """
{{ config(materialized='table') }}
select id, name, region, amount, signup_date from {{ ref('people') }}
"""

PARTITIONED_SQL = """
{{ config(materialized='table', partition_by=['region']) }}
select id, name, region, amount from {{ ref('people') }}
"""

VIEW_SQL = """
{{ config(materialized='view') }}
select id, upper(name) as name_upper from {{ ref('people_table') }}
"""

# round 1 builds the table; round 2 changes bob and adds erin
INCREMENTAL_SQL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% if var('round', 1) == 1 %}
select id, name, amount from {{ ref('people') }}
{% else %}
select 2 as id, 'bobby' as name, cast(99.0 as double) as amount
union all
select 5 as id, 'erin' as name, cast(50.0 as double) as amount
{% endif %}
"""


def table_dir(warehouse, project, name):
    return os.path.join(warehouse, project.test_schema, name)


def delta_rows(path, columns):
    table = deltalake.DeltaTable(path).to_pyarrow_table(columns=columns)
    return sorted((tuple(r[c] for c in columns) for r in table.to_pylist()), key=_nulls_first)


def _nulls_first(row):
    return [(v is not None, v) for v in row]


def spark_rows(project, name, columns):
    cols = ", ".join(columns)
    rows = project.run_sql(f"select {cols} from `{project.test_schema}.{name}`", fetch="all")
    return sorted((tuple(r) for r in rows), key=_nulls_first)


class TestDeltaTablesThroughDbt:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"people.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {
            "people_table.sql": TABLE_SQL,
            "people_partitioned.sql": PARTITIONED_SQL,
            "people_view.sql": VIEW_SQL,
            "people_incremental.sql": INCREMENTAL_SQL,
        }

    def test_user_workflow(self, project, deltalog_warehouse):
        # one test, steps in order: each step builds on the tables the previous one left (and
        # pytest-xdist may send separate tests of a class to separate workers)
        self.step_1_build_reads_back_with_deltalake(project, deltalog_warehouse)
        self.step_2_rebuild_is_an_overwrite_commit(project, deltalog_warehouse)
        self.step_3_incremental_merge_commit(project, deltalog_warehouse)
        self.step_4_full_refresh_keeps_history(project, deltalog_warehouse)
        self.step_5_view_survives_a_new_session(project, deltalog_warehouse)
        self.step_6_dml_statements_are_commits(project, deltalog_warehouse)
        self.step_7_contract_failure_commits_nothing(project, deltalog_warehouse)

    def step_1_build_reads_back_with_deltalake(self, project, deltalog_warehouse):
        assert len(run_dbt(["seed"])) == 1
        assert len(run_dbt(["run"])) == 4

        path = table_dir(deltalog_warehouse, project, "people_table")
        dt = deltalake.DeltaTable(path)
        assert dt.version() == 0
        cols = ["id", "name", "region", "amount"]
        assert delta_rows(path, cols) == spark_rows(project, "people_table", cols)
        assert len(delta_rows(path, cols)) == 4
        # the seed is typed: integers, doubles and dates, not strings
        types = {f.name: str(f.type) for f in dt.schema().fields}
        assert types["id"].lower().startswith(("primitivetype(\"long\")", "long")) or "long" in types["id"]
        assert "date" in types["signup_date"]

        # dbt names the model and the invocation in the commit
        info = dt.history(1)[0]
        assert info["dbtUniqueId"] == "model.test.people_table"
        assert info.get("dbtInvocationId")

        # partitioned: col=value folders, and both readers see the partition column
        ppath = table_dir(deltalog_warehouse, project, "people_partitioned")
        pdt = deltalake.DeltaTable(ppath)
        assert pdt.metadata().partition_columns == ["region"]
        assert {"region=eu", "region=us", "region=apac"} <= set(os.listdir(ppath))
        pcols = ["id", "name", "region"]
        assert delta_rows(ppath, pcols) == spark_rows(project, "people_partitioned", pcols)

        # Spark leaves no metastore or warehouse of its own in the project folder
        litter = {"metastore_db", "derby.log", "spark-warehouse"} & set(os.listdir(project.project_root))
        assert not litter

    def step_2_rebuild_is_an_overwrite_commit(self, project, deltalog_warehouse):
        run_dbt(["run", "--select", "people_table"])
        path = table_dir(deltalog_warehouse, project, "people_table")
        dt = deltalake.DeltaTable(path)
        assert dt.version() == 1
        last = dt.history(1)[0]
        assert "REPLACE" in last["operation"] or last.get("operationParameters", {}).get("mode") == "Overwrite"
        # history is kept: version 0 still reads
        old = deltalake.DeltaTable(path, version=0).to_pyarrow_table()
        assert old.num_rows == 4
        assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == 4

    def step_3_incremental_merge_commit(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "people_incremental")
        before = deltalake.DeltaTable(path).version()
        run_dbt(["run", "--select", "people_incremental", "--vars", "{round: 2}"])
        dt = deltalake.DeltaTable(path)
        assert dt.version() == before + 1
        assert dt.history(1)[0]["operation"] == "MERGE"
        rows = dict(delta_rows(path, ["id", "name"]))
        assert rows == {1: "alice", 2: "bobby", 3: "carol", 4: "dave", 5: "erin"}

    def step_4_full_refresh_keeps_history(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "people_incremental")
        before = deltalake.DeltaTable(path).version()
        run_dbt(["run", "--select", "people_incremental", "--full-refresh"])
        dt = deltalake.DeltaTable(path)
        assert dt.version() == before + 1  # an overwrite commit, not a drop and a new version 0
        assert len(dt.history()) == before + 2
        assert dict(delta_rows(path, ["id", "name"]))[2] == "bob"
        assert deltalake.DeltaTable(path, version=before).to_pyarrow_table().num_rows == 5

    def step_5_view_survives_a_new_session(self, project, deltalog_warehouse):
        from dbt.adapters.deltalog.runtime.session import RUNTIME, get_spark

        view_file = os.path.join(deltalog_warehouse, project.test_schema, "people_view.view.sql")
        assert os.path.isfile(view_file)
        # forget every session view, as a new process would start without them
        spark = get_spark()
        for name in [f"{project.test_schema}.people_view", f"{project.test_schema}.people_table"]:
            RUNTIME.views(spark).forget(name)
        rows = project.run_sql(f"select count(*) from `{project.test_schema}.people_view`", fetch="one")
        assert rows[0] == 4

    def step_6_dml_statements_are_commits(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "people_table")
        before = deltalake.DeltaTable(path).version()
        project.run_sql(f"update `{project.test_schema}.people_table` set name = 'ALICE' where id = 1")
        project.run_sql(f"delete from `{project.test_schema}.people_table` where id = 4")
        project.run_sql(
            f"insert into `{project.test_schema}.people_table` (id, name, region) values (9, 'zed', 'us')"
        )
        dt = deltalake.DeltaTable(path)
        assert dt.version() == before + 3
        assert dict(delta_rows(path, ["id", "name"])) == {1: "ALICE", 2: "bob", 3: "carol", 9: "zed"}

    def step_7_contract_failure_commits_nothing(self, project, deltalog_warehouse):
        yml = """
models:
  - name: contracted
    config:
      contract: {enforced: true}
    columns:
      - name: id
        data_type: string
"""
        models_dir = os.path.join(project.project_root, "models")
        sql_file = os.path.join(models_dir, "contracted.sql")
        with open(os.path.join(models_dir, "contract.yml"), "w") as f:
            f.write(yml)
        try:
            with open(sql_file, "w") as f:
                f.write("{{ config(materialized='table') }} select 'a' as id")
            run_dbt(["run", "--select", "contracted"])
            path = table_dir(deltalog_warehouse, project, "contracted")
            assert deltalake.DeltaTable(path).version() == 0
            # the contract says string; an integer id fails the model before anything is written
            with open(sql_file, "w") as f:
                f.write("{{ config(materialized='table') }} select 1 as id")
            _, out = run_dbt_and_capture(["run", "--select", "contracted"], expect_pass=False)
            assert "contract" in out.lower()
            assert deltalake.DeltaTable(path).version() == 0
            assert delta_rows(path, ["id"]) == [("a",)]
        finally:
            os.remove(sql_file)
            os.remove(os.path.join(models_dir, "contract.yml"))


STRATEGY_SEED = """id,day,value
1,2024-01-01,a
2,2024-01-01,b
3,2024-01-02,c
""".lstrip()

STRATEGY_SQL = """
{{{{ config(materialized='incremental', {config}) }}}}
{{% if is_incremental() %}}
select 3 as id, date'2024-01-02' as day, 'c2' as value
union all select 4 as id, date'2024-01-02' as day, 'd' as value
{{% else %}}
select id, day, value from {{{{ ref('events') }}}}
{{% endif %}}
"""


class TestIncrementalStrategies:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"events.csv": STRATEGY_SEED}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {
            "s_append.sql": STRATEGY_SQL.format(config="incremental_strategy='append'"),
            "s_delete_insert.sql": STRATEGY_SQL.format(config="incremental_strategy='delete+insert', unique_key='id'"),
            "s_insert_overwrite.sql": STRATEGY_SQL.format(
                config="incremental_strategy='insert_overwrite', partition_by=['day']"
            ),
            "s_replace_where.sql": STRATEGY_SQL.format(
                config="incremental_strategy='replace_where', incremental_predicates=[\"day = date'2024-01-02'\"]"
            ),
            "s_append_cols.sql": STRATEGY_SQL.replace("'c2' as value", "'c2' as value, 7 as extra").replace(
                "'d' as value", "'d' as value, 7 as extra"
            ).format(
                config="incremental_strategy='append', on_schema_change='append_new_columns'"
            ),
        }

    def test_strategies(self, project, deltalog_warehouse):
        run_dbt(["seed"])
        run_dbt(["run"])
        run_dbt(["run"])

        def rows(name, cols=("id", "value")):
            return delta_rows(table_dir(deltalog_warehouse, project, name), list(cols))

        assert rows("s_append") == [(1, "a"), (2, "b"), (3, "c"), (3, "c2"), (4, "d")]
        assert rows("s_delete_insert") == [(1, "a"), (2, "b"), (3, "c2"), (4, "d")]
        assert rows("s_insert_overwrite") == [(1, "a"), (2, "b"), (3, "c2"), (4, "d")]
        assert rows("s_replace_where") == [(1, "a"), (2, "b"), (3, "c2"), (4, "d")]
        for name in ("s_append", "s_delete_insert", "s_insert_overwrite", "s_replace_where"):
            assert deltalake.DeltaTable(table_dir(deltalog_warehouse, project, name)).version() == 1, name

        # append_new_columns: the new column and the rows in one commit
        path = table_dir(deltalog_warehouse, project, "s_append_cols")
        dt = deltalake.DeltaTable(path)
        assert "extra" in [f.name for f in dt.schema().fields]
        assert dt.version() == 1
        assert dt.history(1)[0]["operation"] == "WRITE"
        assert rows("s_append_cols", ("id", "extra")) == [(1, None), (2, None), (3, None), (3, 7), (4, 7)]


class TestDocsGenerateFromTheLog:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"people.csv": SEED_CSV}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"people_table.sql": TABLE_SQL, "people_view.sql": VIEW_SQL}

    def test_catalog_has_types_and_log_stats(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        run_dbt(["docs", "generate"])
        with open(os.path.join(project.project_root, "target", "catalog.json")) as f:
            catalog = json.load(f)
        table = catalog["nodes"]["model.test.people_table"]
        assert table["metadata"]["type"] == "table"
        columns = {c.lower(): v["type"] for c, v in table["columns"].items()}
        assert columns == {
            "id": "bigint", "name": "string", "region": "string", "amount": "double", "signup_date": "date",
        }
        assert table["stats"]["rows"]["value"] == 4
        assert table["stats"]["version"]["value"] == 0
        assert table["stats"]["files"]["value"] >= 1
        assert table["stats"]["bytes"]["value"] > 0
        view = catalog["nodes"]["model.test.people_view"]
        assert view["metadata"]["type"] == "view"
        assert set(c.lower() for c in view["columns"]) == {"id", "name_upper"}


MICROBATCH_SEED = """id,event_time,value
1,2024-01-01 10:00:00,a
2,2024-01-02 10:00:00,b
3,2024-01-03 10:00:00,c
""".lstrip()

MICROBATCH_INPUT_SQL = """
{{ config(materialized='table', event_time='event_time') }}
select id, cast(event_time as timestamp) as event_time,
       value || '{{ var("suffix", "") }}' as value
from {{ ref('mb_events') }}
"""

MICROBATCH_SQL = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin='2024-01-01') }}
select * from {{ ref('mb_input') }}
"""


class TestMicrobatchOneCommitPerBatch:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"mb_events.csv": MICROBATCH_SEED}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"mb_input.sql": MICROBATCH_INPUT_SQL, "mb_model.sql": MICROBATCH_SQL}

    def test_batches(self, project, deltalog_warehouse):
        window = ["--event-time-start", "2024-01-01", "--event-time-end", "2024-01-04"]
        run_dbt(["seed"])
        run_dbt(["run", "--select", "mb_input"])
        run_dbt(["run", "--select", "mb_model", *window])
        path = table_dir(deltalog_warehouse, project, "mb_model")
        dt = deltalake.DeltaTable(path)
        assert dt.version() == 2  # three daily batches, one commit each
        assert delta_rows(path, ["id", "value"]) == [(1, "a"), (2, "b"), (3, "c")]

        # re-running one day replaces that day's rows only
        run_dbt(["run", "--select", "mb_input", "--vars", "{suffix: '2'}"])
        run_dbt(["run", "--select", "mb_model", "--event-time-start", "2024-01-02", "--event-time-end", "2024-01-03"])
        assert deltalake.DeltaTable(path).version() == 3
        assert delta_rows(path, ["id", "value"]) == [(1, "a"), (2, "b2"), (3, "c")]


CONCURRENT_SEED = "id,event_time,value\n" + "".join(
    f"{i},2024-01-{(i % 8) + 1:02d} {(i * 7) % 24:02d}:00:00,v{i}\n" for i in range(1, 41))

CONCURRENT_SQL = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_time',
          batch_size='day', begin='2024-01-01', concurrent_batches=true) }}
select * from {{ ref('mb_input') }}
"""


class TestMicrobatchConcurrentBatches:
    """concurrent_batches: dbt runs the batches in parallel threads; each is a replace-where commit on
    its own day, and those commits do not conflict (their files' min/max keep them apart)."""

    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"mb_events.csv": CONCURRENT_SEED}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"mb_input.sql": MICROBATCH_INPUT_SQL, "mb_parallel.sql": CONCURRENT_SQL}

    def test_parallel_batches_all_land(self, project, deltalog_warehouse):
        run_dbt(["seed"])
        run_dbt(["run", "--select", "mb_input"])
        window = ["--event-time-start", "2024-01-01", "--event-time-end", "2024-01-09"]
        run_dbt(["run", "--select", "mb_parallel", *window])  # first build: batch 1 creates the table
        path = table_dir(deltalog_warehouse, project, "mb_parallel")
        assert sorted(r[0] for r in delta_rows(path, ["id"])) == list(range(1, 41))
        before = deltalake.DeltaTable(path).version()
        _, out = run_dbt_and_capture(["run", "--select", "mb_parallel", *window, "--threads", "4"])
        assert "Concurrent" not in out and "conflict" not in out.lower()
        dt = deltalake.DeltaTable(path)
        assert dt.version() == before + 8  # eight daily batches, one commit each, none lost
        assert sorted(r[0] for r in delta_rows(path, ["id"])) == list(range(1, 41))


STRUCT_ORDER_SQL = """
{{{{ config(materialized='incremental', unique_key='id', incremental_strategy='{strategy}',
            on_schema_change='{on_schema_change}') }}}}
{{% if is_incremental() %}}
select 2 as id, named_struct('b', 'B2', 'a', 'A2') as info
{{% else %}}
select 1 as id, named_struct('a', 'A1', 'b', 'B1') as info
{{% endif %}}
"""


class TestStructFieldsInAnotherOrder:
    """A model that spells a struct's fields in another order than its table keeps every value in its
    field: struct fields are matched by name, never by position (Spark's own cast), whatever
    on_schema_change and strategy say."""

    @pytest.fixture(scope="class")
    def models(self):
        return {f"s_{strategy}_{osc}.sql": STRUCT_ORDER_SQL.format(strategy=strategy, on_schema_change=osc)
                for strategy in ("append", "merge") for osc in ("ignore", "append_new_columns")}

    def test_values_stay_in_their_fields(self, project, deltalog_warehouse):
        run_dbt(["run"])
        run_dbt(["run"])
        for strategy in ("append", "merge"):
            for osc in ("ignore", "append_new_columns"):
                path = table_dir(deltalog_warehouse, project, f"s_{strategy}_{osc}")
                rows = sorted(deltalake.DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
                assert rows == [{"id": 1, "info": {"a": "A1", "b": "B1"}},
                                {"id": 2, "info": {"a": "A2", "b": "B2"}}], (strategy, osc)


class TestSeedsLoadOnlyWhatChanged:
    """A seed whose rows, types and config are those of its table's last commit is not loaded again (a
    second `dbt build` rewrote every seed); a changed CSV or config, a commit by anything else since, or
    --full-refresh load it."""

    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"people.csv": SEED_CSV}

    def test_unchanged_seeds_commit_nothing(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "people")
        cols = ["id", "name", "amount"]
        run_dbt(["seed"])
        assert deltalake.DeltaTable(path).version() == 0

        results, out = run_dbt_and_capture(["seed"])
        assert deltalake.DeltaTable(path).version() == 0
        assert "UNCHANGED 4" in out and results[0].adapter_response["rows_affected"] == 0

        # a changed row: loaded (one overwrite commit), then unchanged again
        csv = os.path.join(project.project_root, "seeds", "people.csv")
        with open(csv, "w") as f:
            f.write(SEED_CSV.replace("bob,us,20.0", "bob,us,21.0"))
        run_dbt(["seed"])
        assert deltalake.DeltaTable(path).version() == 1
        assert (2, "bob", 21.0) in delta_rows(path, cols)
        run_dbt(["seed"])
        assert deltalake.DeltaTable(path).version() == 1

        # a commit by something else since the last load: the seed is loaded again, and its rows are back
        project.run_sql(f"delete from `{project.test_schema}.people` where id = 1")
        assert deltalake.DeltaTable(path).version() == 2
        run_dbt(["seed"])
        assert deltalake.DeltaTable(path).version() == 3
        assert len(delta_rows(path, cols)) == 4

        # a changed config (column types): loaded
        with open(os.path.join(project.project_root, "seeds", "people.yml"), "w") as f:
            f.write("version: 2\nseeds:\n  - name: people\n    config:\n"
                    "      column_types: {amount: 'decimal(10,2)'}\n")
        run_dbt(["seed"])
        dt = deltalake.DeltaTable(path)
        types = {f.name: str(f.type).lower() for f in dt.schema().fields}
        assert dt.version() == 4 and "decimal" in types["amount"], types

        # --full-refresh loads it anyway
        run_dbt(["seed", "--full-refresh"])
        assert deltalake.DeltaTable(path).version() == 5
        assert len(delta_rows(path, cols)) == 4


class TestSeedOfWholeDecimals:
    """A CSV column of whole numbers written with a fraction (`1.0`) is typed bigint by dbt, as dbt-spark
    and dbt-duckdb type it; it loads as those numbers (Spark's cast refused the text `1.0`)."""

    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"whole.csv": "id,amount,rate\n1,1.0,2.50\n2,-2.00,0.1\n3,,1e3\n"}

    def test_whole_decimals_load_as_bigint(self, project, deltalog_warehouse):
        run_dbt(["seed"])
        dt = deltalake.DeltaTable(table_dir(deltalog_warehouse, project, "whole"))
        types = {f.name: str(f.type).lower() for f in dt.schema().fields}
        assert "long" in types["amount"] and "double" in types["rate"], types
        assert delta_rows(dt.table_uri, ["id", "amount", "rate"]) == [(1, 1, 2.5), (2, -2, 0.1), (3, None, 1000.0)]
