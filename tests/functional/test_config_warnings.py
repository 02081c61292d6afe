"""Model configs that do nothing here are named in a warning, once per model, and the model still builds:
dbt-databricks' and dbt-spark's configs this adapter does not apply, and near-misses of ours. dbt's own
configs and a project's custom ones are never warned about."""
from __future__ import annotations

import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from dbt.artifacts.resources import ModelConfig, SeedConfig, SnapshotConfig, TestConfig

from dbt.adapters.deltalog.model_config_keys import OWN_CONFIGS
from dbt.adapters.deltalog.model_config_keys import (
    FOREIGN_CONFIGS, config_warnings, dbt_configs, warn_unapplied_configs,
)
from tests.support import dbt_process as cli

ROOT = Path(__file__).resolve().parents[2]


def _warnings(config: dict, built: str = "table") -> list:
    return config_warnings("model m", config, OWN_CONFIGS, built)


# ---- the pure function: no Spark, no dbt command -----------------------------------------------------


def test_a_near_miss_of_our_config_names_the_config_meant():
    assert _warnings({"zorderby": ["id"]}) == [
        "model m: config 'zorderby' is not a config of dbt-deltalog and does nothing; did you mean "
        "'zorder_by'? The table is built without it."]
    assert _warnings({"isolation_levle": "Serializable"}) == [
        "model m: config 'isolation_levle' is not a config of dbt-deltalog and does nothing; did you mean "
        "'isolation_level'? The table is built without it."]
    assert "did you mean 'tblproperties'?" in _warnings({"TBLPROPERTIES": {}})[0]
    assert "did you mean 'skip_not_matched_step'?" in _warnings({"skip_non_matched_step": True})[0]


def test_a_foreign_adapter_config_says_what_it_means_there():
    assert _warnings({"databricks_tags": {"a": "b"}}) == [
        "model m: 'databricks_tags' is a dbt-databricks config this adapter does not apply (Unity Catalog "
        "tags); the table is built without it."]
    assert _warnings({"options": {"compression": "zstd"}}, built="view") == [
        "model m: 'options' is a dbt-spark config this adapter does not apply (the OPTIONS clause of CREATE "
        "TABLE ... USING; Delta table properties go in tblproperties here); the view is built without it."]


def test_dbt_configs_ours_and_custom_keys_are_not_warned_about():
    dbt_own = ["materialized", "schema", "alias", "tags", "meta", "docs", "persist_docs", "enabled", "pre-hook",
               "post-hook", "pre_hook", "unique_key", "on_schema_change", "incremental_strategy", "grants",
               "contract", "event_time", "batch_size", "lookback", "begin", "full_refresh", "column_types",
               "quote_columns", "delimiter", "strategy", "updated_at", "check_cols", "target_schema",
               "target_database", "invalidate_hard_deletes", "hard_deletes", "snapshot_meta_column_names",
               "dbt_valid_to_current", "packages", "submission_method", "sql_header", "severity", "store_failures",
               "where", "limit", "warn_if", "error_if", "concurrent_batches", "access", "quoting"]
    ours = sorted(OWN_CONFIGS) + ["table_format"]
    custom = ["owner_team", "owner", "team", "priority", "domain", "retention", "source", "target"]
    assert _warnings({key: "x" for key in dbt_own + ours + custom}) == []


def test_every_config_the_adapter_reads_by_name_is_ours_or_dbts():
    """DeltalogConfig is the list of our configs a near-miss is measured against: a config read in the
    adapter's Python or Jinja but missing from it would not be recognized in a misspelling."""
    read = set()
    for path in [*(ROOT / "dbt/adapters/deltalog").rglob("*.py"), *(ROOT / "dbt/include/deltalog").rglob("*.sql")]:
        text = path.read_text()
        read |= set(re.findall(r"""(?:_get|config_value)\(config, ["'](\w+)["']""", text))
        read |= set(re.findall(r"""\bconfig\.get\(["'](\w+)["']""", text))
    read = {key for key in read if not key.startswith("__dbt_internal")}  # dbt's own microbatch keys
    assert {"zorder_by", "merge_with_schema_evolution", "skip_not_matched_step", "trigger"} <= read
    assert read - OWN_CONFIGS - dbt_configs() - {"table_format"} == set()


