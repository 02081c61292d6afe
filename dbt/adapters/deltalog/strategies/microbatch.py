"""`microbatch`: one commit per batch, replacing the batch's `event_time` window."""
from __future__ import annotations

import datetime as dt
from typing import Any, List, Optional

from dbt_common.exceptions import CompilationError

from dbt.adapters.deltalog.model_config import config_value
from .incremental_write import IncrementalWrite
from .replace_where import replace


def _timestamp(value: Any) -> str:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    return str(value)


def window_predicates(model: Any, name: str) -> List[str]:
    """The batch's window on `event_time`, as SQL predicates."""
    config = config_value(model, "config") or {}
    event_time = config_value(config, "event_time")
    batch = config_value(model, "batch") or {}
    start = config_value(batch, "event_time_start") or config_value(config, "__dbt_internal_microbatch_event_time_start")
    end = config_value(batch, "event_time_end") or config_value(config, "__dbt_internal_microbatch_event_time_end")
    if not event_time:
        raise CompilationError(f"Model {name}: microbatch needs an `event_time` config")
    predicates = []
    if start:
        predicates.append(f"{event_time} >= to_timestamp('{_timestamp(start)}')")
    if end:
        predicates.append(f"{event_time} < to_timestamp('{_timestamp(end)}')")
    return predicates


def run(w: IncrementalWrite) -> Optional[int]:
    window = window_predicates(w.model, w.name)
    # A batch writes only its own window: rows outside it (an upstream without event_time is read whole)
    # belong to other batches, which write them; kept, they would repeat.
    df = w.df.filter(" and ".join(f"({p})" for p in window)) if window else w.df
    return replace(w, w.predicates + window, df)
