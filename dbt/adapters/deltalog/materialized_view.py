"""Materialized views: `materialized='materialized_view'`, a table refreshed by each `dbt run`.

A refresh is one of three, and the log says which and why:
- **nothing**: every input table of ours is at the version the view records (`txn`, appId per input
  table, version = the input version it reflects): no commit.
- **incremental**: the query is a grouped aggregate (`select k1, k2, sum(x) as s, count(*) as n, min(..),
  max(..), avg(..) from <one table of ours> [where ...] group by k1, k2`) and the input's commits since the
  recorded version only added rows, or the input has the change data feed on. Rows added only: the query
  runs over just the rows those commits added, and the result is merged into the view by the group keys
  (null-safe): sums and counts add up, min and max take the smaller and larger. An `avg` keeps its
  running sum and count per group in a state table beside the view (`<view>/_dbt_mv_state`, a folder
  Delta readers and VACUUM leave alone): the new rows' sums and counts are merged into it first, then the
  view takes sum / count of the groups they touched.
  Change data feed on (`delta.enableChangeDataFeed`): the feed of those commits is read, inserts and
  update post-images counting +1, deletes and update pre-images -1 (`_fold_changes`). The state table then
  keeps, per group, its row count and the running sum and count of non-null values of every sum, count and
  avg column, so that rows going out are taken back out: a group whose row count reaches 0 is deleted
  from the view, a sum over no non-null value is NULL. A min or max cannot be taken back: a group where a
  value that left is not above its min (not below its max) is recomputed from the input at the version
  the refresh reflects, only those groups. Each of the two commits (state, then view) records the input's
  new version; a state table that is not at the view's version (a refresh that stopped between them) or
  not of the layout the refresh needs makes the next refresh a full recompute.
- **full**: anything else (joins, several inputs, HAVING, DISTINCT, windows, count(distinct), an input
  that deleted or updated rows without a change data feed, a schema change of the input, a first build,
  --full-refresh): the query recomputed in one overwrite commit recording every input's version.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from deltalog.lazy_imports import load

MV_APP_PREFIX = "dbt-deltalog materialized view input "
STATE_DIR = "_dbt_mv_state"  # the running sums and counts of avg columns (and more, with a change feed)
AGGREGATES = ("sum", "count", "min", "max", "avg")
ROWS = "__dbt_mv_rows"  # state: the rows of each group, when the input's deletes and updates are folded in
SIGN = "__dbt_mv_sign"  # a changed row: +1 coming in (insert, update_postimage), -1 going out
GONE = "__dbt_mv_gone"  # a group whose last row went out


class FullRecompute(Exception):
    """An incremental refresh found it cannot go on (nothing committed yet): recompute, saying why."""


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


def state_measures(plan: IncrementalPlan, retract: bool = False) -> Dict[str, Tuple[str, Optional[str]]]:
    """{state column: (sum | count, the SQL it sums or counts; None: every row)}. An avg column keeps
    `<c>__sum` and `<c>__count` (of its non-null values). When the input's deletes and updates are folded
    in (`retract`), so does a sum column (its count tells a sum over no value, NULL, from a sum of 0), a
    count column keeps `<c>__count`, and ROWS counts each group's rows: a group at 0 rows is gone."""
    load("sqlglot")
    from sqlglot import expressions as exp

    out: Dict[str, Tuple[str, Optional[str]]] = {ROWS: ("count", None)} if retract else {}
    for projection in plan.tree.expressions:
        name = projection.alias_or_name
        kind = plan.aggregates.get(name)
        if kind is None:
            continue
        arg = projection.this.this
        sql = None if isinstance(arg, exp.Star) else arg.sql("spark")
        if kind == "avg" or (retract and kind == "sum"):
            out[f"{name}__sum"], out[f"{name}__count"] = ("sum", sql), ("count", sql)
        elif retract and kind == "count":
            out[f"{name}__count"] = ("count", sql)
    return out


