"""`delete+insert` as ONE merge commit: the source's distinct keys delete the target rows they match (and
`incremental_predicates`, written against the target, allow); every source row, tagged apart so it never
matches, is inserted. Source columns get a prefix so that the predicates' unqualified names mean the
target's columns, as in dbt's DELETE ... WHERE."""
from __future__ import annotations

from typing import Optional

from dbt_common.exceptions import CompilationError

from dbt.adapters.deltalog.model_config import quote_name as q
from deltalog.lazy_imports import load
from .incremental_write import IncrementalWrite


def run(w: IncrementalWrite) -> Optional[int]:
    load("spark")
    from pyspark.sql import functions as F

    from deltalog.spark import operations

    if not w.unique_key:
        raise CompilationError(f"Model {w.name}: incremental_strategy 'delete+insert' needs a `unique_key`")
    df, unique_key = w.df, w.unique_key
    prefix, tag = "__dbt_src_", "__dbt_deltalog_action"
    src = df.select(*[F.col(q(c)).alias(prefix + c) for c in df.columns])
    key_cols = [prefix + k for k in unique_key]
    deletes = src.select(*[q(k) for k in key_cols]).distinct()
    for c in src.columns:
        if c not in key_cols:
            deletes = deletes.withColumn(c, F.lit(None).cast(src.schema[c].dataType))
    deletes = deletes.select(*[q(c) for c in src.columns]).withColumn(tag, F.lit("delete"))
    source = deletes.unionByName(src.withColumn(tag, F.lit("insert")))
    on = " and ".join(
        [f"DBT_INTERNAL_SOURCE.{q(prefix + k)} = DBT_INTERNAL_DEST.{q(k)}" for k in unique_key]
        + [f"DBT_INTERNAL_SOURCE.{tag} = 'delete'"]
        + [f"({p})" for p in w.predicates]
    )
    return operations.merge(
        w.spark, w.table, source, on=on,
        when_matched_delete_condition="true",
        when_not_matched_insert={c: f"DBT_INTERNAL_SOURCE.{q(prefix + c)}" for c in df.columns},
        when_not_matched_condition=f"DBT_INTERNAL_SOURCE.{tag} = 'insert'",
        unique_keys={prefix + k: k for k in unique_key},
        unique_keys_where=f"{tag} = 'insert'",
        **w.commit,
    )
