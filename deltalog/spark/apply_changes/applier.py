"""The stream's side of applying changes: one `Applier` per stream and table, called per micro-batch."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame, functions as F  # noqa: E402
from pyspark.errors import AnalysisException  # noqa: E402

from ...sql_text import quote_identifier  # noqa: E402
from ...storage import files as fs  # noqa: E402
from ...table import DeltaTable, as_table  # noqa: E402
from ...table_configuration import AUTO_COMPACT_KEY, DELETION_VECTORS_KEY  # noqa: E402
from .events import AT, DELETED, checked, prepared  # noqa: E402
from .scd1 import apply_scd1  # noqa: E402
from .scd2 import apply_scd2  # noqa: E402
from .spec import END_AT, START_AT, ApplyChanges, ApplyChangesError  # noqa: E402


log = logging.getLogger(__name__)

STATE_DIR = "_apply_changes"
PURGE_EVERY = 20
TRUNCATED_AT = "deltalog.applyChanges.truncatedAt"  # the state table's property: the last truncate's sequence
# the warm-up: batches as large as a stream's typical ones (the JIT compiles code run often enough), the
# second and third updating half of the keys before them and inserting as many
REHEARSED_BATCHES, REHEARSAL_ROWS = 3, 1000
WARM_UP_PREFIX = "deltalog-warm-up-"  # then the process id: a folder whose process is gone was left by a kill


def remove_left_over_scratch() -> None:
    """Remove the warm-up folders of processes that are gone (a stream killed while warming up)."""
    import glob
    import shutil
    import tempfile

    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f"{WARM_UP_PREFIX}*-*")):
        pid = os.path.basename(folder)[len(WARM_UP_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive, another user's
            pass


def state_table(table: DeltaTable) -> DeltaTable:
    """The state table of a table receiving changes, reached with the table's own storage options."""
    return DeltaTable(fs.join(table.uri, STATE_DIR), storage_options=table.store.options.as_dict())


