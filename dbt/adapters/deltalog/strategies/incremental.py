"""One incremental run on an existing table: the model's strategy and on_schema_change checked, its rows
aligned with the table, and exactly one commit by the strategy's module (`STRATEGIES`)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional, Tuple

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import CompilationError

from deltalog.schema_evolution import ON_SCHEMA_CHANGE
from dbt.adapters.deltalog.warehouse import referenced_relations
from dbt.adapters.deltalog.model_config import as_list, config_value, truthy
from dbt.adapters.deltalog.runtime.session import RUNTIME
from dbt.adapters.deltalog.sql_gateway import quote_warehouse_refs
from dbt.adapters.deltalog.strategies import STRATEGIES, IncrementalWrite

INCREMENTAL_STRATEGIES = list(STRATEGIES)
logger = AdapterLogger("deltalog")


def is_builtin(strategy: Optional[str]) -> bool:
    return (strategy or "merge").lower() in INCREMENTAL_STRATEGIES


# The packages whose macros are dbt's and the adapters' own; a strategy macro from any other is the project's.
_OWN_PACKAGES = ("dbt", "dbt_spark", "dbt_deltalog")


def overriding_macro(context: Any, strategy: Optional[str]) -> str:
    """The name of a project macro that overrides a built-in strategy's SQL, as dbt lets a project do:
    `get_incremental_<strategy>_sql` itself, or the adapter's dispatch of it (`deltalog__`, `spark__`,
    `default__`); "" when there is none. The incremental materialization then runs that macro's SQL as
    a custom strategy (one commit), instead of the built-in strategy's module."""
    if not is_builtin(strategy):
        return ""
    name = f"get_incremental_{(strategy or 'merge').lower().replace('+', '_')}_sql"
    for candidate in (name, f"deltalog__{name}", f"spark__{name}", f"default__{name}"):
        macro = getattr(context.get(candidate) if hasattr(context, "get") else None, "macro", None)
        if macro is not None and getattr(macro, "package_name", None) not in _OWN_PACKAGES:
            return candidate
    return ""


def validate(strategy: Optional[str], model: Any, custom_macro: bool) -> Tuple[str, str]:
    """The model's strategy and on_schema_change, checked on every run (the first build too).
    `custom_macro`: the project defines `get_incremental_<strategy>_sql` (a custom strategy)."""
    config = config_value(model, "config") or {}
    strategy = (strategy or "merge").lower()
    if strategy not in INCREMENTAL_STRATEGIES and not custom_macro:
        macro = f"get_incremental_{strategy.replace('+', '_')}_sql"
        raise CompilationError(
            f"Invalid incremental strategy {strategy!r} for model {config_value(model, 'unique_id')}: "
            f"expected one of {', '.join(INCREMENTAL_STRATEGIES)}, or a custom strategy of the project "
            f"(a macro named {macro}, which the project does not define)"
        )
    on_schema_change = (config_value(config, "on_schema_change") or "ignore").lower()
    if on_schema_change not in ON_SCHEMA_CHANGE:
        raise CompilationError(
            f"Invalid on_schema_change {on_schema_change!r} for model {config_value(model, 'unique_id')}: "
            f"expected one of {', '.join(ON_SCHEMA_CHANGE)}"
        )
    return strategy, on_schema_change


def write_incremental(adapter: Any, relation: Any, sql: str, strategy: str, model: Any) -> Optional[int]:
    """The strategy's one commit (None: nothing to commit), holding the schema change too when
    on_schema_change asks for one (a failed run changes nothing)."""
    config = config_value(model, "config") or {}
    strategy, on_schema_change = validate(strategy, model, False)
    with definition_applied(adapter, relation, model):
        return _write(adapter, relation, sql, strategy, on_schema_change, model, config)


