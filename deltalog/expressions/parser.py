"""SQL text to expressions: sqlglot's Spark dialect parses; the forms data skipping can use become
expressions, and anything else becomes ALWAYS in a place where that is safe (it keeps every file)."""
from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

from ..lazy_imports import load
from .model import ALWAYS, NEVER, And, Compare, Expr, In, IsNull, Or


class _Unknown(Exception):
    """A SQL form that skipping cannot use."""


def parse_sql_predicate(text: str | None, strict: bool = False) -> Expr:
    """The simple SQL forms as an expression: comparisons of a column with a literal (=, ==, !=, <>,
    <, <=, >, >=), IN / NOT IN lists, BETWEEN, IS [NOT] NULL, AND, OR and parentheses, with string,
    number, boolean and DATE/TIMESTAMP literals. Anything else becomes ALWAYS (keep all files); with
    `strict` it is a ValueError naming the part (where the predicate must be exact: a replace-where)."""
    if text is None or not str(text).strip():
        return ALWAYS
    from .. import sql

    try:
        tree = sql.parse(str(text))
    except ValueError:
        if strict:
            raise
        return ALWAYS
    return _simplify(_predicate(tree, strict))


_COMPARISONS = {"EQ": "=", "NEQ": "!=", "LT": "<", "LTE": "<=", "GT": ">", "GTE": ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _predicate(node: Any, strict: bool = False) -> Expr:
    """An expression for a boolean node; a part skipping cannot use is ALWAYS (strict: a ValueError).
    Only AND and OR combine parts, so an ALWAYS in place of a part never drops a file (NOT is taken
    only over known forms)."""
    load("sqlglot")
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _predicate(node.this, strict)
    if isinstance(node, exp.And):
        return And(_predicate(node.left, strict), _predicate(node.right, strict))
    if isinstance(node, exp.Or):
        return Or(_predicate(node.left, strict), _predicate(node.right, strict))
    try:
        return _atom(node)
    except _Unknown as unknown:
        if strict:
            raise ValueError(f"cannot read {node.sql(dialect='spark')!r} ({unknown})") from None
        return ALWAYS


def _atom(node: Any) -> Expr:
    load("sqlglot")
    from sqlglot import exp

    if isinstance(node, exp.Boolean):
        return ALWAYS if node.this else NEVER
    negated = isinstance(node, exp.Not)
    inner = node.this if negated else node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
        return IsNull(_column(inner.this), negated)
    if isinstance(inner, exp.In):
        if inner.args.get("query") is not None or inner.args.get("unnest") is not None:
            raise _Unknown("IN (subquery)")
        values = tuple(_literal(v) for v in inner.expressions)
        if not negated and all(v is None for v in values):
            return NEVER
        return In(_column(inner.this), values, negated)
    if negated:
        raise _Unknown("NOT of another form")  # its negation could be wrong: keep all files
    if isinstance(node, exp.Between):
        name, lo, hi = _column(node.this), _literal(node.args["low"]), _literal(node.args["high"])
        if lo is None or hi is None:
            return NEVER
        return And(Compare(name, ">=", lo), Compare(name, "<=", hi))
    op = _COMPARISONS.get(type(node).__name__)
    if op is None:
        raise _Unknown(type(node).__name__)
    left, right = node.this, node.expression
    if isinstance(left, exp.Column) and not isinstance(right, exp.Column):
        name, value = _column(left), _literal(right)
    elif isinstance(right, exp.Column) and not isinstance(left, exp.Column):
        name, value, op = _column(right), _literal(left), _FLIP[op]
    else:
        raise _Unknown("not a column compared with a literal")
    if value is None:
        return NEVER  # x = NULL is never true
    return Compare(name, op, value)


def _column(node: Any) -> str:
    """A column reference's name; dotted parts name a nested field (`a.b`)."""
    load("sqlglot")
    from sqlglot import exp

    if not isinstance(node, exp.Column):
        raise _Unknown("not a column")
    return ".".join(part.name for part in node.parts)


def _literal(node: Any) -> Any:
    """The Python value of a literal: string, number, boolean, NULL, DATE / TIMESTAMP '...', a typed
    number (10L)."""
    load("sqlglot")
    from sqlglot import exp

    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool):
            return -value
        raise _Unknown("negated non-number")
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        if re.fullmatch(r"\d+", text):
            return int(text)
        if "e" in text.lower():
            return float(text)
        return decimal.Decimal(text)
    if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.this, (exp.Literal, exp.Neg)):
        kind = node.to.this.name if node.to is not None else ""
        value = _literal(node.this)
        try:
            if kind == "DATE" and isinstance(value, str):
                return dt.date.fromisoformat(value.strip())
            if kind.startswith("TIMESTAMP") and isinstance(value, str):
                return dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            if kind in ("TINYINT", "SMALLINT", "INT", "BIGINT") and isinstance(value, int):
                return value
            if kind in ("DOUBLE", "FLOAT") and isinstance(value, (int, float, decimal.Decimal)):
                return float(value)
            if kind == "DECIMAL" and isinstance(value, (int, decimal.Decimal)):
                return decimal.Decimal(value)
        except ValueError:
            raise _Unknown("bad typed literal") from None
    raise _Unknown(type(node).__name__)


def _simplify(e: Expr) -> Expr:
    if isinstance(e, And):
        left, right = _simplify(e.left), _simplify(e.right)
        if left is NEVER or right is NEVER:
            return NEVER
        if left is ALWAYS:
            return right
        if right is ALWAYS:
            return left
        return And(left, right)
    if isinstance(e, Or):
        left, right = _simplify(e.left), _simplify(e.right)
        if left is ALWAYS or right is ALWAYS:
            return ALWAYS
        if left is NEVER:
            return right
        if right is NEVER:
            return left
        return Or(left, right)
    return e


def as_expr(predicate: "Expr | str | None") -> Expr:
    """An expression from an expression, a SQL string or None (no predicate: everything matches)."""
    if predicate is None:
        return ALWAYS
    if isinstance(predicate, Expr):
        return predicate
    return parse_sql_predicate(predicate)
