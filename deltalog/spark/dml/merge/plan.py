"""A MERGE's plan (the clauses resolved against the table, and every flag the run derives from them),
the names of the columns the phases hand each other, and the checks and helpers more than one phase uses."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import Column, DataFrame, functions as F  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from .... import change_data, identity  # noqa: E402
from ....column_defaults import column_defaults  # noqa: E402
from ....errors import InvalidTableError, SchemaMismatchError  # noqa: E402
from ....generated_columns import generated_columns, substituted  # noqa: E402
from ....schema import quote_identifier  # noqa: E402
from ...writer import cast_by_name  # noqa: E402
from ..rows import marks_enabled  # noqa: E402

log = logging.getLogger("deltalog.spark.dml.merge")

NEW = "__deltalog_new_"  # a matched row's new value (per target column index)
SOURCE_ID = "__deltalog_source_id"  # a source row's id: the inserts are the rows whose id no match saw
OLD = "__deltalog_old_"  # a matched target row's value, carried from the matching join (merge-on-read)
BY_SOURCE_NEW = "__deltalog_by_source_value_"  # not a prefix of NEW's names, nor NEW of its
BROADCAST_SOURCE_BYTES = 64 << 20


def assignments(spec: Any, target_columns: list[str], source_columns: list[str], source_alias: str,
                 target_alias: str, table: str, what: str) -> dict[str, str]:
    """target column -> SQL expression, for '*' or a dict (keys matched to target columns ignoring case)."""
    if spec == "*":
        src = {c.lower(): c for c in source_columns}
        out = {}
        for c in target_columns:
            s = src.get(c.lower())
            # UPDATE SET * keeps a column the source lacks; INSERT * fills it with null
            out[c] = (f"{quote_identifier(source_alias)}.{quote_identifier(s)}" if s is not None else
                      (f"{quote_identifier(target_alias)}.{quote_identifier(c)}" if what == "update" else "null"))
        return out
    if not isinstance(spec, dict):
        raise ValueError(f"{table}: {what} must be '*' or a dict of target column -> SQL expression.")
    by_lower = {c.lower(): c for c in target_columns}
    out = {}
    for k, v in spec.items():
        c = by_lower.get(str(k).strip("`").lower())
        if c is None:
            raise SchemaMismatchError(
                f"{table}: merge {what} sets column '{k}', which the table does not have; columns are "
                f"{', '.join(target_columns)}.")
        out[c] = str(v)
    return out


def with_declared_columns(values: dict[str, str] | None, spec: Any, source_columns: list[str],
                          target_columns: list[str], target_alias: str, schema_json: dict[str, Any],
                          what: str) -> dict[str, str] | None:
    """A clause's assignments with the columns the table fills in itself: an insert that leaves out a
    column with a default stores the default; a generated column the clause does not set is computed
    from the row's new values (an update recomputes it from the inputs it changes). A generated column
    the clause does set is checked by the writer."""
    if values is None:
        return None
    generated, defaults = generated_columns(schema_json), column_defaults(schema_json)
    if not generated and not defaults:
        return values
    given = ({c.lower() for c in source_columns} if spec == "*" else {str(k).strip("`").lower() for k in spec})
    names = {c.lower(): c for c in target_columns}
    out = dict(values)
    if what == "insert":
        for d in defaults:
            if d.name.lower() not in given and d.name.lower() in names:
                out[names[d.name.lower()]] = d.expression
    # every column's new value: an insert's unset column is NULL, an update's keeps the row's value
    row = {c.lower(): ("null" if what == "insert" else f"{quote_identifier(target_alias)}.{quote_identifier(c)}")
           for c in target_columns}
    row.update({c.lower(): v for c, v in out.items()})
    for g in generated:
        if g.name.lower() not in given and g.name.lower() in names:
            out[names[g.name.lower()]] = substituted(g.expression, row)
    return out


def assigned(df: DataFrame, expr: str, wanted: Any) -> Column:
    """A MERGE clause's value `expr`, over `df`, as the target column's type `wanted`. Struct fields are
    assigned by name, as Delta's MERGE assigns them; Spark's cast would match them by position."""
    from pyspark.sql.types import ArrayType, MapType

    column = F.expr(expr)
    if not isinstance(wanted, (StructType, ArrayType, MapType)):
        return column.cast(wanted)
    return cast_by_name(column, df.select(column).schema.fields[0].dataType, wanted)


def stored_value(column: str, stored: Any, wanted: Any) -> Column:
    """A target column's value as the table's (possibly evolved) type `wanted`: null for a column the
    files do not hold yet (`stored` None), upcast for one whose type this commit widens."""
    if stored is None:
        return F.lit(None).cast(wanted)
    return cast_by_name(F.col(column), stored, wanted)


@dataclass(frozen=True)
class MergePlan:
    """A MERGE's clauses, resolved against the table's columns, and how it runs, decided once from the
    request and the table: every flag the run consults is derived here."""

    on: str
    update: dict[str, str] | None             # when matched: {target column: SQL}
    update_condition: str | None
    delete_condition: str | None              # when matched (checked before the update)
    insert: dict[str, str] | None             # when not matched: {target column: SQL}
    insert_condition: str | None
    by_source_delete: bool                    # when not matched by source
    by_source_update: dict[str, str] | None
    by_source_condition: str | None
    marking: bool                             # merge-on-read: changed rows are marked in deletion vectors
    feed: bool                                # the table records its change data feed

    @classmethod
    def of(cls, txn: Any, on: str, target_columns: list[str], source_columns: list[str], source_alias: str,
           target_alias: str, *, update: Any, update_condition: str | None, delete_condition: str | None,
           insert: Any, insert_condition: str | None, by_source_delete: bool, by_source_update: Any,
           by_source_condition: str | None) -> "MergePlan":
        name = txn.table_uri
        if by_source_delete and by_source_update is not None:
            raise ValueError(f"{name}: a merge deletes or updates the rows the source does not match, not both.")

        def assigned(spec: Any, columns: list[str], kind: str) -> dict[str, str] | None:
            return None if spec is None else assignments(spec, target_columns, columns, source_alias, target_alias,
                                                           name, kind)

        schema_json = txn.metadata.schema_json

        def declared(spec: Any, kind: str) -> dict[str, str] | None:
            return with_declared_columns(assigned(spec, source_columns, kind), spec, source_columns, target_columns,
                                         target_alias, schema_json, kind)

        identity.refuse_updates(schema_json, [*(assigned(update, source_columns, "update") or {}),
                                              *(assigned(by_source_update, [], "update") or {})], name)
        return cls(on=on, update=declared(update, "update"),
                   update_condition=update_condition, delete_condition=delete_condition,
                   insert=declared(insert, "insert"),
                   insert_condition=insert_condition, by_source_delete=bool(by_source_delete),
                   by_source_update=with_declared_columns(
                       assigned(by_source_update, [], "update"), by_source_update, [], target_columns, target_alias,
                       schema_json, "update"), by_source_condition=by_source_condition,
                   marking=marks_enabled(txn), feed=change_data.is_enabled(txn.metadata.configuration))

    @property
    def has_matched(self) -> bool:
        """A clause acts on matched rows."""
        return self.update is not None or self.delete_condition is not None

    @property
    def by_source(self) -> bool:
        """A clause acts on the target rows no source row matches (it reads every row of the table)."""
        return self.by_source_delete or self.by_source_update is not None

    @property
    def by_row(self) -> bool:
        """The target rows of matched pairs are needed by row (file, row index)."""
        return self.has_matched or self.by_source

    @property
    def carry(self) -> bool:
        """Merge-on-read writes only the new versions of changed rows, built (with the change feed's
        pre-images) from target values carried through the matching join, so the touched files are not
        scanned a second time. Rows no source row matches come from a scan of their own instead."""
        return self.marking and not self.by_source

    def operation_parameters(self) -> dict[str, str]:
        """The commit's operationParameters, as delta-spark writes them for a MERGE."""
        def clause(action: str, predicate: str | None) -> dict[str, str]:
            return {"actionType": action, **({"predicate": predicate} if predicate else {})}

        matched = ([{"actionType": "delete", "predicate": self.delete_condition}]
                   if self.delete_condition is not None else []) + \
            ([clause("update", self.update_condition)] if self.update is not None else [])
        not_matched = [clause("insert", self.insert_condition)] if self.insert is not None else []
        by_source = [clause("delete" if self.by_source_delete else "update", self.by_source_condition)] \
            if self.by_source else []
        return {"predicate": json.dumps([self.on]), "matchedPredicates": json.dumps(matched),
                "notMatchedPredicates": json.dumps(not_matched),
                "notMatchedBySourcePredicates": json.dumps(by_source)}