@contextlib.contextmanager
def definition_applied(adapter: Any, relation: Any, model: Any) -> Iterator[None]:
    """The model's definition (properties, constraints, comments, clustering) committed to the table
    before its write, which reads the table after it and whose rows are checked against it; undone
    when the write fails, so a failed run leaves the table's definition as it was, with its rows."""
    from deltalog.spark.dml.alter import undo_alter

    altered = adapter._alter_to_definition(relation, model)
    try:
        yield
    except BaseException:
        if altered is not None:
            try:
                undo_alter(adapter.table(relation), altered, extra_commit_info=adapter._commit_info(model))
            except Exception as exc:  # noqa: BLE001 - the write's own error is the one to raise
                logger.warning(f"{relation}: the write failed, and its definition's commit (version {altered}) "
                               f"could not be undone: {exc}. The table's rows are as they were.")
        raise


def _write(adapter: Any, relation: Any, sql: str, strategy: str, on_schema_change: str, model: Any,
           config: Any) -> Optional[int]:
    warn_declarations_not_applied(adapter, relation, model)
    df = adapter._model_dataframe(sql, model)
    read_version = version_read(adapter, relation, sql)
    unique_key = as_list(config_value(config, "unique_key"))
    evolve = strategy == "merge" and bool(unique_key) and truthy(config_value(config, "merge_with_schema_evolution"))
    table_schema = None
    if not evolve:  # with schema evolution the merge itself grows the table
        df, table_schema = adapter._apply_schema_change(relation, df, on_schema_change, model)
    check_unique_key(model, df)
    write = IncrementalWrite(
        spark=adapter.spark, table=adapter.table(relation), name=config_value(model, "unique_id") or str(relation),
        model=model, config=config, df=df, unique_key=unique_key,
        predicates=as_list(config_value(config, "incremental_predicates") or config_value(config, "predicates")),
        evolve=evolve,
        commit=dict(extra_commit_info=adapter._commit_info(model), table_schema=table_schema,
                    # what changes_since_last_run read, recorded with the data
                    app_transactions=adapter.take_app_transactions(relation), read_version=read_version))
    return STRATEGIES[strategy](write)


def missing_unique_key(model: Any, df: Any) -> List[str]:
    """The model's unique_key columns that its result (a DataFrame) lacks."""
    unique_key = as_list(config_value(config_value(model, "config") or {}, "unique_key"))
    return [k for k in unique_key if k.lower() not in {c.lower() for c in df.columns}]


def check_unique_key(model: Any, df: Any) -> None:
    missing = missing_unique_key(model, df)
    if missing:
        raise CompilationError(
            f"Model {config_value(model, 'unique_id')}: unique_key column(s) {missing} are not columns of the "
            f"model's result ({', '.join(df.columns)}). Nothing was written."
        )


def version_read(adapter: Any, relation: Any, code: str) -> Optional[int]:
    """The version of `relation` the model's code reads, when it reads its own table (`{{ this }}`), else
    None. The commit is then made against that version: a commit landed since the model read it is a
    conflict (named, and nothing is written), never overwritten by rows computed before it."""
    warehouse = adapter.warehouse
    target = ((relation.database or "").lower(), relation.schema.lower(), relation.identifier.lower())
    refs = [warehouse.resolve(*ref) for ref in referenced_relations(quote_warehouse_refs(code, warehouse))]
    if target not in {((w.name or "").lower(), s.lower(), n.lower()) for w, s, n in refs}:
        return None
    return RUNTIME.views(adapter.spark).table_version(adapter.warehouse_of(relation), relation.schema,
                                                      relation.identifier)


def warn_declarations_not_applied(adapter: Any, relation: Any, model: Any) -> None:
    """An identity, generated or default column the model declares and the table does not (or otherwise):
    said once per run; the table's declarations hold until --full-refresh rebuilds it."""
    from dbt.adapters.events.logging import AdapterLogger

    from dbt.adapters.deltalog.declared_columns import declarations_not_in_table, declared_columns

    declared = declared_columns(model)
    if not declared:
        return
    for column, wanted, has in declarations_not_in_table(declared, adapter._snapshot(relation).schema_json):
        AdapterLogger("Deltalog").warning(
            f"Model {config_value(model, 'unique_id')}: column '{column}' is declared as {wanted}, but table "
            f"{relation} has {has}. An incremental run keeps the table's declarations; `dbt run --full-refresh "
            f"--select {config_value(model, 'name')}` rebuilds it with the model's (identity values start again).")
