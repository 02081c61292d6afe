"""Constraints a Delta table declares and every writer must enforce before it adds rows.

- CHECK constraints (writer feature `checkConstraints`, legacy writer version 3): table properties
  `delta.constraints.<name>` holding a SQL boolean expression. Delta names them in lower case.
- Column invariants (legacy writer version 2, feature `invariants`): a field's metadata
  `delta.invariants` = `{"expression": {"expression": "<SQL>"}}`.
- NOT NULL: a field with `nullable: false`.

A row violates a CHECK constraint or an invariant when the expression is false *or NULL* (Delta's
rule, stricter than SQL's). This module only describes them; the Spark writer evaluates them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import InvalidTableError

CONSTRAINT_PREFIX = "delta.constraints."
INVARIANTS_KEY = "delta.invariants"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Constraint:
    name: str        # the CHECK constraint's name, or the column an invariant is on
    expression: str  # SQL over the table's columns
    kind: str        # "check" | "invariant"

    def describe(self) -> str:
        if self.kind == "check":
            return f"CHECK constraint {self.name} ({self.expression})"
        return f"invariant on column {self.name} ({self.expression})"


def property_name(name: str) -> str:
    """The table property that holds CHECK constraint `name` (lower case, as Delta writes it)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidTableError(
            f"CHECK constraint name {name!r} is not valid: use letters, digits and '_', starting with a "
            f"letter or '_'.")
    return CONSTRAINT_PREFIX + name.lower()


def check_constraints(configuration: Mapping[str, str]) -> list[Constraint]:
    return [Constraint(k[len(CONSTRAINT_PREFIX):], str(v), "check")
            for k, v in sorted(configuration.items()) if k.startswith(CONSTRAINT_PREFIX)]


def invariants(schema_json: dict[str, Any], prefix: str = "") -> list[Constraint]:
    """Invariants of the schema's fields, nested struct fields included (named by their dotted path)."""
    found = []
    for f in schema_json.get("fields", []):
        name = prefix + f["name"]
        raw = (f.get("metadata") or {}).get(INVARIANTS_KEY)
        if raw is not None:
            try:
                expression = (json.loads(raw) if isinstance(raw, str) else raw)["expression"]["expression"]
            except (ValueError, KeyError, TypeError):
                raise InvalidTableError(
                    f"column {name!r}: {INVARIANTS_KEY} is not {{\"expression\": {{\"expression\": \"<SQL>\"}}}} "
                    f"(found {raw!r}).") from None
            found.append(Constraint(name, str(expression), "invariant"))
        if isinstance(f.get("type"), dict) and f["type"].get("type") == "struct":
            found += invariants(f["type"], name + ".")
    return found


def table_constraints(configuration: Mapping[str, str], schema_json: dict[str, Any]) -> list[Constraint]:
    """Every CHECK constraint and invariant a writer of this table must enforce."""
    return check_constraints(configuration) + invariants(schema_json)


def not_null_columns(schema_json: dict[str, Any]) -> list[str]:
    return [f["name"] for f in schema_json.get("fields", []) if f.get("nullable") is False]
