"""Structured Streaming into a table, exactly once: each micro-batch is one commit recording
`txn(appId, version = batch id)`, so a batch Spark replays after a crash (its offsets were logged, its
commit in the streaming checkpoint was not) commits nothing the second time.

    query = (stream_df.writeStream
             .foreachBatch(batch_writer("/lake/orders", app_id="orders-from-kafka"))
             .option("checkpointLocation", "/lake/_checkpoints/orders")
             .trigger(availableNow=True).start())

The app id names the query: keep it for the life of the streaming checkpoint (a new checkpoint that
starts its batch ids at 0 again needs a new app id, or its first batches are taken as done).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame

from ..errors import ConcurrentTransactionException
from ..table import DeltaTable, as_table
from .dml.write import write_dataframe

log = logging.getLogger(__name__)


def batch_writer(table: DeltaTable | str, app_id: str, **write_options: Any) -> Callable[[DataFrame, int], None]:
    """A `foreachBatch` function appending each micro-batch to `table` in one idempotent commit
    (`write_dataframe(..., txn_app_id=app_id, txn_version=batch_id)`); `write_options` are
    `write_dataframe`'s (partition_by, schema_mode, configuration, ...)."""
    table = as_table(table)
    table_uri = table.uri
    if not app_id or not isinstance(app_id, str):
        raise ValueError(f"{table_uri}: a streaming write needs an app id naming its query, got {app_id!r}.")
    mode = write_options.pop("mode", "append")

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        try:
            version = write_dataframe(batch, table, mode=mode,
                                      txn_app_id=app_id, txn_version=int(batch_id), **write_options)
        except ConcurrentTransactionException:
            # another run of this same batch (a replay racing the original) landed first: done
            if (table.snapshot().app_transactions.get(app_id, -1)) >= batch_id:
                log.info("%s: batch %d of %s was committed by another run of it", table_uri, batch_id, app_id)
                return
            raise
        if version is not None:
            log.info("%s: batch %d of %s committed as version %d", table_uri, batch_id, app_id, version)

    return write_batch
