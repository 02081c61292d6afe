"""A new seed table written by the engine's Arrow writer, without Spark: a `dbt build` then loads its seeds
while the JVM is still starting. Only where the result is the one Spark's load gives: a table that does
not exist yet, columns whose types dbt inferred (no `column_types`: Spark's casts of free text have rules
of their own), values whose Spark cast is exact, and configs this writer commits as Spark's path does.
Anything else, and any doubt, goes to Spark (`refusal` says why)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, List, Optional

import pyarrow as pa

from dbt.adapters.deltalog import spark_settings


# delta.* properties a new table commits the same through either writer (protocol and metadata only)
_PLAIN_PROPERTIES = frozenset({
    "delta.checkpointInterval", "delta.isolationLevel", "delta.enableDeletionVectors",
    "delta.enableChangeDataFeed", "delta.appendOnly", "delta.logRetentionDuration",
    "delta.deletedFileRetentionDuration", "delta.enableRowTracking", "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct", "delta.dataSkippingNumIndexedCols",
})
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_UTC = dt.timezone.utc


class NotHere(Exception):
    """The seed goes to Spark; the message says why."""


def refusal(adapter: Any, relation: Any, model: Any, cfg: Any, definition: Any, names: List[str],
            types: List[str], column_types: dict) -> Optional[str]:
    """Why this seed load is Spark's (None: the Arrow writer gives the same table). `cfg`, `definition`:
    the seed's DeltaConfig and table definition."""
    from deltalog.column_mapping import names_needing_mapping

    creds = adapter.config.credentials
    if not creds.switched_on(spark_settings.ARROW_SEEDS):
        return f"{spark_settings.ARROW_SEEDS}: false"
    warehouse = adapter.warehouse_of(relation)
    if column_types:
        return "column_types (Spark casts the CSV's text)"
    if warehouse.is_table(relation.schema, relation.identifier) or warehouse.is_view(relation.schema,
                                                                                     relation.identifier):
        return "the relation exists (its replacement is Spark's)"
    why = writer_refusal(adapter, relation, model, cfg, definition)
    if why:
        return why
    if len({n.lower() for n in names}) != len(names) or names_needing_mapping(
            {"type": "struct", "fields": [{"name": n, "type": "string"} for n in names]}):
        return "column names Spark's path checks"
    if "timestamp" in types:
        conf = {str(k): str(v) for k, v in (creds.spark_conf or {}).items()}
        if creds.method != "session" or conf.get("spark.sql.session.timeZone", "UTC") != "UTC" \
                or "spark.sql.timestampType" in conf:
            return "timestamps read in a session time zone other than UTC"
    unknown = sorted({t for t in types if t not in _CONVERT})
    if unknown:
        return f"column types {unknown}"
    return None


def writer_refusal(adapter: Any, relation: Any, model: Any, cfg: Any, definition: Any) -> Optional[str]:
    """Why the engine's Arrow writer would not commit the table Spark's writer commits for these settings
    (None: it would): the rule seeds and small models (small_models.py) share."""
    from deltalog.storage.files import is_object_store_uri
    from dbt.adapters.deltalog.declared_columns import declared_columns
    from dbt.adapters.deltalog.model_config import config_value as _get

    warehouse = adapter.warehouse_of(relation)
    if adapter.pending_app_transactions(relation):
        return "changes consumed, recorded in the same commit"
    if adapter.metastore_of(relation) is not None:
        return "a Hive Metastore lists the table"
    if is_object_store_uri(warehouse.table_path(relation.schema, relation.identifier)):
        return "an object-store warehouse"
    config = _get(model, "config") or {}
    if cfg.partition_by or cfg.zorder_by or cfg.clustering or cfg.location_root:
        return "partition_by, zorder_by, clustering or location_root"
    if definition.description is not None or definition.column_comments or definition.not_null:
        return "persist_docs or a contract"
    odd = sorted(k for k in definition.properties if k.startswith("delta.") and k not in _PLAIN_PROPERTIES)
    if odd:
        return f"table properties {odd}"
    if declared_columns(model) or _get(config, "column_mapping"):
        return "declared columns or column_mapping"
    return None


def arrow_table(agate_table: Any, names: List[str], types: List[str]):
    """The seed's rows as the Arrow table Spark's cast of their text would give (NotHere: a value whose
    cast is Spark's to decide)."""
    columns = []
    for i, (name, kind) in enumerate(zip(names, types)):
        convert, arrow_type = _CONVERT[kind]
        values = [None if row[i] is None else convert(row[i], name) for row in agate_table.rows]
        columns.append(pa.array(values, arrow_type))
    return pa.Table.from_arrays(columns, names=names)


def _bigint(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, Decimal)) or (isinstance(v, Decimal) and (
            not v.is_finite() or v != v.to_integral_value())):
        raise NotHere(f"column {name}: {v!r} is not a whole number")
    n = int(v)
    if not _INT64[0] <= n <= _INT64[1]:
        raise NotHere(f"column {name}: {v} is outside bigint")
    return n


def _double(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, Decimal)) or (isinstance(v, Decimal) and not v.is_finite()):
        raise NotHere(f"column {name}: {v!r}")
    return float(v)  # correctly rounded, as Java's parseDouble of the same digits


def _boolean(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise NotHere(f"column {name}: {v!r}")
    return v


def _string(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise NotHere(f"column {name}: {v!r}")
    return v


def _date(v: Any, name: str) -> dt.date:
    if isinstance(v, dt.datetime) or not isinstance(v, dt.date):
        raise NotHere(f"column {name}: {v!r}")
    return v


def _timestamp(v: Any, name: str) -> dt.datetime:
    # the seed's text: naive values read in the session's time zone (UTC), an offset honoured
    if not isinstance(v, dt.datetime):
        raise NotHere(f"column {name}: {v!r}")
    return v.replace(tzinfo=_UTC) if v.tzinfo is None else v.astimezone(_UTC)


_CONVERT = {
    "bigint": (_bigint, pa.int64()), "double": (_double, pa.float64()), "boolean": (_boolean, pa.bool_()),
    "string": (_string, pa.string()), "date": (_date, pa.date32()),
    "timestamp": (_timestamp, pa.timestamp("us", tz="UTC")),  # Delta's timestamp (deltalog/schema.py)
}