class MergeDuplicateSourceError(InvalidTableError):
    """Several source rows matched one target row (Delta's DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE)."""


def duplicate_source_error(table: str, keys: list[tuple[str, str]], row: Any, times: Any) -> Exception:
    """The error of a merge in which several source rows matched one target row; `row` holds the source
    key columns of one of them (None if unknown)."""
    key_text = ", ".join(f"{s}={row[s]!r}" for s, _ in keys) if row is not None and keys else "?"
    return MergeDuplicateSourceError(
        f"{table}: MERGE failed: several source rows matched the same target row and tried to change it "
        f"(e.g. {key_text}; the row appears {times} times in the source). Make the merge key unique in the "
        f"source (deduplicate it, or add columns to unique_key). Nothing was committed.")


def resolves(df: DataFrame, *exprs: str) -> bool:
    """Whether Spark resolves every SQL expression of `exprs` against `df` alone: analysis only, no job."""
    from pyspark.errors import AnalysisException

    try:
        df.select(*[F.expr(e) for e in exprs])
        return True
    except AnalysisException:
        return False


def source_only(source: DataFrame, assignments: dict[str, str]) -> set[str]:
    """The columns of `assignments` whose SQL Spark resolves against the (aliased) source alone."""
    if resolves(source, *assignments.values()):  # SET *: one call
        return set(assignments)
    return {c for c, e in assignments.items() if resolves(source, e)}


