"""Materialized views: `materialized='materialized_view'`, a table refreshed by each `dbt run`.

A refresh is one of three, and the log says which and why:
- **nothing**: every input table of ours is at the version the view records (`txn`, appId per input
  table, version = the input version it reflects): no commit.
- **incremental**: the query is a grouped aggregate (`select k1, k2, sum(x) as s, count(*) as n, min(..),
  max(..), avg(..) from <one table of ours> [where ...] group by k1, k2`) and the input's commits since the
  recorded version only added rows. The query runs over just the rows those commits added, and the result
  is merged into the view by the group keys (null-safe): sums and counts add up, min and max take the
  smaller and larger. An `avg` keeps its running sum and count per group in a state table beside the
  view (`<view>/_dbt_mv_state`, a folder Delta readers and VACUUM leave alone): the new rows' sums and
  counts are merged into it first, then the view takes sum / count of the groups they touched. Each of the
  two commits records the input's new version; a state table that is not at the view's version (a
  refresh that stopped between them) makes the next refresh a full recompute.
- **full**: anything else (joins, several inputs, HAVING, DISTINCT, windows, count(distinct), an input
  that deleted or updated rows, a first build, --full-refresh): the query recomputed in one overwrite
  commit recording every input's version.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from deltalog.lazy_imports import load

MV_APP_PREFIX = "dbt-deltalog materialized view input "
STATE_DIR = "_dbt_mv_state"  # the running sums and counts of avg columns
AGGREGATES = ("sum", "count", "min", "max", "avg")


@dataclass(frozen=True)
class IncrementalPlan:
    """A grouped aggregate over one relation: what an incremental refresh needs."""
    source: Tuple[str, str]          # (schema, table) of the input
    keys: List[str]                  # group-by columns, as the view names them
    aggregates: Dict[str, str]       # view column -> sum | count | min | max | avg
    tree: Any                        # the parsed query (sqlglot)


def _source_of(table: Any) -> Optional[Tuple[str, str]]:
    name, db = table.name, table.args.get("db")
    if db is not None and db.name:
        return db.name, name
    if "." in name:  # a relation rendered as one quoted name: `schema.table`
        schema, _, ident = name.partition(".")
        return schema, ident
    return None


def incremental_plan(sql: str) -> Tuple[Optional[IncrementalPlan], str]:
    """The plan for an incremental refresh of `sql`, or None and why a full recompute is needed."""
    load("sqlglot")
    import sqlglot
    from sqlglot import expressions as exp

    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except Exception as exc:  # sqlglot cannot read it: Spark will, in a full recompute
        return None, f"the query could not be analysed ({type(exc).__name__})"
    if not isinstance(tree, exp.Select):
        return None, "the query is not a single SELECT"
    for arg, what in (("with", "a WITH clause"), ("joins", "a join"), ("having", "HAVING"), ("distinct", "DISTINCT"),
                      ("limit", "LIMIT"), ("order", "ORDER BY"), ("qualify", "QUALIFY")):
        if tree.args.get(arg):
            return None, f"the query has {what}"
    from_ = tree.args.get("from") or tree.args.get("from_")
    table = from_.this if from_ is not None else None
    if not isinstance(table, exp.Table) or _source_of(table) is None:
        return None, "the query does not read exactly one table"
    group = tree.args.get("group")
    keys = [g.name for g in group.expressions] if group is not None else []
    if group is not None and not all(isinstance(g, exp.Column) for g in group.expressions):
        return None, "it groups by expressions, not columns"
    aggregates: Dict[str, str] = {}
    projected_keys = []
    for projection in tree.expressions:
        name = projection.alias_or_name
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(inner, exp.Column) and inner.name in keys:
            if name != inner.name:
                return None, f"group column {inner.name} is renamed (as {name})"
            projected_keys.append(name)
            continue
        kind = {exp.Sum: "sum", exp.Count: "count", exp.Min: "min", exp.Max: "max", exp.Avg: "avg"}.get(type(inner))
        if kind is None:
            return None, f"column {name} is not a group column nor sum/count/min/max/avg of the rows"
        if isinstance(inner.this, exp.Distinct):
            return None, f"column {name} counts distinct values"
        if not isinstance(projection, exp.Alias):
            return None, f"aggregate {projection.sql('spark')} has no alias (name it: ... as total)"
        if list(inner.find_all(exp.Window)):
            return None, f"column {name} is a window function"
        aggregates[name] = kind
    if sorted(projected_keys) != sorted(keys):
        return None, "not every group column is selected"
    if not aggregates:
        return None, "the query has no aggregate"
    return IncrementalPlan(_source_of(table), keys, aggregates, tree), "a grouped aggregate over one table"


def _reading(plan: IncrementalPlan, view: str) -> Any:
    """A copy of the parsed query that reads the temporary view `view` instead of its input."""
    load("sqlglot")
    from sqlglot import expressions as exp

    tree = plan.tree.copy()
    from_ = tree.args.get("from") or tree.args.get("from_")
    from_.this.replace(exp.Table(this=exp.to_identifier(view, quoted=True), alias=from_.this.args.get("alias")))
    return tree


def with_source(plan: IncrementalPlan, view: str) -> str:
    """The query, reading the temporary view `view` instead of its input."""
    return _reading(plan, view).sql("spark")


def state_columns(plan: IncrementalPlan) -> Dict[str, Tuple[str, str]]:
    """{avg column: (its running sum column, its running count column)} in the state table."""
    return {c: (f"{c}__sum", f"{c}__count") for c, kind in plan.aggregates.items() if kind == "avg"}


def state_sql(plan: IncrementalPlan, view: str) -> str:
    """The running sums and counts of the avg columns, by group, of the rows of `view`."""
    load("sqlglot")
    from sqlglot import expressions as exp

    tree = _reading(plan, view)
    names = state_columns(plan)
    projections = []
    for projection in tree.expressions:
        name = projection.alias_or_name
        if name in plan.keys:
            projections.append(projection)
        elif name in names:
            value = projection.this.this
            projections.append(exp.alias_(exp.Sum(this=value.copy()), names[name][0], quoted=True))
            projections.append(exp.alias_(exp.Count(this=value.copy()), names[name][1], quoted=True))
    tree.set("expressions", projections)
    return tree.sql("spark")


def combine(kind: str, column: str) -> str:
    """The view's new value of an aggregate column from its old value (DBT_INTERNAL_DEST) and the new
    rows' (DBT_INTERNAL_SOURCE)."""
    t, s = f"DBT_INTERNAL_DEST.`{column}`", f"DBT_INTERNAL_SOURCE.`{column}`"
    if kind == "sum":
        return f"CASE WHEN {t} IS NULL THEN {s} WHEN {s} IS NULL THEN {t} ELSE {t} + {s} END"
    if kind == "count":
        return f"{t} + {s}"
    return f"{'least' if kind == 'min' else 'greatest'}({t}, {s})"


