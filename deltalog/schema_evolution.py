"""How a write's data may differ from its table's schema: one rule set for both writers (the Arrow
writer, `write.py`, and the Spark writer, `spark/operations.py`), so that a table accepts or refuses the
same write whichever of them makes it.

- Without schema evolution the data may lack nullable columns (they read as NULL) and may hold a
  narrower number than the column (`WIDENS`: it is cast up as it is written, exactly); anything else
  (another type, a column the table lacks, a struct of other fields) is refused, every problem named.
- With schema evolution (`schema_mode='merge'`, MERGE WITH SCHEMA EVOLUTION, dbt's on_schema_change) new
  columns are appended and new struct fields are added at any depth (inside arrays and maps too), all
  nullable; a column never changes its type.
- `schema_change` is what an incremental write's data makes of its table's columns under one of dbt's
  on_schema_change modes (`ON_SCHEMA_CHANGE`); the adapter aligns the data with the schema it returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import SchemaMismatchError
from .schema import normalize_type_name, nullable_type
from .type_widening import ALLOWED, can_widen, widened_field

WRITE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")
SCHEMA_MODES = (None, "merge", "overwrite")
ON_SCHEMA_CHANGE = ("ignore", "fail", "append_new_columns", "sync_all_columns")

# The data types a column of each table type takes as they are (cast up exactly as they are written).
WIDENS = {
    "short": {"byte"},
    "integer": {"byte", "short"},
    "long": {"byte", "short", "integer"},
    "double": {"float", "byte", "short", "integer"},
}


def shape(t: Any) -> Any:
    """A type without nullability and field metadata (what must agree between data and table)."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return ("struct", tuple((f["name"].lower(), shape(f["type"])) for f in t["fields"]))
        if kind == "array":
            return ("array", shape(t["elementType"]))
        if kind == "map":
            return ("map", shape(t["keyType"]), shape(t["valueType"]))
        return t
    return normalize_type_name(t) if isinstance(t, str) else t


def widens(table_type: Any, data_type: Any) -> bool:
    """A value of `data_type` is written to a column of `table_type` exactly, cast up."""
    return (isinstance(table_type, str) and isinstance(data_type, str)
            and normalize_type_name(data_type) in WIDENS.get(normalize_type_name(table_type), ()))


def fits(table_type: Any, data_type: Any) -> bool:
    return shape(table_type) == shape(data_type) or widens(table_type, data_type)


def type_label(t: Any) -> str:
    """A type as an error message names it: `struct<a, b>` (its field names), `array<long>`, `map<k, v>`."""
    kind = t.get("type") if isinstance(t, dict) else None
    if kind == "struct":
        return f"struct<{', '.join(f['name'] for f in t['fields'])}>"
    if kind == "array":
        return f"array<{type_label(t['elementType'])}>"
    if kind == "map":
        return f"map<{type_label(t['keyType'])}, {type_label(t['valueType'])}>"
    return str(t)


def filled_columns(schema_json: dict[str, Any]) -> set[str]:
    """Columns (lower case) a write fills in when its data leaves them out."""
    from .column_defaults import column_defaults
    from .generated_columns import generated_columns

    return ({g.name.lower() for g in generated_columns(schema_json)}
            | {d.name.lower() for d in column_defaults(schema_json)})


def check_append_schema(table: str, current: dict[str, Any], incoming: dict[str, Any]) -> None:
    """Data written to the table as it is (no schema evolution): raises SchemaMismatchError naming every
    column that does not fit, and nothing is written."""
    have = {f["name"].lower(): f for f in current["fields"]}
    problems = []
    for f in incoming["fields"]:
        old = have.get(f["name"].lower())
        if old is None:
            problems.append(f"column '{f['name']}' ({type_label(f['type'])}) is not in the table")
        elif not fits(old["type"], f["type"]):
            problems.append(f"column '{f['name']}' is {type_label(f['type'])} in the data but "
                            f"{type_label(old['type'])} in the table")
    # a generated column or one with a default is filled in by the writer
    names = {f["name"].lower() for f in incoming["fields"]} | filled_columns(current)
    problems += [f"NOT NULL column '{f['name']}' is missing from the data" for f in current["fields"]
                 if f["name"].lower() not in names and not f.get("nullable", True)]
    if problems:
        raise SchemaMismatchError(
            f"{table}: the data does not match the table schema: {'; '.join(problems)}. Nothing was "
            f"written. Cast the data to the table's types, write with schema_mode='merge' to add new "
            f"columns and struct fields, or overwrite the table with schema_mode='overwrite' to replace its "
            f"schema (table columns: {', '.join(f['name'] for f in current['fields'])}).")