@dataclass
class Applier:
    """One stream's changes into one table: the request, the table and what the stream fixed. It holds
    no session (each batch brings its own): on Spark Connect it travels to the server's Python."""
    table: DeltaTable
    spec: ApplyChanges
    app_id: str
    output: list[str]                          # the table's columns from the source (before __START_AT / __END_AT)
    replace: bool = False                      # the first batch replaces the table and its state
    write_options: dict[str, Any] = field(default_factory=dict)
    purged: bool = False

    @property
    def state(self) -> DeltaTable:
        return state_table(self.table)

    @property
    def txn(self) -> dict[str, int]:
        return {self.app_id: self.batch_id}

    def key_condition(self, left: str = "t", right: str = "s") -> str:
        return " AND ".join(f"{left}.{quote_identifier(k)} = {right}.{quote_identifier(k)}" for k in self.keys)

    @property
    def keys(self) -> list[str]:
        by_lower = {c.lower(): c for c in self.output}
        return [by_lower[k.lower()] for k in self.spec.keys]

    def configuration(self) -> dict[str, str]:
        """Properties a table made by this stream gets: deletion vectors, unless the model says otherwise."""
        definition = self.write_options.get("definition")
        given = dict(getattr(definition, "properties", None) or {})
        return {} if DELETION_VECTORS_KEY in given else {DELETION_VECTORS_KEY: "true"}

    def empty_rows(self, source: DataFrame) -> DataFrame:
        """No rows, with the table's columns: to make the table before any change arrives."""
        from ..connect import empty_dataframe

        rows = source.select(*[F.col(quote_identifier(c)) for c in self.output])
        if self.spec.scd_type == 2:
            seq = source.select(F.expr(self.spec.sequence_by).alias("s")).schema["s"].dataType
            rows = rows.select("*", F.lit(None).cast(seq).alias(START_AT), F.lit(None).cast(seq).alias(END_AT))
        return empty_dataframe(source.sparkSession, rows.schema)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.batch_id = int(batch_id)
        self.spark = batch.sparkSession
        table = self.table
        if table.exists() and table.snapshot().app_transactions.get(self.app_id, -1) >= self.batch_id:
            log.info("%s: batch %d of %s was applied before", table.uri, self.batch_id, self.app_id)
            return
        started = time.time()
        self.purge_tombstones()
        events = prepared(batch, self).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            truncate_at = checked(events, self)
            if self.spec.scd_type == 1:
                version = apply_scd1(self, events, truncate_at)
            else:
                version = apply_scd2(self, events)
        finally:
            events.unpersist()
        self.replace = False
        if version is not None:
            log.info("%s: batch %d of %s applied as version %d in %.2f s", table.uri, self.batch_id, self.app_id,
                     version, time.time() - started)
            from ..auto_compact import after_write

            after_write(self.spark, table, table.snapshot().configuration, [{}])

    def warm_up(self, source: DataFrame) -> None:
        """Rehearse, before a long-running stream starts, what its first batches run: REHEARSED_BATCHES
        batches of REHEARSAL_ROWS made-up changes with the source's columns (creating a table, then
        updating and inserting by key), applied to a scratch table and state in a temporary folder. The
        JVM then runs a batch's plans compiled and warm: the stream's first batches take as long as the
        later ones (a batch's work past its source reads the cached changes, the same plans whatever
        the source). The table and its state are not touched. Nothing is committed to them."""
        import shutil
        import tempfile

        from ..cluster import is_local_master

        if not is_local_master(source.sparkSession):  # executors elsewhere would not share the folder
            log.info("%s: no warm-up: the session's tasks run on other machines", self.table.uri)
            return
        started = time.time()
        remove_left_over_scratch()
        scratch = tempfile.mkdtemp(prefix=f"{WARM_UP_PREFIX}{os.getpid()}-")
        try:
            rehearsal = Applier(table=DeltaTable(fs.join(scratch, "table")), spec=self.spec,
                                app_id=f"{self.app_id}-warm-up", output=self.output)
            for batch_id in range(REHEARSED_BATCHES):
                rehearsal(made_up_changes(source, self.keys, batch_id), batch_id)
        except Exception as exc:  # only an optimisation: the first batch will say what is wrong, if anything
            log.info("%s: warm-up skipped: %s", self.table.uri, str(exc).splitlines()[0] if str(exc) else exc)
            return
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        log.info("%s: warmed up for %s in %.2f s", self.table.uri, self.app_id, time.time() - started)

    def purge_tombstones(self) -> None:
        """Forget deletes older than the retention, before the first batch of a run and every PURGE_EVERY."""
        if self.purged and self.batch_id % PURGE_EVERY:
            return
        self.purged = True
        state = self.state
        if not state.exists():
            return
        from ..operations import delete

        cutoff = time.time() - self.spec.tombstone_retention_seconds
        predicate = (f"{quote_identifier(DELETED)} AND {quote_identifier(AT)} < "
                     f"timestamp_seconds({cutoff:.3f})")
        version = delete(self.spark, state, predicate)
        if version is not None:
            log.info("%s: tombstones older than %.0f s purged (state version %d)", self.table.uri,
                     self.spec.tombstone_retention_seconds, version)

    def commit_state(self, rows: DataFrame, merge_on_keys: bool, truncate_at: Any = None) -> None:
        """The state's part of this batch (skipped when a run of this batch committed it already)."""
        from ..operations import merge, write_dataframe

        state = self.state
        exists = state.exists()
        if exists and state.snapshot().app_transactions.get(self.app_id, -1) >= self.batch_id:
            return
        rows = rows.withColumn(AT, F.current_timestamp())
        if not exists or self.replace or truncate_at is not None:
            # deletion vectors: a batch's MERGE marks the keys it changes instead of rewriting their files;
            # auto-compaction: each batch adds a small file, which every later batch would read
            configuration = {DELETION_VECTORS_KEY: "true", AUTO_COMPACT_KEY: "true",
                             **({TRUNCATED_AT: truncate_at} if truncate_at is not None else {})}
            write_dataframe(rows, state, mode="overwrite", schema_mode="overwrite", configuration=configuration,
                            txn_app_id=self.app_id, txn_version=self.batch_id)
        elif merge_on_keys:
            version = merge(self.spark, state, rows, self.key_condition(), when_matched_update="*",
                            when_not_matched_insert="*", source_alias="s", target_alias="t",
                            app_transactions=self.txn)
            if version is not None:  # (write_dataframe compacts after its own commits)
                from ..auto_compact import after_write

                after_write(self.spark, state, state.snapshot().configuration, [{}])
        else:
            write_dataframe(rows, state, mode="append", schema_mode="merge", txn_app_id=self.app_id,
                            txn_version=self.batch_id)

    def state_rows(self, keys: DataFrame) -> DataFrame | None:
        """The state's rows of the keys in `keys` (None: no state yet, or the table is being replaced)."""
        state = self.state
        if self.replace or not state.exists():
            return None
        from ..reader import snapshot_dataframe

        return snapshot_dataframe(self.spark, state.snapshot()).join(F.broadcast(keys), self.keys, "left_semi")

    def truncated_at(self) -> str | None:
        """The last applied truncate's sequence, as JSON `{"v": ...}` (None: never truncated)."""
        state = self.state
        if self.replace or not state.exists():
            return None
        return state.snapshot().configuration.get(TRUNCATED_AT)