def state_sql(plan: IncrementalPlan, view: str, retract: bool = False, signed: bool = False) -> str:
    """The state columns (`state_measures`), by group, of the rows of `view`. `signed`: the rows carry
    SIGN, and each adds (+1) or takes back (-1) its value: the change of each state column."""
    load("sqlglot")
    import sqlglot

    tree = _reading(plan, view)
    projections = [p for p in tree.expressions if p.alias_or_name in plan.keys]
    s = quote(SIGN)
    for column, (measure, arg) in state_measures(plan, retract).items():
        if not signed:
            agg = f"sum({arg})" if measure == "sum" else f"count({arg or '*'})"
        elif measure == "sum":  # two sums of the column's own type, as a full recompute sums it
            agg = (f"coalesce(sum(CASE WHEN {s} > 0 THEN ({arg}) END), 0) - "
                   f"coalesce(sum(CASE WHEN {s} < 0 THEN ({arg}) END), 0)")
        else:
            agg = f"coalesce(sum({s}), 0)" if arg is None else \
                f"coalesce(sum(CASE WHEN ({arg}) IS NOT NULL THEN {s} ELSE 0 END), 0)"
        projections.append(sqlglot.parse_one(f"{agg} AS {quote(column)}", read="spark"))
    tree.set("expressions", projections)
    return tree.sql("spark")


def quote(name: str) -> str:
    from deltalog.sql_text import quote_identifier

    return quote_identifier(name)


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


def input_commits(store: Any, since: int, upto: int) -> Tuple[Optional[Any], Optional[int], str]:
    """What commits since+1..upto did to the rows: (the files they added, a table in FILES_SCHEMA; the
    first version that deleted or updated rows, or None; ""), or (None, None, why) when a commit changed
    the table's schema or properties."""
    from deltalog.actions import commit_objects
    from deltalog.file_actions import files_table

    adds: List[dict] = []
    changed: Optional[int] = None
    for version in range(since + 1, upto + 1):
        name = "%020d.json" % version
        for _, obj in commit_objects(store.read(name), f"{store.table_uri}/_delta_log/{name}"):
            key, value = next(iter(obj.items()))
            if key == "remove" and value.get("dataChange", True) and changed is None:
                changed = version
            if key == "metaData" and version > 0:
                return None, None, f"version {version} changed the table's schema or properties"
            if key == "add" and value.get("dataChange", True):
                adds.append(value)
    return files_table(adds), changed, ""


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
        feed = _feed_on(source)
        measures = state_measures(plan, retract=feed)
        stale = last is None or last < 0 or last > source.version
        files, changed, commits_why = (None, None, "") if stale else input_commits(source.store, last, source.version)
        if stale:
            why = f"its table records no version of {'.'.join(plan.source)} it reflects"
        elif files is None:
            why = commits_why
        elif measures and not _state_ready(_state_table(adapter.table(relation)), app, last, plan, measures):
            why = ("the running state of its groups is not at the view's version or not of the layout "
                   f"{'the change data feed of its input needs' if feed else 'its avg columns need'}")
        elif feed:
            try:
                return _fold_changes(spark, adapter, relation, model, plan, source, app, last, name, log)
            except FullRecompute as exc:
                why = str(exc)
        elif changed is None:
            return _incremental(spark, adapter, relation, model, plan, source, app, last, files, name, log)
        else:
            why = (f"version {changed} deleted or updated rows and {'.'.join(plan.source)} has no change data "
                   f"feed (delta.enableChangeDataFeed; model config change_data_feed: true) to tell which")
    log.info(f"{name}: materialized view refreshed by a full recompute: {why}")
    df = adapter._model_dataframe(sql, model)
    # the versions the query read: those its session views were registered at
    read = {ref: RUNTIME.views(spark).table_version(*located[ref]) for ref in inputs}
    adapter.pending_app_transactions(relation).update(
        {app_id(inputs[ref].metadata.id): v for ref, v in read.items() if v is not None})
    version = adapter._replace_table(relation, df, model, "CREATE OR REPLACE TABLE AS SELECT" if existed
                                     else "CREATE TABLE AS SELECT")
    if plan is not None and only_tables and read.get(plan.source) is not None:
        # the running state of its groups, from the same input version: the sums and counts of avg
        # columns; with the input's change data feed on, also each group's rows, sums and counts
        wh, s, n = located[plan.source]
        source = wh.table(s, n).snapshot(version=read[plan.source])
        if state_measures(plan, retract=_feed_on(source)):
            _write_state(spark, adapter, relation, plan, source, app_id(source.metadata.id), _feed_on(source))
    return f"FULL RECOMPUTE ({why})", version


