"""Column defaults (Delta's writer feature `allowColumnDefaults`).

A top-level field whose metadata holds `CURRENT_DEFAULT` (Spark SQL text of a constant expression,
e.g. `'new'`, `0`, `current_date()`) has a default: a write whose data leaves the column out stores
the default in it. The Spark writer fills them in (`spark/writer.py` `with_column_defaults`); this
module reads and validates the declaration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidTableError
from .lazy_imports import load
from .generated_columns import GENERATION_EXPRESSION_KEY, parse_expression, referenced_columns

DEFAULT_KEY = "CURRENT_DEFAULT"
FEATURE = "allowColumnDefaults"


@dataclass(frozen=True)
class ColumnDefault:
    name: str
    expression: str  # Spark SQL, constant
    type: Any        # the column's Delta type (JSON)

    def describe(self) -> str:
        return f"default of column {self.name} ({self.expression})"


def column_defaults(schema_json: dict[str, Any] | None) -> list[ColumnDefault]:
    """The table's column defaults, in schema order (top-level columns)."""
    out = []
    for f in (schema_json or {}).get("fields") or []:
        expression = (f.get("metadata") or {}).get(DEFAULT_KEY)
        if expression is not None:
            out.append(ColumnDefault(f["name"], str(expression), f["type"]))
    return out


def has_column_defaults(schema_json: dict[str, Any] | None) -> bool:
    return bool(column_defaults(schema_json))


def validate(schema_json: dict[str, Any], table: str) -> None:
    """Refuse a default that is not SQL, reads a column (a default is a constant), or sits on a
    generated column (whose value is its expression's); the error names table, column and default."""
    load("sqlglot")
    from sqlglot import exp

    for d in column_defaults(schema_json):
        what = f"{table}: {d.describe()}"
        if not d.expression.strip():
            raise InvalidTableError(f"{what}: the default is empty; give a constant such as 'new' or 0.")
        tree = parse_expression(d.expression, what)
        columns = referenced_columns(tree)
        if columns:
            raise InvalidTableError(f"{what}: a default is a constant, and this one reads column(s) "
                                    f"{', '.join(columns)}. For a value computed from other columns, declare a "
                                    f"generated column instead.")
        if any(isinstance(n, (exp.AggFunc, exp.Window, exp.Subquery, exp.Select)) for n in tree.walk()):
            raise InvalidTableError(f"{what}: a default is a constant expression (no aggregates, window "
                                    f"functions or subqueries).")
    for f in (schema_json or {}).get("fields") or []:
        meta = f.get("metadata") or {}
        if DEFAULT_KEY in meta and GENERATION_EXPRESSION_KEY in meta:
            raise InvalidTableError(f"{table}: column {f['name']} has both a default and a generation "
                                    f"expression; a generated column always takes its expression's value. "
                                    f"Declare one of them.")