def change_applier(table: DeltaTable | str, spec: ApplyChanges, app_id: str,
                   source_columns: list[str], *, replace: bool = False, where: str | None = None,
                   columns: list[str] | None = None, **write_options: Any) -> Callable[[DataFrame, int], None]:
    """A `foreachBatch` function applying each micro-batch of changes to `table` (created at the first
    batch when absent). `source_columns`: the stream's columns (checked against the request here, before
    anything runs). `replace`: the first batch replaces the table's rows and its state (a full refresh).
    `write_options`: `write_dataframe`'s `partition_by` and `definition`, used when the table is made or
    replaced, and `table_schema`, the table's schema after an on_schema_change (each batch's commit
    carries it), with `columns`, the source columns the table keeps (default: all the request keeps)."""
    table = as_table(table)
    if not app_id or not isinstance(app_id, str):
        raise ValueError(f"{table.uri}: a stream of changes needs an app id naming its query, got {app_id!r}.")
    output = spec.output_columns(source_columns, where or table.uri)
    if columns is not None:
        kept = {c.lower() for c in columns}
        output = [c for c in output if c.lower() in kept or c.lower() in {k.lower() for k in spec.keys}]
    if spec.scd_type == 2:
        spec.tracked_columns(output, where or table.uri)
    return Applier(table=table, spec=spec, app_id=app_id, output=output, replace=replace,
                   write_options=write_options)


def check_source(df: DataFrame, spec: ApplyChanges, where: str) -> None:
    """Refuse a sequence or condition the source cannot compute (an unknown column, a type that does not
    order) before a stream starts: Spark analyses the expressions without reading a row."""
    spec.output_columns(df.columns, where)
    for what in ("sequence_by", "apply_as_deletes", "apply_as_truncates"):
        text = getattr(spec, what)
        if not text:
            continue
        try:
            field_type = df.select(F.expr(text).alias("x")).schema["x"].dataType
        except AnalysisException as exc:
            raise ApplyChangesError(f"{where}: apply_changes {what} `{text}` does not resolve against the source "
                                    f"(columns: {', '.join(df.columns)}): {str(exc).splitlines()[0]}") from None
        kind = field_type.typeName()
        if what == "sequence_by" and kind in ("map", "binary", "variant", "array"):
            raise ApplyChangesError(f"{where}: apply_changes sequence_by `{text}` is of type {kind}, which does not "
                                    f"order; use a number, string, date, timestamp or a struct of them.")
        if what != "sequence_by" and kind != "boolean":
            raise ApplyChangesError(f"{where}: apply_changes {what} `{text}` is of type {kind}; it must be a "
                                    f"condition (true or false).")


def made_up_changes(source: DataFrame, keys: list[str], batch_id: int) -> DataFrame:
    """REHEARSAL_ROWS changes with `source`'s columns, for the warm-up: `keys` from a range that moves on
    by half its length each batch, every other column a value of its type that grows batch after batch
    (NULL where no cast makes one: a key or sequence left NULL stops the rehearsal, as it would a batch).
    Computed by Spark from a range, so that no step of the plan is folded away as a literal's would be."""
    from pyspark.sql.types import (BooleanType, DateType, NumericType, StringType, TimestampNTZType,
                                   TimestampType)

    first = batch_id * REHEARSAL_ROWS // 2
    rows = source.sparkSession.range(first, first + REHEARSAL_ROWS)
    later = F.col("id") + F.lit(batch_id * REHEARSAL_ROWS)  # a later sequence than the batch before's
    key_names = {k.lower() for k in keys}
    columns = []
    for f in source.schema.fields:
        t, n = f.dataType, F.col("id") if f.name.lower() in key_names else later
        if isinstance(t, (NumericType, StringType)):
            value = n.cast(t)
        elif isinstance(t, BooleanType):
            value = F.lit(False)
        elif isinstance(t, (TimestampType, TimestampNTZType)):
            value = F.timestamp_seconds(n).cast(t)
        elif isinstance(t, DateType):
            value = F.date_from_unix_date((n % 100000).cast("int"))
        else:
            value = F.lit(None).cast(t)
        columns.append(value.alias(f.name))
    return rows.select(*columns)

