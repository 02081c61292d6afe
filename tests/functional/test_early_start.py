"""A dbt command that opens a connection starts its Spark session while dbt parses the project
(DeltalogAdapter.__init__ -> Runtime.start_early); one that needs none starts no JVM; a session that
cannot start fails the command with the error it would have without the early start."""

from __future__ import annotations

from dbt.adapters.deltalog.connections import SESSION_REACHED
from tests.support import dbt_process as cli

EARLY = "Spark started early, while dbt parsed the project"


def test_run_starts_spark_while_dbt_parses_and_parse_starts_none(tmp_path):
    project = cli.write_project(tmp_path / "p", "early", {"numbers.sql": "select id from range(0, 3)\n"},
                               dbt_project_extra="models:\n  early:\n    +materialized: table\n")

    parsed = cli.dbt(project, "--debug", "parse")
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    assert EARLY not in parsed.stdout and "Spark did not start early" not in parsed.stdout

    built = cli.dbt(project, "--debug", "run")
    assert built.returncode == 0, built.stdout + built.stderr
    assert EARLY in built.stdout
    assert cli.rows(project, "numbers") == [0, 1, 2]


def test_a_session_that_cannot_start_early_fails_the_command_with_its_error(tmp_path):
    project = cli.write_project(tmp_path / "p", "early_bad", {"numbers.sql": "select 1 as id\n"})
    profile = project / "profiles.yml"
    profile.write_text(profile.read_text().replace("master: local[2]", "master: nonsense[2]"))

    built = cli.dbt(project, "--debug", "run")
    assert built.returncode != 0
    assert "Spark did not start early" in built.stdout
    assert "could not start Spark (nonsense[2])" in built.stdout, built.stdout[-3000:]
    assert not (project / "warehouse" / "analytics" / "numbers").exists()


def _seeded_project_starting_spark_late(root, name: str, models: dict, numbers_csv: str):
    """A project with the seed `numbers`, whose commands start Spark only when something needs it."""
    project = cli.write_project(root, name, models)
    (project / "seeds").mkdir()
    (project / "seeds" / "numbers.csv").write_text(numbers_csv)
    profile = project / "profiles.yml"
    profile.write_text(profile.read_text().replace(
        'spark_conf: {spark.sql.shuffle.partitions: "2"}', 'spark_conf: {spark.deltalog.startEarly: "false"}'))
    return project


def test_seeds_written_without_spark_never_start_it(tmp_path):
    project = _seeded_project_starting_spark_late(tmp_path / "p", "seeds_only", {}, "id,label\n1,a\n2,b\n")

    seeded = cli.dbt(project, "--debug", "seed")
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    # dbt opens a connection only when something asks for the session: nothing did, so no JVM started
    assert "Opening a new connection" not in seeded.stdout, seeded.stdout[-3000:]
    assert cli.rows(project, "numbers") == [1, 2]


def test_a_new_warehouse_within_the_model_rules_builds_without_spark(tmp_path):
    project = _seeded_project_starting_spark_late(tmp_path / "p", "no_jvm", {
        "doubled.sql": "{{ config(materialized='view') }} select id, id * 2 as twice from {{ ref('numbers') }}\n",
        "totals.sql": "{{ config(materialized='table') }}\n"
                      "select count(*) as n, sum(twice) as total, max(id) / 10.0 as tenth from {{ ref('doubled') }}\n",
        "schema.yml": "version: 2\nmodels:\n  - name: doubled\n    columns:\n      - name: id\n"
                      "        data_tests: [not_null, unique]\n"}, "id\n1\n2\n3\n")

    # the first build: the seed written by the Arrow writer, the view's columns and the table's schema
    # worked out here (the model rules cover their SQL), the tests answered by DuckDB: no JVM
    first = cli.dbt(project, "--debug", "build")
    assert first.returncode == 0, first.stdout[-3000:]
    assert "PASS=5" in first.stdout, first.stdout[-3000:]
    assert SESSION_REACHED not in first.stdout, first.stdout[-3000:]
    assert "doubled`: its SQL is within the model rules: its columns ['id', 'twice'] found without Spark" \
        in first.stdout
    assert "totals`: built in this process by DuckDB" in first.stdout
    # built again: the seed unchanged, the view's check kept, its tests answered by DuckDB: no JVM
    again = cli.dbt(project, "--debug", "build")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "PASS=5" in again.stdout, again.stdout[-3000:]
    assert SESSION_REACHED not in again.stdout, again.stdout[-3000:]
    assert again.stdout.count("answered in this process by DuckDB") == 2
    assert "saved as it was, without a Spark job" in again.stdout
    # a view outside the rules (a function call): Spark checks it, once
    (project / "models" / "labelled.sql").write_text(
        "{{ config(materialized='view') }} select id, concat('n', id) as label from {{ ref('numbers') }}\n")
    third = cli.dbt(project, "--debug", "build")
    assert third.returncode == 0, third.stdout[-3000:]
    assert SESSION_REACHED in third.stdout and "PASS=6" in third.stdout
    assert "the view's SQL is checked by Spark: Concat" in third.stdout, third.stdout[-3000:]
    # a test Spark must answer reaches the session then
    (project / "tests").mkdir()
    (project / "tests" / "twice_is_even.sql").write_text(
        "select * from {{ ref('doubled') }} where twice % 2 <> 0\n")
    fourth = cli.dbt(project, "--debug", "build")
    assert fourth.returncode == 0, fourth.stdout[-3000:]
    assert fourth.stdout.count(SESSION_REACHED) >= 1 and "PASS=7" in fourth.stdout
    import decimal

    import deltalake

    totals = deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "totals")).to_pyarrow_table()
    assert totals.to_pylist() == [{"n": 3, "total": 12, "tenth": decimal.Decimal("0.300000")}]


def test_ctrl_c_before_any_connection_reached_spark_still_refuses_the_commands_commits(tmp_path):
    import deltalog.transaction as transaction
    from dbt.adapters.deltalog.connections import DeltalogHandle
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    def no_spark():
        raise AssertionError("cancelling must not start Spark")

    handle = DeltalogHandle(no_spark, warehouse=None)
    saved = RUNTIME.spark
    RUNTIME.spark = None  # this process has reached no session
    try:
        handle.cancel()
        assert transaction._refused_because and "cancelled" in transaction._refused_because
    finally:
        RUNTIME.spark = saved
        transaction.accept_commits()