def nullable_field(f: dict[str, Any]) -> dict[str, Any]:
    return {**f, "nullable": True, "type": nullable_type(f["type"])}


def evolved_type(table: str, column: str, old: Any, new: Any) -> Any:
    """The table's type `old` grown by what `new` adds: struct fields it lacks (appended, nullable, at
    any depth, inside arrays and maps too). Anything else must keep its type."""
    kind = old.get("type") if isinstance(old, dict) else None
    if kind == "struct" and isinstance(new, dict) and new.get("type") == "struct":
        fields = []
        incoming = {f["name"].lower(): f for f in new["fields"]}
        for f in old["fields"]:
            match = incoming.pop(f["name"].lower(), None)
            fields.append({**f, "type": evolved_type(table, f"{column}.{f['name']}", f["type"], match["type"])}
                          if match is not None else f)
        fields += [nullable_field(f) for f in new["fields"] if f["name"].lower() in incoming]
        return {**old, "fields": fields}
    if kind == "array" and isinstance(new, dict) and new.get("type") == "array":
        return {**old, "elementType": evolved_type(table, column + "[]", old["elementType"], new["elementType"])}
    if kind == "map" and isinstance(new, dict) and new.get("type") == "map":
        return {**old, "keyType": evolved_type(table, column + "{key}", old["keyType"], new["keyType"]),
                "valueType": evolved_type(table, column + "{value}", old["valueType"], new["valueType"])}
    if not fits(old, new):
        raise SchemaMismatchError(
            f"{table}: column '{column}' is {type_label(old)} in the table but {type_label(new)} in the data; "
            f"schema evolution adds columns and struct fields, it cannot change a type. Cast the column, or "
            f"rebuild the table (a full refresh). Nothing was written.")
    return old