def app_id(input_table_id: str) -> str:
    return MV_APP_PREFIX + input_table_id


def appended_files(store: Any, since: int, upto: int) -> Tuple[Optional[Any], str]:
    """The files commits since+1..upto added (a table in FILES_SCHEMA), or None and the version that did
    more than add rows."""
    from deltalog.actions import commit_objects
    from deltalog.file_actions import files_table

    adds: List[dict] = []
    for version in range(since + 1, upto + 1):
        name = "%020d.json" % version
        for _, obj in commit_objects(store.read(name), f"{store.table_uri}/_delta_log/{name}"):
            key, value = next(iter(obj.items()))
            if key == "remove" and value.get("dataChange", True):
                return None, f"version {version} deleted or updated rows"
            if key == "metaData" and version > 0:
                return None, f"version {version} changed the table's schema or properties"
            if key == "add" and value.get("dataChange", True):
                adds.append(value)
    return files_table(adds), ""


def refresh(adapter: Any, relation: Any, sql: str, model: Any, full_refresh: bool) -> Tuple[str, Optional[int]]:
    """Refresh the view's table (see the module's doc); (what was done, the version committed or None)."""
    from dbt.adapters.events.logging import AdapterLogger

    from dbt.adapters.deltalog.warehouse import referenced_relations
    from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    log = AdapterLogger("Deltalog")
    warehouse, spark = adapter.warehouse, adapter.spark
    name = (model or {}).get("unique_id") if isinstance(model, dict) else getattr(model, "unique_id", None)
    name = name or str(relation)
    sql = quote_warehouse_refs(sql, warehouse)
    referenced = referenced_relations(sql)
    located = {ref: warehouse.resolve(*ref) for ref in referenced}  # (its warehouse, schema, name)
    inputs = {ref: wh.table(s, n).snapshot() for ref, (wh, s, n) in located.items() if wh.is_table(s, n)}
    existed = adapter.warehouse_of(relation).is_table(relation.schema, relation.identifier)
    recorded = adapter.table(relation).snapshot().app_transactions if existed else {}
    now = {app_id(s.metadata.id): s.version for s in inputs.values()}
    only_tables = bool(referenced) and len(inputs) == len(referenced)

    if existed and not full_refresh and only_tables and all(recorded.get(a) == v for a, v in now.items()):
        log.info(f"{name}: materialized view up to date: no input committed since its last refresh")
        return "UP TO DATE: no new input commits", None

    plan, why = incremental_plan(sql)
    if full_refresh:
        why = "--full-refresh"
    elif not existed:
        why = "its first build"
    elif not only_tables:
        why = "it reads a view or a relation that is not a table of ours, whose changes cannot be told"
    elif plan is not None and plan.source not in inputs:
        why = f"its input {'.'.join(plan.source)} is not a table of this warehouse"
    elif plan is not None:
        source = inputs[plan.source]
        app = app_id(source.metadata.id)
        last = recorded.get(app)
        if last is None or last < 0 or last > source.version:
            why = f"its table records no version of {'.'.join(plan.source)} it reflects"
        elif state_columns(plan) and _state_version(_state_table(adapter.table(relation)), app) != last:
            why = "the running state of its avg columns is not at the view's version"
        else:
            files, why = appended_files(source.store, last, source.version)
            if files is not None:
                return _incremental(spark, adapter, relation, model, plan, source, app, last, files, name, log)
    log.info(f"{name}: materialized view refreshed by a full recompute: {why}")
    df = adapter._model_dataframe(sql, model)
    # the versions the query read: those its session views were registered at
    read = {ref: RUNTIME.views(spark).table_version(*located[ref]) for ref in inputs}
    adapter.pending_app_transactions(relation).update(
        {app_id(inputs[ref].metadata.id): v for ref, v in read.items() if v is not None})
    version = adapter._replace_table(relation, df, model, "CREATE OR REPLACE TABLE AS SELECT" if existed
                                     else "CREATE TABLE AS SELECT")
    if plan is not None and state_columns(plan) and only_tables and read.get(plan.source) is not None:
        # the running sums and counts of the avg columns, from the same input version
        wh, s, n = located[plan.source]
        source = wh.table(s, n).snapshot(version=read[plan.source])
        _write_state(spark, adapter, relation, plan, source, app_id(source.metadata.id))
    return f"FULL RECOMPUTE ({why})", version