def _feed_on(snapshot: Any) -> bool:
    from deltalog.change_data import is_enabled

    return is_enabled(snapshot.configuration)


def _state_ready(state: Any, app: str, last: int, plan: IncrementalPlan, measures: Dict[str, Any]) -> bool:
    """Whether the state table is at the view's input version `last` and has the columns `measures`."""
    if not state.exists():
        return False
    snapshot = state.snapshot()
    columns = [f["name"] for f in snapshot.schema_json["fields"]]
    return snapshot.app_transactions.get(app) == last and sorted(columns) == sorted([*plan.keys, *measures])


def _state_table(view: Any) -> Any:
    """The table of running sums and counts inside the view's folder, on the view's store."""
    from deltalog.storage import files as fs
    from deltalog.table import DeltaTable

    return DeltaTable(fs.join(view.uri, STATE_DIR), view.store.options)


def _write_state(spark: Any, adapter: Any, relation: Any, plan: IncrementalPlan, source: Any, app: str,
                 retract: bool = False) -> None:
    from deltalog.spark import operations
    from deltalog.spark.reader import snapshot_dataframe

    view = f"deltalog_mv_input{adapter.temp_view_suffix()}"
    snapshot_dataframe(spark, source).createOrReplaceTempView(view)
    operations.write_dataframe(spark.sql(state_sql(plan, view, retract)), _state_table(adapter.table(relation)),
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


RECOMPUTE = "__dbt_mv_recompute"  # a group whose min or max lost a value it may have been


def _on(plan: IncrementalPlan, a: str, b: str) -> str:
    """Rows of `a` and `b` of the same group (null-safe)."""
    return " AND ".join(f"{a}.{quote(k)} <=> {b}.{quote(k)}" for k in plan.keys) or "1 = 1"


def extremes_sql(plan: IncrementalPlan, view: str, column: str) -> str:
    """For the min or max column `column`: by group and value of its argument, how many rows of `view`
    (which carry SIGN) came in net (`__net` > 0) or went out (< 0): an update that kept the value is 0."""
    load("sqlglot")
    import sqlglot
    from sqlglot import expressions as exp

    tree = _reading(plan, view)
    arg = next(p for p in tree.expressions if p.alias_or_name == column).this.this
    keys = [p for p in tree.expressions if p.alias_or_name in plan.keys]
    tree.set("expressions", [*keys, exp.alias_(arg.copy(), "__v", quoted=True),
                             sqlglot.parse_one(f"sum({quote(SIGN)}) AS `__net`", read="spark")])
    group = tree.args.get("group")
    if group is not None:
        group.set("expressions", [*group.expressions, arg.copy()])
    else:
        tree.set("group", exp.Group(expressions=[arg.copy()]))
    return tree.sql("spark")


def touched_sql(plan: IncrementalPlan, measures: Dict[str, Tuple[str, Optional[str]]], delta: str, state: str,
                view: str, extremes: Dict[str, str]) -> str:
    """Every group the changes touched (`delta`: the change of each state column, by group): its new state
    (`state` holds the old), its view columns, GONE (no row left, when the query groups) and RECOMPUTE (a
    value that went out may have been its min or max: `view` holds the old ones, `extremes[c]` the
    smallest / largest value that came in (`<c>__in`) and went out (`<c>__out`) of each min/max column)."""
    q = quote
    inner = [f"d.{q(k)} AS {q(k)}" for k in plan.keys]
    for column, (measure, _) in measures.items():
        old, new = f"s.{q(column)}", f"d.{q(column)}"
        value = (f"CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} ELSE {old} + {new} END"
                 if measure == "sum" else f"coalesce({old}, 0) + coalesce({new}, 0)")
        inner.append(f"{value} AS {q(column)}")
    joins = [f"LEFT JOIN {state} s ON {_on(plan, 'd', 's')}"]
    if extremes:  # the view's own rows only for its min and max
        joins.append(f"LEFT JOIN {view} v ON {_on(plan, 'd', 'v')}")
    for i, (column, table) in enumerate(extremes.items()):
        pick = "least" if plan.aggregates[column] == "min" else "greatest"
        inner += [f"{pick}(v.{q(column)}, m{i}.{q(column + '__in')}) AS {q(column)}",
                  f"m{i}.{q(column + '__out')} AS {q(column + '__out')}"]
        joins.append(f"LEFT JOIN {table} m{i} ON {_on(plan, 'd', f'm{i}')}")
    outer = [q(k) for k in plan.keys]
    for column, kind in plan.aggregates.items():
        total, count = q(f"{column}__sum"), q(f"{column}__count")
        outer.append({"sum": f"CASE WHEN {count} > 0 THEN {total} END AS {q(column)}",
                      "count": f"{count} AS {q(column)}",
                      "avg": f"CASE WHEN {count} > 0 THEN {total} / {count} END AS {q(column)}"}.get(kind, q(column)))
    outer += [q(c) for c in measures]
    gone = f"{q(ROWS)} <= 0" if plan.keys else "false"
    lost = [f"({q(c + '__out')} IS NOT NULL AND ({q(c)} IS NULL OR {q(c + '__out')} "
            f"{'<=' if plan.aggregates[c] == 'min' else '>='} {q(c)}))" for c in extremes]
    outer += [f"{gone} AS {q(GONE)}", f"NOT ({gone}) AND ({' OR '.join(lost) or 'false'}) AS {q(RECOMPUTE)}"]
    return (f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM {delta} d {' '.join(joins)}) t")


def _fold_changes(spark: Any, adapter: Any, relation: Any, model: Any, plan: IncrementalPlan, source: Any,
                  app: str, last: int, name: str, log: Any) -> Tuple[str, Optional[int]]:
    """Fold the input's change data feed of versions last+1..source.version into the state table and the
    view (the module's doc). FullRecompute, before anything is committed, when the feed cannot be read."""
    load("spark")
    from pyspark.sql import functions as F

    from deltalog.change_data import (CHANGE_TYPE_COLUMN, COMMIT_TIMESTAMP_COLUMN, COMMIT_VERSION_COLUMN, DELETE,
                                      INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE, commit_changes)
    from deltalog.errors import DeltaError
    from deltalog.spark import operations
    from deltalog.spark.change_data import changes_dataframe
    from deltalog.spark.reader import snapshot_dataframe

    where = f"versions {last + 1}..{source.version} of {'.'.join(plan.source)}"
    try:
        _, commits = commit_changes(source.store, last + 1, source.version)
        if not any(c.cdc.num_rows or c.inserted.num_rows or c.deleted.num_rows for c in commits):
            log.info(f"{name}: materialized view up to date: {where} changed no rows")
            return "UP TO DATE: no rows changed", None
        changes = changes_dataframe(spark, source.store, last + 1, source.version)
    except DeltaError as exc:
        raise FullRecompute(f"the change data feed of {where} cannot be read: {exc}") from None
    suffix = adapter.temp_view_suffix()
    views = {w: f"deltalog_mv_{w}{suffix}" for w in ("changes", "delta", "state", "view", "input", "touched",
                                                         "redo", "recomputed")}
    coming = F.col(CHANGE_TYPE_COLUMN).isin(INSERT, UPDATE_POSTIMAGE)
    changes.where(F.col(CHANGE_TYPE_COLUMN).isin(INSERT, UPDATE_POSTIMAGE, DELETE, UPDATE_PREIMAGE)) \
        .withColumn(SIGN, F.when(coming, F.lit(1)).otherwise(F.lit(-1)).cast("long")) \
        .drop(CHANGE_TYPE_COLUMN, COMMIT_VERSION_COLUMN, COMMIT_TIMESTAMP_COLUMN) \
        .createOrReplaceTempView(views["changes"])
    measures = state_measures(plan, retract=True)
    spark.sql(state_sql(plan, views["changes"], retract=True, signed=True)).createOrReplaceTempView(views["delta"])
    view_table, state_table = adapter.table(relation), _state_table(adapter.table(relation))
    view_snapshot, state_snapshot = view_table.snapshot(), state_table.snapshot()
    snapshot_dataframe(spark, view_snapshot).createOrReplaceTempView(views["view"])
    snapshot_dataframe(spark, state_snapshot).createOrReplaceTempView(views["state"])
    extremes = {}
    for i, (column, kind) in enumerate((c, k) for c, k in plan.aggregates.items() if k in ("min", "max")):
        pick = F.min if kind == "min" else F.max
        net = spark.sql(extremes_sql(plan, views["changes"], column))
        extremes[column] = f"deltalog_mv_extreme{i}{suffix}"
        net.groupBy(*[F.col(quote(k)) for k in plan.keys]).agg(
            pick(F.when(F.col("__net") > 0, F.col("__v"))).alias(f"{column}__in"),
            pick(F.when(F.col("__net") < 0, F.col("__v"))).alias(f"{column}__out"),
        ).createOrReplaceTempView(extremes[column])
    touched = spark.sql(touched_sql(plan, measures, views["delta"], views["state"], views["view"], extremes))
    groups, gone, redo = touched.agg(F.count(F.lit(1)), F.sum(F.col(GONE).cast("long")),
                                     F.sum(F.col(RECOMPUTE).cast("long"))).first()
    gone, redo = gone or 0, redo or 0
    rows = touched
    if redo:
        # the groups whose min or max may have gone: the query over their rows of the input, at the
        # version this refresh reflects
        snapshot_dataframe(spark, source).createOrReplaceTempView(views["input"])
        touched.createOrReplaceTempView(views["touched"])
        spark.sql(f"SELECT i.* FROM {views['input']} i LEFT SEMI JOIN {views['touched']} r "
                  f"ON r.{quote(RECOMPUTE)} AND {_on(plan, 'i', 'r')}").createOrReplaceTempView(views["redo"])
        spark.sql(with_source(plan, views["redo"])).createOrReplaceTempView(views["recomputed"])
        picked = [f"CASE WHEN t.{quote(RECOMPUTE)} THEN r.{quote(c)} ELSE t.{quote(c)} END AS {quote(c)}"
                  if c in extremes else f"t.{quote(c)}" for c in touched.columns]
        rows = spark.sql(f"SELECT {', '.join(picked)} FROM {views['touched']} t "
                         f"LEFT JOIN {views['recomputed']} r ON {_on(plan, 't', 'r')}")
    src, dst = "DBT_INTERNAL_SOURCE", "DBT_INTERNAL_DEST"
    on = " AND ".join(f"{dst}.{quote(k)} <=> {src}.{quote(k)}" for k in plan.keys) or "1 = 1"
    clauses = dict(when_matched_delete_condition=f"{src}.{quote(GONE)}",
                   when_not_matched_condition=f"NOT {src}.{quote(GONE)}", app_transactions={app: source.version})
    state_cols = [*plan.keys, *measures]
    operations.merge(spark, state_table, rows.select(*[quote(c) for c in [*state_cols, GONE]]), on,
                     when_matched_update={c: f"{src}.{quote(c)}" for c in measures},
                     when_not_matched_insert={c: f"{src}.{quote(c)}" for c in state_cols},
                     read_version=state_snapshot.version, **clauses)
    view_columns = [*plan.keys, *plan.aggregates]
    version = operations.merge(spark, view_table, rows.select(*[quote(c) for c in [*view_columns, GONE]]), on,
                               when_matched_update={c: f"{src}.{quote(c)}" for c in plan.aggregates},
                               when_not_matched_insert={c: f"{src}.{quote(c)}" for c in view_columns},
                               # the min and max columns came from the view's own rows at that version
                               read_version=view_snapshot.version if extremes else None,
                               extra_commit_info=adapter._commit_info(model), **clauses)
    log.info(f"{name}: materialized view refreshed incrementally: the change data feed of {where} (inserts and "
             f"update post-images in, deletes and update pre-images out) folded into the running state of its "
             f"groups: {groups} group(s) changed, {gone} gone, {redo} recomputed from the input because a row "
             f"that went out may have held their min or max (by {', '.join(plan.keys) or 'the whole table'})")
    return f"INCREMENTAL ({where}, change data feed)", version
