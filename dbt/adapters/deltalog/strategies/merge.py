"""`merge`: one MERGE on `unique_key`, its clauses from the model's configs as dbt-databricks names them
(without a `unique_key` nothing can match, and the rows are appended)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from dbt_common.exceptions import CompilationError

from dbt.adapters.deltalog.model_config import as_list, config_value, quote_name, truthy
from . import append
from .incremental_write import IncrementalWrite


def merge_clauses(config: Any, columns: List[str], unique_key: List[str], predicates: List[str],
                  name: str) -> Dict[str, Any]:
    """The merge's clauses: merge_update_columns / merge_exclude_columns, matched_condition,
    not_matched_condition, not_matched_by_source_action (ignore | delete | update, with
    not_matched_by_source_set and not_matched_by_source_condition), source_alias / target_alias,
    skip_matched_step and skip_not_matched_step."""

    def bad(key: str, value: Any, allowed: str) -> CompilationError:
        return CompilationError(f"Model {name}: config {key}={value!r} is not valid. Allowed: {allowed}. "
                                f"Nothing was written.")

    update_cols = as_list(config_value(config, "merge_update_columns"))
    exclude = [c.lower() for c in as_list(config_value(config, "merge_exclude_columns"))]
    if update_cols and exclude:
        raise CompilationError(
            "Model cannot specify merge_update_columns and merge_exclude_columns. "
            "Please update model to use only one config"
        )
    if exclude:
        update_cols = [c for c in columns if c.lower() not in exclude]
    aliases = {}
    for key, default in (("source_alias", "DBT_INTERNAL_SOURCE"), ("target_alias", "DBT_INTERNAL_DEST")):
        value = config_value(config, key) or default
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise bad(key, value, "a plain SQL name (letters, digits, _)")
        aliases[key] = value
    S, T = aliases["source_alias"], aliases["target_alias"]
    if S.lower() == T.lower():
        raise bad("source_alias", S, f"a name other than target_alias ({T})")
    q = quote_name
    on = " and ".join([f"{S}.{q(k)} = {T}.{q(k)}" for k in unique_key] + [f"({p})" for p in predicates])
    args: Dict[str, Any] = dict(on=on, source_alias=S, target_alias=T, unique_keys={k: k for k in unique_key})
    if not truthy(config_value(config, "skip_matched_step")):
        args["when_matched_update"] = {c: f"{S}.{q(c)}" for c in update_cols} if update_cols else "*"
        args["when_matched_condition"] = config_value(config, "matched_condition") or None
    if not truthy(config_value(config, "skip_not_matched_step")):
        args["when_not_matched_insert"] = "*"
        args["when_not_matched_condition"] = config_value(config, "not_matched_condition") or None
    action = str(config_value(config, "not_matched_by_source_action") or "ignore").strip().lower()
    setting = config_value(config, "not_matched_by_source_set")
    if action not in ("ignore", "delete", "update"):
        raise bad("not_matched_by_source_action", action, "ignore, delete or update")
    if action == "update":
        if not isinstance(setting, dict) or not setting:
            raise bad("not_matched_by_source_set", setting,
                      "a mapping of target column to SQL expression, required with not_matched_by_source_action: update")
        args["when_not_matched_by_source_update"] = {str(k): str(v) for k, v in setting.items()}
    elif setting:
        raise bad("not_matched_by_source_set", setting, "only with not_matched_by_source_action: update")
    if action == "delete":
        args["when_not_matched_by_source_delete"] = True
    if action != "ignore":
        args["when_not_matched_by_source_condition"] = config_value(config, "not_matched_by_source_condition") or None
    elif config_value(config, "not_matched_by_source_condition"):
        raise bad("not_matched_by_source_condition", config_value(config, "not_matched_by_source_condition"),
                  "only with not_matched_by_source_action: delete or update")
    return args


def run(w: IncrementalWrite) -> Optional[int]:
    from deltalog.schema_evolution import evolved_schema
    from deltalog.spark import operations

    if not w.unique_key:
        return append.run(w)  # no key: nothing can match, every row is new
    commit = dict(w.commit)
    if w.evolve:
        # MERGE WITH SCHEMA EVOLUTION: the source's new columns and struct fields join the table
        current = w.table.snapshot().schema_json
        evolved = evolved_schema(w.uri, current, operations.dataframe_schema(w.df, w.uri))
        if evolved != current:
            commit["table_schema"] = evolved
    clauses = merge_clauses(w.config, list(w.df.columns), w.unique_key, w.predicates, w.name)
    return operations.merge(w.spark, w.table, w.df, **clauses, **commit)