def _state_table(view: Any) -> Any:
    """The table of running sums and counts inside the view's folder, on the view's store."""
    from deltalog.storage import files as fs
    from deltalog.table import DeltaTable

    return DeltaTable(fs.join(view.uri, STATE_DIR), view.store.options)


def _state_version(state: Any, app: str) -> Optional[int]:
    return state.snapshot().app_transactions.get(app) if state.exists() else None


def _write_state(spark: Any, adapter: Any, relation: Any, plan: IncrementalPlan, source: Any, app: str) -> None:
    from deltalog.spark import operations
    from deltalog.spark.reader import snapshot_dataframe

    view = f"deltalog_mv_input{adapter.temp_view_suffix()}"
    snapshot_dataframe(spark, source).createOrReplaceTempView(view)
    operations.write_dataframe(spark.sql(state_sql(plan, view)), _state_table(adapter.table(relation)),
                               mode="overwrite", schema_mode="overwrite", app_transactions={app: source.version})


def _incremental(spark: Any, adapter: Any, relation: Any, model: Any, plan: IncrementalPlan, source: Any, app: str,
                 last: int, files: Any, name: str, log: Any) -> Tuple[str, Optional[int]]:
    load("spark")
    from pyspark.sql import functions as F

    from deltalog.spark import operations
    from deltalog.spark.reader import files_dataframe, snapshot_dataframe

    where = f"versions {last + 1}..{source.version} of {'.'.join(plan.source)}"
    if files.num_rows == 0:
        log.info(f"{name}: materialized view up to date: {where} added no rows")
        return "UP TO DATE: no rows added", None
    view_table = adapter.table(relation)
    state_table = _state_table(view_table)
    new_view = f"deltalog_mv_new{adapter.temp_view_suffix()}"
    files_dataframe(spark, source, files).createOrReplaceTempView(new_view)
    merged = spark.sql(with_source(plan, new_view))
    update = {column: combine(kind, column) for column, kind in plan.aggregates.items() if kind != "avg"}
    on = " AND ".join(f"DBT_INTERNAL_DEST.`{k}` <=> DBT_INTERNAL_SOURCE.`{k}`" for k in plan.keys) or "1 = 1"
    states = state_columns(plan)
    how = "merged into their groups"
    if states:
        # the new rows' sums and counts into the running state, then each touched group's sum / count
        sums = {c for c, _ in states.values()}
        operations.merge(spark, state_table, spark.sql(state_sql(plan, new_view)), on,
                         when_matched_update={c: combine("sum" if c in sums else "count", c)
                                              for pair in states.values() for c in pair},
                         when_not_matched_insert="*", app_transactions={app: source.version})
        state = snapshot_dataframe(spark, state_table.snapshot())
        types = {f.name: f.dataType for f in snapshot_dataframe(spark, view_table.snapshot()).schema.fields}
        averages = state.select(*[F.col(f"`{k}`") for k in plan.keys], *[
            F.when(F.col(f"`{n}`") > 0, F.col(f"`{s}`") / F.col(f"`{n}`")).cast(types[c]).alias(f"__avg_{c}")
            for c, (s, n) in states.items()])
        condition = [merged[f"`{k}`"].eqNullSafe(averages[f"`{k}`"]) for k in plan.keys]
        joined = merged.join(averages, condition, "left") if condition else merged.crossJoin(averages)
        merged = joined.select(*[merged[f"`{c}`"] if c not in states else F.col(f"`__avg_{c}`").alias(c)
                                 for c in merged.columns])
        update.update({c: f"DBT_INTERNAL_SOURCE.`{c}`" for c in states})
        how = "merged into their groups (avg from the running sums and counts)"
    version = operations.merge(spark, view_table, merged, on, when_matched_update=update,
                               when_not_matched_insert="*", app_transactions={app: source.version},
                               extra_commit_info=adapter._commit_info(model))
    log.info(f"{name}: materialized view refreshed incrementally: the rows of {files.num_rows} file(s) added by "
             f"{where}, {how} (by {', '.join(plan.keys) or 'the whole table'})")
    return f"INCREMENTAL ({where})", version