def evolved_schema(table: str, current: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """The table schema grown by the incoming data: new columns appended, new struct fields added at
    any depth. Types never change."""
    fields = list(current["fields"])
    have = {f["name"].lower(): i for i, f in enumerate(fields)}
    for f in incoming["fields"]:
        i = have.get(f["name"].lower())
        if i is None:
            fields.append(nullable_field(f))
        else:
            fields[i] = {**fields[i], "type": evolved_type(table, fields[i]["name"], fields[i]["type"], f["type"])}
    return {**current, "type": "struct", "fields": fields}


def checked_table_schema(table: str, current: dict[str, Any], wanted: dict[str, Any],
                         partition_columns: list[str]) -> dict[str, Any]:
    """A new schema for an existing table given by the caller (columns added or dropped, as dbt's
    on_schema_change asks): columns it keeps keep their type (struct fields may be added), new ones are
    nullable and typed, partition columns stay."""
    have = {f["name"].lower(): f for f in current["fields"]}
    names = {f["name"].lower() for f in wanted["fields"]}
    lost = [c for c in partition_columns if c.lower() not in names]
    if lost:
        raise SchemaMismatchError(f"{table}: partition column(s) {lost} cannot be dropped from the table.")
    for f in wanted["fields"]:
        old = have.get(f["name"].lower())
        if old is not None and can_widen(old["type"], f["type"]):
            continue
        if old is not None and shape(old["type"]) != shape(f["type"]) and shape(
                evolved_type(table, f["name"], old["type"], f["type"])) != shape(f["type"]):
            raise SchemaMismatchError(
                f"{table}: column '{f['name']}' is {type_label(old['type'])} in the table; changing it to "
                f"{type_label(f['type'])} needs the table rewritten (a full refresh).")
        if old is None and f["type"] == "void":
            raise SchemaMismatchError(
                f"{table}: new column '{f['name']}' has no type (a bare NULL); cast it, e.g. "
                f"cast(null as string). Nothing was committed.")
    def kept(old: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
        if can_widen(old["type"], f["type"]):
            return widened_field(old, f["type"])
        return {**old, "type": evolved_type(table, f["name"], old["type"], f["type"])}

    return {"type": "struct", "fields": [kept(have[f["name"].lower()], f) if f["name"].lower() in have
                                         else {**f, "nullable": True} for f in wanted["fields"]]}


@dataclass(frozen=True)
class SchemaChange:
    """A table's columns after a write under an on_schema_change mode."""
    schema: dict[str, Any]  # the table's schema after the write: the current one when nothing changes
    added: list[str]  # the data's columns the table gains
    removed: list[str]  # the table's columns it loses
    widened: list[str] = field(default_factory=list)  # the table's columns whose type widens (type_widening.py)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.widened)


def schema_change(table: str, current: dict[str, Any], incoming: dict[str, Any], mode: str) -> SchemaChange:
    """The table's schema after a write of data whose schema is `incoming`, columns matched ignoring case:
    - ignore: the table keeps its columns (the data's new ones are left out, its missing ones read NULL);
    - fail: a new column, a missing one or one of another type is refused, each named;
    - append_new_columns: the data's new columns are appended, nullable;
    - sync_all_columns: new columns appended, missing ones dropped.
    With either of the last two, a column whose type widens (int -> bigint, ...: type_widening.py) takes
    the wider type, files untouched; any other change of type is refused.
    A new column must have a type (not a bare NULL). Refusals raise SchemaMismatchError, `table` first."""
    if mode not in ON_SCHEMA_CHANGE:
        raise ValueError(f"on_schema_change {mode!r}: expected one of {', '.join(ON_SCHEMA_CHANGE)}")
    have = {f["name"].lower(): f for f in current["fields"]}
    data = {f["name"].lower(): f for f in incoming["fields"]}
    added = [f for f in incoming["fields"] if f["name"].lower() not in have]
    removed = [f for f in current["fields"] if f["name"].lower() not in data]
    retyped = [(have[n]["name"], type_label(have[n]["type"]), type_label(f["type"])) for n, f in data.items()
               if n in have and shape(have[n]["type"]) != shape(f["type"])]
    if mode == "fail" and (added or removed or retyped):
        raise SchemaMismatchError(
            f"{table}: the source and target schemas are out of sync!\n"
            f"  columns added in the new data: {[f['name'] for f in added]}\n"
            f"  columns missing from the new data: {[f['name'] for f in removed]}\n"
            f"  columns with a new type: {retyped}\n"
            "Set on_schema_change to append_new_columns or sync_all_columns, or rebuild the table (a full refresh).")
    if mode in ("ignore", "fail"):
        return SchemaChange(current, [], [])
    untyped = [f["name"] for f in added if f["type"] == "void"]
    if untyped:
        raise SchemaMismatchError(
            f"{table}: new column(s) {untyped} have no type (a bare NULL), so they cannot be added to the "
            f"table. Cast them, e.g. cast(null as string) as {untyped[0]}. Nothing was committed.")
    def written_as_is(name: str) -> bool:
        """The data's values go into the table's type by a cast that loses nothing: narrower numbers
        (int into long), struct fields in another order or added (matched by name)."""
        try:
            evolved_type(table, name, have[name.lower()]["type"], data[name.lower()]["type"])
            return True
        except SchemaMismatchError:
            return False

    widening = [r for r in retyped if can_widen(have[r[0].lower()]["type"], data[r[0].lower()]["type"])]
    narrowed = [r for r in retyped if r not in widening and not written_as_is(r[0])]
    retyped = widening
    if narrowed:
        raise SchemaMismatchError(
            f"{table}: {mode} cannot change the type of {', '.join(f'{c} from {a} to {b}' for c, a, b in narrowed)} "
            f"without rewriting the table's files; a type may only widen ({ALLOWED}). Cast the column in the "
            f"model, or rebuild the table (a full refresh). Nothing was committed.")
    if mode == "append_new_columns":
        removed = []
    widened = [c for c, _, _ in retyped]
    if not added and not removed and not widened:
        return SchemaChange(current, [], [])
    kept = [widened_field(f, data[f["name"].lower()]["type"]) if f["name"] in widened else f
            for f in current["fields"] if f["name"].lower() in data or mode == "append_new_columns"]
    schema = {**current, "type": "struct", "fields": kept + [nullable_field(f) for f in added]}
    return SchemaChange(schema, [f["name"] for f in added], [f["name"] for f in removed], widened)
