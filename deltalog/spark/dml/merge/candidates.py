"""MERGE, phase 1: the source computed once (its row count and the min/max of its equi-join keys, in one
job), and the files whose stats may hold a matching row. Records what the merge read on the transaction.
Reads the request; sets `keys`, `num_source`, `small_source`, `candidates`."""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import functions as F  # noqa: E402

from .... import sql  # noqa: E402
from ....expressions import ALWAYS, parse_sql_predicate  # noqa: E402
from ....file_selection import files_for  # noqa: E402
from ....schema import find_field  # noqa: E402
from ....sql_text import quote_identifier, sql_literal  # noqa: E402
from .plan import check_unique_keys, fits_broadcast  # noqa: E402
from .run import MergeRun  # noqa: E402


def find_candidates(run: MergeRun) -> None:
    source, plan, txn = run.source, run.plan, run.txn
    on, source_alias, target_alias = plan.on, run.source_alias, run.target_alias
    keys = [(s, t) for s, t in sql.equi_keys(on, source_alias, target_alias)
            if find_field(run.schema_json, t) is not None and s.lower() in {c.lower() for c in source.columns}]
    aggs = [F.count(F.lit(1)).alias("n")]
    src_types = {f.name.lower(): f.dataType.typeName() for f in source.schema.fields}
    for i, (s, _) in enumerate(keys):
        c = F.col(quote_identifier(s))
        if src_types[s.lower()] == "timestamp":
            # as epoch micros: Python would read a collected timestamp in its own time zone
            aggs += [F.unix_micros(F.min(c)).alias(f"mn{i}"), F.unix_micros(F.max(c)).alias(f"mx{i}")]
        else:
            aggs += [F.min(c).alias(f"mn{i}"), F.max(c).alias(f"mx{i}")]
    bounds = source.agg(*aggs).collect()[0]
    run.phases.done("source")
    run.keys, run.num_source = keys, bounds["n"]
    if run.num_source == 0 and not plan.by_source:
        return
    run.small_source = fits_broadcast(source)
    if run.unique_keys:
        check_unique_keys(source, run.unique_keys, run.unique_keys_where, run.name)
    exprs = []
    for i, (s, t) in enumerate(keys):
        lo, hi = bounds[f"mn{i}"], bounds[f"mx{i}"]
        if src_types[s.lower()] == "timestamp" and lo is not None:
            lo, hi = _utc_from_micros(lo), _utc_from_micros(hi)
        if lo is None:  # every source key is null: equality matches nothing
            exprs.append("false")
        else:
            exprs.append(f"{quote_identifier(t)} >= {sql_literal(lo)} and "
                         f"{quote_identifier(t)} <= {sql_literal(hi)}")
    exprs += [f"({c})" for c in sql.only_alias_conjuncts(on, target_alias, source_alias)]
    # what the merge reads: the rows within the source's key bounds (at WriteSerializable a concurrent
    # file whose min/max stats lie outside them cannot hold a row this merge would have matched)
    prune_text = " and ".join(f"({e})" for e in exprs)
    run.candidates = files_for(txn, parse_sql_predicate(prune_text) if prune_text else ALWAYS)
    if plan.by_source:
        txn.read_whole_table()  # any row of the table may be one the source does not match


def _utc_from_micros(micros: int) -> Any:
    import datetime as dt
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
