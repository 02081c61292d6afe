"""Source freshness without a loaded_at_field: when a source's table last changed, from its Delta log
(the newest commit's in-commit timestamp, or its commit file's time); tables other engines wrote count
alike."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from deltalog.errors import DeltaError

logger = AdapterLogger("Deltalog")


def freshness_of_many(adapter: Any, sources: List[Any]) -> Tuple[List[AdapterResponse], Dict[Any, Any]]:
    """A source whose table is missing is left out here, and dbt then asks for it alone, which fails
    naming it (a batch that raised would skip every source)."""
    found = {}
    for source in sources:
        try:
            found[source] = log_freshness(adapter, source)
        except DbtRuntimeError:
            continue
    return [AdapterResponse(_message=f"freshness of {len(found)} table(s) from their Delta logs")], found


def log_freshness(adapter: Any, source: Any):
    """One source's freshness response; a source whose table is not in the warehouse fails naming it."""
    from datetime import datetime, timezone

    from deltalog.history import last_commit_time

    schema, name = source.schema, source.identifier
    warehouse = adapter.warehouse_of(source)
    if not schema or not name or not warehouse.is_table(schema, name):
        raise DbtRuntimeError(
            f"source {source}: there is no Delta table {schema}.{name} in the warehouse "
            f"{warehouse.root} to take its freshness from. Build or load it there (or point the "
            f"source's schema and identifier at it), or give the source a loaded_at_field.")
    try:
        version, millis = last_commit_time(warehouse.table(schema, name).store)
    except DeltaError as exc:
        raise DbtRuntimeError(f"source {source}: {exc}") from None
    logger.debug(f"freshness of {source}: version {version} committed at {millis} ms")
    return adapter._create_freshness_response(datetime.fromtimestamp(millis / 1000, timezone.utc),
                                              datetime.now(timezone.utc))
