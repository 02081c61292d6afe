"""Type widening (Delta's `typeWidening` table feature): a column's type changed to a wider one without
rewriting a file. Files written before keep the narrower type and readers widen their values; the
column's field metadata lists each change (`delta.typeChanges`: `fromType`, `toType`), and the table's
protocol names the feature. One rule set, used by every writer's schema change."""
from __future__ import annotations

import copy
from typing import Any

TYPE_CHANGES = "delta.typeChanges"
#: the widenings Delta allows that every reader of the feature reads (the integer-to-decimal and
#: integer-to-double ones of Delta 4 are left out: not every reader widens those)
_WIDER = {"byte": ("short", "integer", "long"), "short": ("integer", "long"), "integer": ("long",),
          "float": ("double",), "date": ("timestamp_ntz",)}
ALLOWED = ("byte -> short -> int -> long, float -> double, date -> timestamp_ntz, and decimal(p, s) -> "
           "decimal(p', s') with s' >= s and p' - s' >= p - s")


def _decimal(t: Any) -> tuple[int, int] | None:
    if isinstance(t, str) and t.startswith("decimal(") and t.endswith(")"):
        precision, scale = t[len("decimal("):-1].split(",")
        return int(precision), int(scale)
    return None


def can_widen(old: Any, new: Any) -> bool:
    """Whether a column of type `old` may become `new` by type widening (both Delta type JSON)."""
    if not isinstance(old, str) or not isinstance(new, str) or old == new:
        return False
    if new in _WIDER.get(old, ()):
        return True
    was, becomes = _decimal(old), _decimal(new)
    return (was is not None and becomes is not None and becomes[1] >= was[1]
            and becomes[0] - becomes[1] >= was[0] - was[1] and becomes[0] <= 38)


def widened_field(field: dict[str, Any], new_type: str) -> dict[str, Any]:
    """`field` (Delta schema JSON) with type `new_type` and the change recorded in its metadata."""
    metadata = copy.deepcopy(field.get("metadata") or {})
    metadata[TYPE_CHANGES] = [*metadata.get(TYPE_CHANGES, []), {"fromType": field["type"], "toType": new_type}]
    return {**field, "type": new_type, "metadata": metadata}


def has_type_changes(schema: dict[str, Any]) -> bool:
    """Whether a column of the schema (at any depth) records a type change: the table needs the feature."""
    def walk(t: Any) -> bool:
        if not isinstance(t, dict):
            return False
        if t.get("type") == "struct":
            return any(TYPE_CHANGES in (f.get("metadata") or {}) or walk(f["type"]) for f in t["fields"])
        if t.get("type") == "array":
            return walk(t["elementType"])
        if t.get("type") == "map":
            return walk(t["keyType"]) or walk(t["valueType"])
        return False
    return walk(schema)


# what an Iceberg reader promotes by itself (its schema evolution): a UniForm table widens only these
_ICEBERG_PROMOTES = {("integer", "long"), ("float", "double")}


def iceberg_unreadable_type_changes(schema: dict[str, Any]) -> list[str]:
    """The top-level columns whose recorded type changes an Iceberg reader cannot read as promotions
    (date -> timestamp_ntz; byte and short, which Iceberg holds as int, are fine)."""
    out = []
    for f in schema.get("fields", []):
        for change in (f.get("metadata") or {}).get(TYPE_CHANGES, []):
            pair = (change["fromType"], change["toType"])
            small = pair[0] in ("byte", "short") and pair[1] in ("short", "integer", "long")
            decimal = _decimal(pair[0]) is not None and _decimal(pair[1]) is not None and \
                _decimal(pair[0])[1] == _decimal(pair[1])[1]
            if pair not in _ICEBERG_PROMOTES and not small and not decimal:
                out.append(f"{f['name']} ({pair[0]} -> {pair[1]})")
    return out