def test_no_foreign_config_is_one_we_apply_or_dbts():
    assert set(FOREIGN_CONFIGS) & (OWN_CONFIGS | dbt_configs() | {"table_format"}) == set()


def test_each_node_warns_once_across_threads_and_tests_are_left_alone():
    said = []
    nodes = [
        SimpleNamespace(resource_type="model", name="orders", unique_id="model.p.orders_once",
                        config=ModelConfig.from_dict({"materialized": "view", "zorderby": ["id"], "owner_team": "x"})),
        SimpleNamespace(resource_type="seed", name="countries", unique_id="seed.p.countries_once",
                        config=SeedConfig.from_dict({"databricks_tags": {"a": "b"}})),
        SimpleNamespace(resource_type="snapshot", name="history", unique_id="snapshot.p.history_once",
                        config=SnapshotConfig.from_dict({"strategy": "check", "check_cols": "all", "unique_key": "id",
                                                         "isolation_levle": "Serializable"})),
        SimpleNamespace(resource_type="test", name="not_null_orders_id", unique_id="test.p.not_null_once",
                        config=TestConfig.from_dict({"zorderby": ["id"]})),
        SimpleNamespace(resource_type="model", name="clean", unique_id="model.p.clean_once",
                        config=ModelConfig.from_dict({"materialized": "table", "zorder_by": ["id"]})),
    ]
    start = threading.Barrier(8)

    def run_every_node():
        start.wait()
        for node in nodes:
            warn_unapplied_configs(node, OWN_CONFIGS, said.append)

    threads = [threading.Thread(target=run_every_node) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(said) == sorted([
        "model orders: config 'zorderby' is not a config of dbt-deltalog and does nothing; did you mean "
        "'zorder_by'? The view is built without it.",
        "seed countries: 'databricks_tags' is a dbt-databricks config this adapter does not apply (Unity "
        "Catalog tags); the table is built without it.",
        "snapshot history: config 'isolation_levle' is not a config of dbt-deltalog and does nothing; did you "
        "mean 'isolation_level'? The table is built without it.",
    ])


# ---- a dbt run ---------------------------------------------------------------------------------------

MODELS = {
    "typo_zorder.sql": "{{ config(materialized='table', zorderby=['id']) }}\nselect id from range(0, 5)\n",
    "tagged.sql": "{{ config(materialized='table', databricks_tags={'a': 'b'}) }}\nselect id from range(0, 5)\n",
    "typo_isolation.sql": "{{ config(materialized='incremental', isolation_levle='Serializable') }}\n"
                          "select id from range(0, 5)\n",
    "owned.sql": "{{ config(materialized='view', owner_team='x') }}\nselect id from range(0, 5)\n",
    "clean.sql": "{{ config(materialized='table', zorder_by=['id']) }}\nselect id from range(0, 5)\n",
}


@pytest.mark.dbt
def test_dbt_run_warns_once_per_model_and_builds_every_model(tmp_path):
    project = cli.write_project(tmp_path / "proj", "config_warnings", MODELS)  # threads: 2
    run = cli.dbt(project, "run")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "PASS=5" in output and "ERROR=0" in output, output
    expected = {
        "typo_zorder": "model typo_zorder: config 'zorderby' is not a config of dbt-deltalog and does nothing; "
                       "did you mean 'zorder_by'? The table is built without it.",
        "tagged": "model tagged: 'databricks_tags' is a dbt-databricks config this adapter does not apply (Unity "
                  "Catalog tags); the table is built without it.",
        "typo_isolation": "model typo_isolation: config 'isolation_levle' is not a config of dbt-deltalog and does "
                          "nothing; did you mean 'isolation_level'? The table is built without it.",
    }
    for model, warning in expected.items():
        assert output.count(warning) == 1, f"{model}:\n{output}"
    for quiet in ("owned", "clean"):
        assert f"model {quiet}:" not in output, output
    assert "owner_team" not in output, output
    for table in ("typo_zorder", "tagged", "typo_isolation", "clean"):
        assert cli.rows(project, table) == [0, 1, 2, 3, 4]
