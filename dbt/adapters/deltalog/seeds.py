"""Seeds: a CSV's rows as typed columns (inferred as dbt does, or `column_types`) in one overwrite
commit, skipped when the table's last commit loaded exactly the same seed."""
from __future__ import annotations

import json
from typing import Any, List, Optional

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger

from deltalog.lazy_imports import load
from dbt.adapters.deltalog.model_config import config_value as _get, quote_name as _q

log = AdapterLogger("deltalog")

# commitInfo field of a seed load: what was loaded (see fingerprint)
SEED_FINGERPRINT = "dbtSeedFingerprint"


def write_seed(adapter: Any, relation: Any, agate_table: Any, model: Any, full_refresh: bool) -> AdapterResponse:
    """A seed whose rows, column types and config are those of the table's last commit (its own last
    load: nothing committed to the table since) is left as it is, without a commit; `--full-refresh`
    loads it anyway."""
    config = _get(model, "config") or {}
    column_types = _get(config, "column_types") or {}
    names = [str(n) for n in agate_table.column_names]
    types = [column_types.get(n) or adapter.convert_type(agate_table, i) for i, n in enumerate(names)]
    rows = [tuple(seed_text(v) for v in row) for row in agate_table.rows]
    loaded = fingerprint(names, types, rows, config)
    unchanged = None if full_refresh else unchanged_version(adapter, relation, loaded)
    if unchanged is not None:
        adapter._publish(relation)
        response = AdapterResponse(_message=f"UNCHANGED {len(rows)} (SEED version {unchanged}: the rows, "
                                            f"types and config of its last load)")
        response.rows_affected = 0
        return response
    version = _arrow_load(adapter, relation, agate_table, model, names, types, column_types, loaded)
    if version is None:
        version = _spark_load(adapter, relation, model, names, types, rows, loaded)
    response = adapter._refreshed(relation, "SEED", version)
    response.rows_affected = len(rows)
    response._message = f"INSERT {len(rows)} ({response._message})"
    return response


def _spark_load(adapter: Any, relation: Any, model: Any, names: List[str], types: List[str], rows: List[tuple],
                loaded: str) -> Optional[int]:
    """Spark casts each column's text to its type, and the table is created or replaced."""
    load("spark")
    from pyspark.sql.types import StringType, StructField, StructType

    spark = adapter.spark
    raw = spark.createDataFrame(rows, StructType([StructField(f"c{i}", StringType()) for i in range(len(names))]))
    df = raw.selectExpr(*[f"cast(`c{i}` as {t}) as {_q(n)}" for i, (n, t) in enumerate(zip(names, types))])
    return adapter._replace_table(relation, df, model, "WRITE", {SEED_FINGERPRINT: loaded})


def _arrow_load(adapter: Any, relation: Any, agate_table: Any, model: Any, names: List[str], types: List[str],
                column_types: dict, loaded: str) -> Optional[int]:
    """A new table written by the engine's Arrow writer, without waiting for Spark (arrow_seeds.py); None
    when the load is Spark's."""
    from deltalog.write import write_deltalake
    from dbt.adapters.deltalog import arrow_seeds
    from dbt.adapters.deltalog.model_config import table_definition
    from dbt.adapters.deltalog.placement import place_table

    cfg = adapter._model_config(relation, model)
    definition = table_definition(cfg, model)
    why = arrow_seeds.refusal(adapter, relation, model, cfg, definition, names, types, column_types)
    data = None
    if why is None:
        try:
            data = arrow_seeds.arrow_table(agate_table, names, types)
        except arrow_seeds.NotHere as e:
            why = str(e)
    if data is None:
        log.debug(f"seed {relation.identifier}: loaded by Spark: {why}")
        return None
    warehouse = adapter.warehouse_of(relation)
    place_table(warehouse, relation, cfg)  # (clears a location left by a table never written)
    warehouse.create_schema(relation.schema)
    return write_deltalake(adapter.table(relation).uri, data, mode="error", configuration=definition.properties,
                           extra_commit_info={**adapter._commit_info(model), SEED_FINGERPRINT: loaded})


def unchanged_version(adapter: Any, relation: Any, loaded: str) -> Optional[int]:
    """The table's version when its last commit is a seed load of exactly `loaded`, else None."""
    from deltalog.errors import DeltaError
    from deltalog.history import commit_info
    from deltalog.log_segment import latest_version

    if not adapter.warehouse_of(relation).is_table(relation.schema, relation.identifier):
        return None
    try:  # the last commit's info alone: no snapshot load
        store = adapter.table(relation).store
        version = latest_version(store)
        info = (commit_info(store, version) if version is not None else None) or {}
    except (DeltaError, OSError):
        return None  # the load then says what is wrong
    return version if info.get(SEED_FINGERPRINT) == loaded else None


def fingerprint(names: List[str], types: List[str], rows: List[tuple], config: Any) -> str:
    """A seed load's rows, column names and types, its model config and this adapter's version, hashed:
    equal fingerprints load equal tables."""
    import hashlib

    from dbt.adapters.deltalog.__version__ import version

    as_dict = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    body = json.dumps({"columns": names, "types": types, "rows": rows, "config": as_dict, "adapter": version},
                      sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def seed_text(value: Any) -> Optional[str]:
    """A CSV value as the text the seed's cast reads."""
    import datetime as dt
    from decimal import Decimal

    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        # dbt types a column bigint when every value is whole, `1.0` included: Spark's cast to bigint
        # refuses the text "1.0", so a whole number is written without its fraction
        if value.is_finite() and value == value.to_integral_value():
            return "-0" if value.is_zero() and value.is_signed() else str(int(value))  # -0.0 stays a double's -0
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)
