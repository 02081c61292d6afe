"""A batch of changes as the appliers read it: the table's columns, each change's sequence (SEQ) and
what it is (OP: 'u' upsert, 'd' delete, 't' truncate); the one pass that refuses a NULL key or sequence;
and the changes after a truncate."""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import DataFrame, functions as F  # noqa: E402

from ...sql_text import quote_identifier  # noqa: E402
from .spec import RESERVED_PREFIX, ApplyChangesError  # noqa: E402

SEQ = RESERVED_PREFIX + "sequence"
OP = RESERVED_PREFIX + "op"             # 'u' upsert, 'd' delete, 't' truncate
DELETED = RESERVED_PREFIX + "deleted"
AT = RESERVED_PREFIX + "applied_at"


def prepared(batch: DataFrame, applier: "Any") -> DataFrame:
    """The batch's changes: the table's columns, their sequence and what each is (OP). A NULL delete or
    truncate condition counts as false."""
    spec = applier.spec
    op = F.lit("u")
    if spec.apply_as_deletes:
        op = F.when(F.coalesce(F.expr(spec.apply_as_deletes), F.lit(False)), F.lit("d")).otherwise(op)
    if spec.apply_as_truncates:
        op = F.when(F.coalesce(F.expr(spec.apply_as_truncates), F.lit(False)), F.lit("t")).otherwise(op)
    return batch.select(*[F.col(quote_identifier(c)) for c in applier.output],
                        F.expr(spec.sequence_by).alias(SEQ), op.alias(OP))


def checked(events: DataFrame, applier: "Any") -> str | None:
    """One pass over the batch: a NULL key or sequence fails the batch (nothing is committed), naming
    the table and the column; the batch's last truncate, as JSON `{"v": sequence}`, or None."""
    keys = applier.keys
    # (a truncate is of the whole table: it has no key)
    aggregates = [F.count(F.when(F.col(quote_identifier(k)).isNull() & (F.col(OP) != "t"), 1)).alias(f"k{i}")
                  for i, k in enumerate(keys)]
    aggregates.append(F.count(F.when(F.col(SEQ).isNull() & (F.col(OP) != "t"), 1)).alias("seq"))
    aggregates.append(F.to_json(F.struct(F.max(F.when(F.col(OP) == "t", F.col(SEQ))).alias("v"))).alias("truncate"))
    row = events.agg(*aggregates).first()
    where = applier.table.uri
    for i, k in enumerate(keys):
        if row[f"k{i}"]:
            raise ApplyChangesError(f"{where}: {row[f'k{i}']} change(s) of batch {applier.batch_id} have a NULL key "
                                    f"{k}; every change needs its key. Nothing of this batch was applied.")
    if row["seq"]:
        raise ApplyChangesError(f"{where}: {row['seq']} change(s) of batch {applier.batch_id} have a NULL sequence "
                                f"(sequence_by {applier.spec.sequence_by}); every change needs one. Nothing of this "
                                f"batch was applied.")
    return None if row["truncate"] in (None, "{}") else row["truncate"]


def after_truncate(events: DataFrame, truncated_at: str | None) -> DataFrame:
    """The changes sequenced after a truncate (`{"v": sequence}` JSON), the truncates themselves dropped."""
    events = events.filter(F.col(OP) != "t")
    if truncated_at is None:
        return events
    seq_type = events.schema[SEQ].dataType
    from pyspark.sql.types import StructField, StructType

    at = F.from_json(F.lit(truncated_at), StructType([StructField("v", seq_type)])).getField("v")
    return events.filter(F.col(SEQ) > at)
