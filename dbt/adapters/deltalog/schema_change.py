"""on_schema_change for incremental models and streaming tables, on the engine's rule set
(`deltalog.schema_evolution.schema_change`): the new rows aligned with the table's schema after the
write, which goes into the data commit itself. Also the columns dbt adds by name (snapshots, `alter
table ... add columns`)."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from dbt_common.exceptions import CompilationError

from deltalog.lazy_imports import load
from dbt.adapters.deltalog.declared_columns import filled_in_columns
from dbt.adapters.deltalog.model_config import config_value as _get, quote_name as _q
from dbt.adapters.deltalog.runtime.session import RUNTIME


def apply_schema_change(adapter: Any, relation: Any, df: Any, on_schema_change: str,
                        model: Any) -> Tuple[Any, Optional[Dict[str, Any]]]:
    """(the rows aligned with the table, the table's new schema JSON or None). No data file is
    rewritten; a run that fails commits nothing."""
    load("spark")
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from deltalog.errors import SchemaMismatchError
    from deltalog.schema_evolution import schema_change
    from deltalog.spark.writer import cast_by_name

    current = adapter._snapshot(relation).schema_json
    incoming = df.schema.jsonValue()
    # columns the writer fills in (identity, generated, default) that the model leaves out: not dropped
    given = {f.name.lower() for f in df.schema.fields}
    left_out = {c.lower() for c in filled_in_columns(current)} - given
    incoming = {**incoming, "fields": incoming["fields"] + [f for f in current["fields"]
                                                            if f["name"].lower() in left_out]}
    try:
        change = schema_change(f"Model {_get(model, 'unique_id')} (table {relation})", current,
                               incoming, on_schema_change)
    except SchemaMismatchError as exc:
        text = str(exc)
        if "full refresh" in text:
            text += " (`dbt run --full-refresh --select <model>` rebuilds it.)"
        raise CompilationError(text) from None
    source = {f.name.lower(): f for f in df.schema.fields}
    columns = []
    for f in StructType.fromJson(change.schema).fields:
        if f.name.lower() in left_out:
            continue  # the writer fills it in
        s = source.get(f.name.lower())
        # struct fields by name: a model that spells a struct's fields in another order keeps its values
        value = cast_by_name(F.col(_q(s.name)), s.dataType, f.dataType) if s is not None else \
            F.lit(None).cast(f.dataType)
        columns.append(value.alias(f.name))
    return df.select(*columns), (change.schema if change.changed else None)


def add_columns(adapter: Any, relation: Any, columns: List[Any], model: Any) -> None:
    """New columns (snapshot's dbt_is_deleted, alter ... add columns) as a metadata commit."""
    load("spark")
    from pyspark.sql.types import StructType

    if not columns:
        return
    target = StructType.fromJson(adapter._snapshot(relation).schema_json)
    added = new_fields(target, columns)
    if added:
        _commit_schema(adapter, relation, StructType(list(target.fields) + added), model)
        RUNTIME.views(adapter.spark).ensure(adapter.warehouse_of(relation), relation.schema, relation.identifier)


def new_fields(target: Any, columns: List[Any]) -> List[Any]:
    """dbt column objects (or dicts) that `target` (a StructType) lacks, as nullable fields."""
    load("spark")
    from pyspark.sql.types import StructField, _parse_datatype_string

    have = {f.name.lower() for f in target.fields}
    return [
        StructField(_get(c, "name") or _get(c, "column"),
                    _parse_datatype_string(_get(c, "data_type") or _get(c, "dtype")), True)
        for c in columns
        if (_get(c, "name") or _get(c, "column")).lower() not in have
    ]


def _commit_schema(adapter: Any, relation: Any, schema: Any, model: Any) -> Optional[int]:
    import dataclasses


    txn = adapter.table(relation).transaction()
    txn.read_whole_table()
    metadata = dataclasses.replace(txn.snapshot.metadata, schema_string=json.dumps(schema.jsonValue()))
    txn.update_metadata(metadata)
    params: Dict[str, Any] = {"columns": json.dumps([f.name for f in schema.fields])}
    return txn.commit(operation="ADD COLUMNS", parameters=params, extra_commit_info=adapter._commit_info(model))
