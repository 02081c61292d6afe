"""Model configs that would do nothing here, named in a warning (the model still builds).

dbt keeps any config key it does not know and hands it to the adapter, which reads only its own: a
model moved from dbt-databricks with `databricks_tags`, or one with `zorderby` for `zorder_by`, builds a
plain table and nobody is told. Warned about, once per model and process: a config dbt-spark or
dbt-databricks takes that is not applied here, and a near-miss of one of this adapter's configs. Any
other key is the project's own (dbt allows custom configs) and is left alone, as are dbt's own configs.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from dbt.adapters.base import AdapterConfig


@dataclasses.dataclass
class DeltalogConfig(AdapterConfig):
    """Every model config this adapter reads (beside dbt's own): a config key close to one of these
    names is warned about as a misspelling (`config_warnings`)."""
    partition_by: Optional[Any] = None
    table_format: Optional[str] = None  # iceberg: readable as Iceberg too (UniForm)
    incremental_strategy: Optional[str] = None
    unique_key: Optional[Any] = None
    merge_update_columns: Optional[List[str]] = None
    merge_exclude_columns: Optional[List[str]] = None
    incremental_predicates: Optional[List[str]] = None
    on_schema_change: Optional[str] = None
    tblproperties: Optional[Dict[str, str]] = None
    zorder_by: Optional[Any] = None
    isolation_level: Optional[str] = None
    checkpoint_interval: Optional[int] = None
    location_root: Optional[str] = None
    liquid_clustered_by: Optional[Any] = None
    cluster_by: Optional[Any] = None
    file_format: Optional[str] = None
    clustered_by: Optional[Any] = None
    buckets: Optional[int] = None
    # the table configs model_config.py reads
    zorder: Optional[Any] = None
    cluster_curve: Optional[str] = None
    skip_optimize: Optional[bool] = None
    column_mapping: Optional[str] = None
    change_data_feed: Optional[bool] = None
    deletion_vectors: Optional[bool] = None
    row_tracking: Optional[bool] = None
    auto_compact: Optional[bool] = None
    # the merge's clauses (strategies/merge.py) and the incremental write's
    merge_with_schema_evolution: Optional[bool] = None
    matched_condition: Optional[str] = None
    not_matched_condition: Optional[str] = None
    not_matched_by_source_action: Optional[str] = None
    not_matched_by_source_condition: Optional[str] = None
    not_matched_by_source_set: Optional[Dict[str, str]] = None
    skip_matched_step: Optional[bool] = None
    skip_not_matched_step: Optional[bool] = None
    source_alias: Optional[str] = None
    target_alias: Optional[str] = None
    predicates: Optional[List[str]] = None
    # columns filled in for the model: identity, generated, defaults (declared_columns.py)
    identity_columns: Optional[Any] = None
    generated_columns: Optional[Dict[str, str]] = None
    column_defaults: Optional[Dict[str, Any]] = None
    # a streaming_table's trigger (streaming.py)
    trigger: Optional[Any] = None
    # a streaming_table whose stream is changes, applied by key (deltalog/spark/apply_changes/)
    apply_changes: Optional[Dict[str, Any]] = None


OWN_CONFIGS = frozenset(field.name for field in dataclasses.fields(DeltalogConfig))


# How close a key must be to one of our configs to be taken for a misspelling of it
# (`zorderby` / `zorder_by` is 0.94, `isolation_levle` / `isolation_level` 0.93).
NEAR_MISS_CUTOFF = 0.85

# Configs of dbt-spark and dbt-databricks that this adapter does not apply: (whose, what it means there).
FOREIGN_CONFIGS = {
    "databricks_tags": ("dbt-databricks", "Unity Catalog tags"),
    "query_tags": ("dbt-databricks", "tags on the model's queries in the Databricks query history"),
    "databricks_compute": ("dbt-databricks", "the named compute of the profile that runs the model"),
    "auto_liquid_cluster": ("dbt-databricks", "clustering columns that Databricks chooses (CLUSTER BY AUTO); "
                                              "name them with liquid_clustered_by here"),
    "include_full_name_in_path": ("dbt-databricks", "tables at <location_root>/<catalog>/<schema>/<name>; "
                                                    "here a table lives at <location_root>/<name>"),
    "unique_tmp_table_suffix": ("dbt-databricks", "a unique name for an incremental run's temporary table; "
                                                  "here temporary views are unique per run and thread already"),
    "use_safer_relation_operations": ("dbt-databricks", "a rebuild staged beside the table and swapped in; here "
                                                        "a rebuild is one atomic overwrite commit already"),
    "incremental_apply_config_changes": ("dbt-databricks", "whether incremental runs apply changed properties "
                                                           "and tags; here every run applies them"),
    "view_update_via_alter": ("dbt-databricks", "ALTER VIEW in place of CREATE OR REPLACE VIEW"),
    "schedule": ("dbt-databricks", "a refresh schedule of a materialized view or streaming table; here each "
                                   "dbt run refreshes it"),
    "options": ("dbt-spark", "the OPTIONS clause of CREATE TABLE ... USING; Delta table properties go in "
                             "tblproperties here"),
    "cluster_id": ("dbt-spark / dbt-databricks", "the cluster a Python model is submitted to; here Python "
                                                 "models run on the connection's Spark session"),
    "job_cluster_config": ("dbt-spark / dbt-databricks", "a job cluster for a Python model; here Python models "
                                                         "run on the connection's Spark session"),
    "create_notebook": ("dbt-spark / dbt-databricks", "a Python model uploaded as a notebook"),
}

# dbt's own configs that are not fields of its config dataclasses (read by its macros, or by every
# adapter that runs Python models).
DBT_CONFIGS_OFF_DATACLASSES = {
    "hard_deletes", "invalidate_hard_deletes", "snapshot_table_column_names", "sql_header",
    "submission_method",
}



@functools.lru_cache(maxsize=None)
def dbt_configs() -> frozenset:
    """Every config key dbt itself defines for models, seeds, snapshots and tests (field names and
    their aliases, e.g. both `pre_hook` and `pre-hook`)."""
    from dbt.artifacts import resources

    names = set(DBT_CONFIGS_OFF_DATACLASSES)
    for config_class in (resources.NodeConfig, resources.ModelConfig, resources.SeedConfig,
                         resources.SnapshotConfig, resources.TestConfig, resources.UnitTestConfig):
        for field in dataclasses.fields(config_class):
            names.add(field.name)
            if field.metadata.get("alias"):
                names.add(field.metadata["alias"])
    names.discard("_extra")
    return frozenset(names)


def config_warnings(label: str, config: Mapping[str, Any], own_configs: Iterable[str],
                    built: str = "table") -> List[str]:
    """One sentence per config key in `config` that does nothing here. `label` names the node ("model
    orders"), `own_configs` are this adapter's config names, `built` what is built without it."""
    own = set(own_configs)
    known = own | dbt_configs()
    warnings = []
    for key in config:
        if key in known:
            continue
        if key in FOREIGN_CONFIGS:
            whose, meaning = FOREIGN_CONFIGS[key]
            warnings.append(f"{label}: '{key}' is a {whose} config this adapter does not apply ({meaning}); "
                            f"the {built} is built without it.")
            continue
        near = difflib.get_close_matches(key.lower(), sorted(own), n=1, cutoff=NEAR_MISS_CUTOFF)
        if near:
            warnings.append(f"{label}: config '{key}' is not a config of dbt-deltalog and does nothing; did you "
                            f"mean '{near[0]}'? The {built} is built without it.")
    return warnings


# The models already warned about in this process: dbt runs models on several threads, and a
# microbatch model runs (and reaches the hook) once per batch.
_warned_models: set = set()
_warned_lock = threading.Lock()


def _first_time(model_id: str) -> bool:
    with _warned_lock:
        if model_id in _warned_models:
            return False
        _warned_models.add(model_id)
        return True


def warn_unapplied_configs(node: Any, own_configs: Iterable[str], warn: Callable[[str], None]) -> None:
    """Before a model, seed or snapshot runs: `warn` each of its configs that does nothing here, the
    first time the node runs in this process. Tests and unit tests are left alone."""
    resource_type = str(getattr(node, "resource_type", ""))  # dbt's NodeType is a str enum: "model", ...
    if resource_type not in ("model", "seed", "snapshot"):
        return
    config = getattr(node, "config", None)
    if config is None:
        return
    config = config.to_dict(omit_none=True) if hasattr(config, "to_dict") else dict(config)
    built = "view" if config.get("materialized") == "view" else "table"
    warnings = config_warnings(f"{resource_type} {node.name}", config, own_configs, built)
    if warnings and _first_time(getattr(node, "unique_id", None) or node.name):
        for warning in warnings:
            warn(warning)
