"""What Spark's analysis gives a query that passed the model rules (driver_queries.py), worked out here:
its output column names and, for a small model, the Delta type of each.

A model or view over a new warehouse has no kept analysis (view_check.py, small_models.py), and Spark's
analysis of it needs a session: on a cold JVM, its start, the build's critical path. Within the model
rules the analysis is small and fixed, and is done here by Spark's own rules:
- names: each output column is a column, `*` or an aliased expression (an unaliased expression takes
  a name Spark makes up: Spark analyses it), spelt as written or as the table spells it; the query is
  resolved case-sensitively, so a name written in another case than its column's (Spark resolves it
  without a word, and keeps the spelling of the SQL) sends the query to Spark;
- types, by Spark's type coercion: count is a bigint; min and max keep their argument's type; a sum
  of whole numbers is a bigint (driver_queries keeps DuckDB's within one), of doubles a double; + - *
  of whole numbers take the wider one, with a double a double; `/` a double; a whole number divided by
  a decimal power of ten a decimal of Spark's division rule (a literal dividend counts its own digits);
  CASE, IF and COALESCE the wider of their branches (whole numbers, or a double with them, or all of
  one type); comparisons, AND, OR, NOT, IN and IS are booleans; an integer literal is an int; upper()
  and lower() strings.
Anything else raises NotHere: Spark analyses the query as before. The schema is then checked again by
the rows DuckDB computes, which must convert to it exactly (small_models._as_spark_types)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from deltalog.lazy_imports import load

load("sqlglot")
from sqlglot import exp  # noqa: E402
from sqlglot.errors import SqlglotError  # noqa: E402


class NotHere(Exception):
    """Why Spark analyses the query instead."""


_WHOLE = ("byte", "short", "integer", "long")  # narrowest first
# Spark's decimal for a whole-number type in decimal arithmetic (DecimalType.forType)
_WHOLE_AS_DECIMAL = {"byte": 3, "short": 5, "integer": 10, "long": 20}
_MAX_PRECISION = 38


def output_names(tree: Any, schema: Dict[str, Dict[str, str]]) -> List[str]:
    """The names of the columns `tree` (a query with its warehouse relations registered, as
    driver_queries inlines it, before qualification) gives, spelt as Spark gives them."""
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.schema import MappingSchema

    for select in tree.find_all(exp.Select):
        for projection in select.expressions:
            if not isinstance(projection, (exp.Column, exp.Star, exp.Alias)):
                raise NotHere(f"the column {projection.sql(dialect='spark')[:80]} has no name of its own "
                              f"(Spark names it)")
    # Resolved as spelt, every identifier quoted, by a dialect whose quoted names keep their case (sqlglot's
    # Spark folds even quoted names to lower case): a name matched only ignoring case is Spark's to resolve.
    tree = tree.copy()
    for identifier in tree.find_all(exp.Identifier):
        identifier.set("quoted", True)
    try:
        tree = qualify(tree, schema=MappingSchema(schema, dialect="postgres", normalize=False), dialect="postgres")
    except SqlglotError as exc:
        raise NotHere(f"not resolved as spelt: {exc}") from None
    return list(tree.named_selects)


def delta_schema(checked: Any, tables: Dict[str, dict], names: List[str]) -> dict:
    """The Delta schema (all nullable, as Spark's writer makes it) of `checked`, the query as
    driver_queries checked it under the model rules; `tables` are the registered inputs' Delta schemas
    and `names` the output names (output_names)."""
    from sqlglot.optimizer.scope import build_scope

    scope = build_scope(checked)
    if scope is None or not isinstance(scope.expression, exp.Select):
        raise NotHere("not a single SELECT")
    projections = scope.expression.expressions
    if len(projections) != len(names):
        raise NotHere(f"{len(names)} names for {len(projections)} columns")
    types = _Types(tables)
    fields = []
    for name, projection in zip(names, projections):
        kind = types.of(projection, scope)
        if kind == "void":
            raise NotHere(f"{name} is a bare NULL")
        fields.append({"name": name, "type": kind, "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


class _Types:
    def __init__(self, tables: Dict[str, dict]) -> None:
        self.tables = {registered: {f["name"].lower(): f["type"] for f in schema["fields"]}
                       for registered, schema in tables.items()}

    def of(self, node: Any, scope: Any) -> str:  # noqa: C901 - one case per construct the rules allow
        if isinstance(node, (exp.Alias, exp.Paren)):
            return self.of(node.this, scope)
        if "whole_sum" in (node.meta or {}):  # driver_queries._sums_within_bigint
            return "long"
        if "exact_division" in (node.meta or {}):  # driver_queries._exact_divisions
            dividend, divisor = node.meta["exact_division"]
            kind = self.of(dividend, scope)
            quotient = exact_quotient(kind, divisor, _literal_digits(dividend)) if kind in _WHOLE else None
            if quotient is None:
                raise NotHere(f"{node.sql(dialect='spark')[:80]}: a {kind} divided by {divisor}")
            return quotient
        if isinstance(node, exp.Column):
            return self._column(node, scope)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return "string"
            if node.is_int and int(node.this) <= 2**31 - 1:
                return "integer"
            raise NotHere(f"the literal {node.sql(dialect='spark')} (Spark types it by its size)")
        if isinstance(node, exp.Null) or (isinstance(node, exp.Anonymous) and node.name == "error"):
            return "void"  # (error(): driver_queries' refusal of a case mapping beyond ASCII)
        if isinstance(node, (exp.Boolean, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or,
                             exp.Not, exp.Is, exp.In)):
            return "boolean"
        if isinstance(node, (exp.Upper, exp.Lower)):
            return "string"
        if isinstance(node, exp.Count):
            return "long"
        if isinstance(node, (exp.Min, exp.Max)):
            return self.of(node.this, scope)
        if isinstance(node, exp.Sum):
            kind = self.of(node.this, scope)
            if kind in _WHOLE:
                return "long"
            if kind == "double":
                return "double"
            raise NotHere(f"a sum of {kind}")
        if isinstance(node, exp.Neg):
            return self._number(node, [self.of(node.this, scope)])
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            return self._number(node, [self.of(node.this, scope), self.of(node.expression, scope)])
        if isinstance(node, exp.Div):
            self._number(node, [self.of(node.this, scope), self.of(node.expression, scope)])
            return "double"  # Spark's `/` of whole numbers and doubles
        if isinstance(node, exp.Case):
            branches = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
            return self._wider(node, [self.of(b, scope) for b in branches if b is not None])
        if isinstance(node, exp.If):
            return self._wider(node, [self.of(b, scope) for b in (node.args.get("true"), node.args.get("false"))
                                      if b is not None])
        if isinstance(node, exp.Coalesce):
            return self._wider(node, [self.of(b, scope) for b in (node.this, *node.expressions)])
        raise NotHere(f"the type of {node.sql(dialect='spark')[:80]}")

    def _column(self, column: Any, scope: Any) -> str:
        source = scope.sources.get(column.table)
        name = column.name.lower()
        if isinstance(source, exp.Table):
            kind = self.tables.get(source.name, {}).get(name)
            if kind is None:
                raise NotHere(f"the column {column.sql(dialect='spark')}")
            if not isinstance(kind, str) or not (kind in _WHOLE or kind.startswith("decimal") or kind in (
                    "string", "boolean", "date", "timestamp", "timestamp_ntz", "double", "float")):
                raise NotHere(f"the column {column.sql(dialect='spark')} of type {kind!r}")
            return kind
        if source is not None and isinstance(source.expression, exp.Select):
            for projection in source.expression.expressions:
                if projection.alias_or_name.lower() == name:
                    return self.of(projection, source)
        raise NotHere(f"the column {column.sql(dialect='spark')} is not followed to its source")

    @staticmethod
    def _number(node: Any, kinds: List[str]) -> str:
        if all(k in _WHOLE for k in kinds):
            return max(kinds, key=_WHOLE.index)
        if all(k in _WHOLE or k == "double" for k in kinds):
            return "double"
        raise NotHere(f"{node.sql(dialect='spark')[:80]}: arithmetic on {', '.join(kinds)}")

    @classmethod
    def _wider(cls, node: Any, kinds: List[str]) -> str:
        """The type Spark's CASE, IF and COALESCE coerce their branches to (NULLs take the others' type)."""
        typed = [k for k in kinds if k != "void"]
        if not typed:
            return "void"
        if len(set(typed)) == 1:
            return typed[0]
        return cls._number(node, typed)


def _literal_digits(node: Any) -> Optional[int]:
    """The digits of a whole-number literal as Spark's parser reads it (`7`, `-3`, `(-3)`; not `-(3)`,
    which Spark reads as a minus of a literal), else None."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string and node.is_int:
        return len(str(abs(int(node.this))))
    return None


def exact_quotient(dividend: str, divisor: str, literal_digits: Optional[int] = None) -> Optional[str]:
    """Spark's type of a whole number of type `dividend` divided by the decimal literal `divisor` (its
    text, `100.0`): the dividend is a decimal of its type's precision (a literal: of its own digits,
    Spark's DecimalPrecision promotes literals to their least precision), the divisor one of its digits,
    and the quotient's scale is max(6, s1 + p2 + 1), its precision p1 - s1 + s2 + that scale (without
    loss below 38 digits). None past 38 digits."""
    whole, _, fraction = divisor.partition(".")
    p1 = literal_digits or _WHOLE_AS_DECIMAL[dividend]
    p2, s2 = len(whole.lstrip("0") + fraction) or 1, len(fraction)
    scale = max(6, p2 + 1)
    precision = p1 + s2 + scale
    return None if precision > _MAX_PRECISION else f"decimal({precision},{scale})"
