"""`dbt docs generate`: every table and view of the asked schemas with its columns, persist_docs
comments and, for a table, statistics from its Delta log (rows, bytes, files, version)."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set

from dbt.adapters.contracts.relation import RelationType
from dbt.adapters.events.logging import AdapterLogger

from deltalog.lazy_imports import load
from dbt.adapters.deltalog.column import column_of
from dbt.adapters.deltalog.model_config import config_value as _get

logger = AdapterLogger("Deltalog")


def catalog_table(adapter: Any, information_schema: Any, schemas: Set[str]):
    """The catalog rows of `schemas` in the information schema's database, as an agate table."""
    import agate
    from dbt_common.clients.agate_helper import DEFAULT_TYPE_TESTER

    from dbt.adapters.deltalog.warehouse import Entry

    rows: List[Dict[str, Any]] = []
    database = information_schema.database or None
    warehouse = adapter.warehouse.of(database)
    for schema in schemas:
        entries = warehouse.list_relations(schema) if warehouse.schema_exists(schema) else []
        listed = {e.name for e in entries}
        # sources whose tables live elsewhere (a declared location, or found in the metastore)
        entries += [Entry("table", s, n, path) for s, n, path in warehouse.external_tables()
                    if s == schema and n not in listed and warehouse.is_table(s, n)]
        for entry in entries:
            relation = adapter.Relation.create(
                database=database,
                schema=entry.schema,
                identifier=entry.name,
                type=RelationType.Table if entry.kind == "table" else RelationType.View,
            )
            rows += _relation_rows(adapter, warehouse, relation, entry.kind)
    return agate.Table.from_object(rows, column_types=DEFAULT_TYPE_TESTER)


def _relation_rows(adapter: Any, warehouse: Any, relation: Any, kind: str) -> List[Dict[str, Any]]:
    if kind == "table":
        load("spark")
        from pyspark.sql.types import StructType

        snap = adapter._snapshot(relation)
        # persist_docs: the description and column comments Delta readers see
        fields = [(f.name, f.dataType.simpleString(), (f.metadata or {}).get("comment"))
                  for f in StructType.fromJson(snap.schema_json).fields]
        stats = table_stats(snap)
        table_comment = snap.metadata.description
    else:
        docs = warehouse.read_view_docs(relation.schema, relation.identifier)
        comments = {k.lower(): v for k, v in (docs.get("columns") or {}).items()}
        fields = [(c.name, c.dtype, comments.get(c.name.lower()))
                  for c in adapter.get_columns_in_relation(relation)]
        stats = None
        table_comment = docs.get("description")
    rows = []
    for i, (name, dtype, comment) in enumerate(fields):
        col = column_of(relation, i, name, dtype, stats).to_column_dict()
        col["column_name"] = col.pop("column", None)
        col["column_type"] = col.pop("dtype")
        col["column_comment"] = comment
        col["table_comment"] = table_comment
        col["table_database"] = relation.database or None
        col["table_type"] = "table" if kind == "table" else "view"
        rows.append(col)
    return rows


def warn_missing_doc_columns(model: Any, comments: Dict[str, str], columns: List[str]) -> None:
    """persist_docs of columns the relation does not have: warned about (as dbt-core's adapters do),
    never fatal."""
    have = {c.lower() for c in columns}
    missing = [c for c in comments if c.lower() not in have]
    if missing:
        logger.warning(f"In {_get(model, 'unique_id')}: The following columns are specified in the schema but "
                       f"are not present in the database: {', '.join(missing)}")


def iceberg_version(snap) -> Optional[int]:
    if not snap.table_configuration.writes_iceberg:
        return None
    try:
        from deltalog.iceberg import converted_version

        return converted_version(snap.table_uri, snap.store)
    except Exception:
        return None


def table_stats(snap) -> Dict[str, Any]:
    rows = 0
    try:
        dvs = snap.files.column("deletion_vector").to_pylist()
        for s, dv in zip(snap.files.column("stats").to_pylist(), dvs):
            if s:  # numRecords counts a file's rows, deleted ones too
                rows += int(json.loads(s).get("numRecords", 0)) - int((dv or {}).get("cardinality") or 0)
    except Exception:
        rows = None
    stats: Dict[str, Any] = {}
    for key, label, value, description in (
        ("rows", "Rows", rows, "Rows in the live files (from the log's file statistics)"),
        ("bytes", "Bytes", snap.size_bytes, "Bytes of the live data files"),
        ("files", "Files", snap.num_files, "Live data files"),
        ("version", "Version", snap.version, "Latest version of the Delta log"),
        ("iceberg_version", "Iceberg at Delta version", iceberg_version(snap),
         "The Delta version the newest Iceberg metadata reflects (table_format: iceberg)"),
    ):
        if value is None:
            continue
        stats[f"stats:{key}:label"] = label
        stats[f"stats:{key}:value"] = value
        stats[f"stats:{key}:description"] = description
        stats[f"stats:{key}:include"] = True
    return stats
