"""The expression model: predicates over one row, built in Python (`col("x") == 1`,
`col("d").isin([...])`, `&`, `|`) or by the SQL parser. Each expression answers for one file's partition
values (`matches_partition`, the transaction's conflict checks) and writes itself back as SQL."""
from __future__ import annotations

import decimal
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..sql_text import quote_identifier, sql_literal
from .literals import coerce_partition_value


class Expr:
    """A predicate over one row. Subclasses say which files may hold a matching row."""

    def __and__(self, other: "Expr") -> "Expr":
        return And(self, other)

    def __or__(self, other: "Expr") -> "Expr":
        return Or(self, other)

    def columns(self) -> set[str]:
        return set()

    def matches_partition(self, partition_values: dict[str, str | None]) -> bool:
        """Whether a file with these partition values may hold matching rows. Leaves on columns not in
        `partition_values` are unknown (True). Partition value strings are read in the literal's type."""
        return True

    def to_sql(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Always(Expr):
    """Cannot prune: every file may match."""

    def to_sql(self) -> str:
        return "true"

    def __repr__(self) -> str:
        return "ALWAYS"


ALWAYS = Always()


@dataclass(frozen=True)
class Never(Expr):
    def matches_partition(self, partition_values):
        return False

    def to_sql(self) -> str:
        return "false"


NEVER = Never()


@dataclass(frozen=True, eq=False)
class Column:
    name: str

    def _cmp(self, op: str, value: Any) -> "Compare":
        if isinstance(value, Column):
            raise TypeError("comparing two columns cannot prune files; compare a column with a literal")
        return Compare(self.name, op, value)

    def __eq__(self, value):  # type: ignore[override]
        return self._cmp("=", value)

    def __ne__(self, value):  # type: ignore[override]
        return self._cmp("!=", value)

    def __lt__(self, value):
        return self._cmp("<", value)

    def __le__(self, value):
        return self._cmp("<=", value)

    def __gt__(self, value):
        return self._cmp(">", value)

    def __ge__(self, value):
        return self._cmp(">=", value)

    def __hash__(self) -> int:
        return hash(self.name)

    def isin(self, values: Iterable[Any]) -> "In":
        return In(self.name, tuple(values))

    def is_null(self) -> "IsNull":
        return IsNull(self.name, False)

    def is_not_null(self) -> "IsNull":
        return IsNull(self.name, True)


def col(name: str) -> Column:
    return Column(name)


_PY_OPS = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _lookup(partition_values: dict[str, str | None], name: str) -> tuple[bool, str | None]:
    if name in partition_values:
        return True, partition_values[name]
    lower = name.lower()
    for k, v in partition_values.items():
        if k.lower() == lower:
            return True, v
    return False, None


@dataclass(frozen=True)
class Compare(Expr):
    column: str
    op: str  # = != < <= > >=
    value: Any

    def columns(self):
        return {self.column}

    def matches_partition(self, partition_values):
        found, text = _lookup(partition_values, self.column)
        if not found:
            return True
        if text is None or self.value is None:
            return False  # comparisons with NULL are never true
        try:
            return bool(_PY_OPS[self.op](coerce_partition_value(text, self.value), self.value))
        except (ValueError, TypeError, decimal.InvalidOperation):
            return True

    def to_sql(self):
        return f"{quote_identifier(self.column)} {self.op} {sql_literal(self.value)}"


@dataclass(frozen=True)
class In(Expr):
    column: str
    values: tuple
    negated: bool = False

    def columns(self):
        return {self.column}

    def matches_partition(self, partition_values):
        found, text = _lookup(partition_values, self.column)
        if not found:
            return True
        if text is None:
            return False
        values = [v for v in self.values if v is not None]
        if self.negated and len(values) != len(self.values):
            return False  # x NOT IN (..., NULL) is never true
        try:
            hit = any(coerce_partition_value(text, v) == v for v in values)
        except (ValueError, TypeError, decimal.InvalidOperation):
            return True
        return not hit if self.negated else hit

    def to_sql(self):
        inner = ", ".join(sql_literal(v) for v in self.values)
        return f"{quote_identifier(self.column)} {'NOT IN' if self.negated else 'IN'} ({inner})"


@dataclass(frozen=True)
class IsNull(Expr):
    column: str
    negated: bool = False  # IS NOT NULL

    def columns(self):
        return {self.column}

    def matches_partition(self, partition_values):
        found, text = _lookup(partition_values, self.column)
        if not found:
            return True
        return (text is not None) if self.negated else (text is None)

    def to_sql(self):
        return f"{quote_identifier(self.column)} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class And(Expr):
    left: Expr
    right: Expr

    def columns(self):
        return self.left.columns() | self.right.columns()

    def matches_partition(self, partition_values):
        return self.left.matches_partition(partition_values) and self.right.matches_partition(partition_values)

    def to_sql(self):
        return f"({self.left.to_sql()}) AND ({self.right.to_sql()})"


@dataclass(frozen=True)
class Or(Expr):
    left: Expr
    right: Expr

    def columns(self):
        return self.left.columns() | self.right.columns()

    def matches_partition(self, partition_values):
        return self.left.matches_partition(partition_values) or self.right.matches_partition(partition_values)

    def to_sql(self):
        return f"({self.left.to_sql()}) OR ({self.right.to_sql()})"


def conjunction(exprs: Sequence[Expr]) -> Expr:
    out: Expr = ALWAYS
    for e in exprs:
        out = e if out is ALWAYS else And(out, e)
    return out