def matched_action(plan: "MergePlan") -> Column:
    """What a matched pair does: 'delete' where the delete clause's condition holds (it is checked
    first), else 'update' where the update clause's does, else null (the row stays as it is)."""
    delete = F.coalesce(F.expr(plan.delete_condition), F.lit(False)) if plan.delete_condition else F.lit(False)
    if plan.update is None:
        update = F.lit(False)
    else:
        update = F.coalesce(F.expr(plan.update_condition), F.lit(False)) if plan.update_condition else F.lit(True)
    return F.when(delete, F.lit("delete")).when(update, F.lit("update"))


def atomic_types(schema: StructType) -> bool:
    """Whether every column's type is atomic, so that its `simpleString()` is SQL Spark parses back
    (a struct's would not quote its field names)."""
    from pyspark.sql.types import ArrayType, MapType, NullType, StructType as Struct, UserDefinedType
    return not any(isinstance(f.dataType, (ArrayType, MapType, NullType, Struct, UserDefinedType))
                   for f in schema.fields)


def fits_broadcast(df: DataFrame) -> bool:
    """Whether a (cached, counted) DataFrame is small enough to broadcast, by Spark's size estimate."""
    try:
        # a Scala BigInt, which Py4J hands over as a Python int
        size = int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # no estimate: let Spark choose the join
        return False
    return size <= BROADCAST_SOURCE_BYTES


def check_unique_keys(source: DataFrame, keys: dict[str, str], where: str | None, table: str) -> None:
    """No NULL in the key columns, and no key twice among the source rows (where `where` holds)."""
    rows = source.filter(F.expr(where)) if where else source
    counts = rows.agg(*[F.sum(F.col(quote_identifier(c)).isNull().cast("long")).alias(f"n{i}")
                        for i, c in enumerate(keys)]).collect()[0]
    bad = {shown: counts[f"n{i}"] for i, shown in enumerate(keys.values()) if counts[f"n{i}"]}
    if bad:
        which = ", ".join(f"{c} ({n} rows)" for c, n in bad.items())
        raise InvalidTableError(
            f"{table}: MERGE refused: the source has NULL in its unique key column(s) {which}. A NULL key "
            f"never matches, so those rows would be inserted again on every run. Filter them out or "
            f"coalesce the key in the model. Nothing was committed.")
    cols = [F.col(quote_identifier(c)).alias(f"k{i}") for i, c in enumerate(keys)]
    dup = rows.groupBy(*cols).count().filter("count > 1").limit(1).collect()
    if dup:
        key_text = ", ".join(f"{shown}={dup[0][f'k{i}']!r}" for i, shown in enumerate(keys.values()))
        raise MergeDuplicateSourceError(
            f"{table}: MERGE refused: the unique key ({key_text}) appears {dup[0]['count']} times in the "
            f"source; one run would leave that many rows with one key. Deduplicate the model's rows, or add "
            f"columns to unique_key. Nothing was committed.")


class Phases:
    """Seconds spent in each phase of an operation, logged at debug level (where a slow merge goes)."""

    def __init__(self, what: str):
        self.what, self.last, self.spent = what, time.time(), []

    def done(self, phase: str) -> None:
        now = time.time()
        self.spent.append((phase, now - self.last))
        self.last = now

    def log(self) -> None:
        if self.spent:
            log.debug("%s: %s", self.what, ", ".join(f"{p} {s:.2f} s" for p, s in self.spent))
