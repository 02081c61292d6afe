"""SQL text (merge conditions, predicates) parsed by sqlglot's Spark dialect, never by regular
expressions: the conjuncts of a condition, the equi-join keys between two aliases, the parts that
name only one alias."""
from __future__ import annotations

from typing import Any

from deltalog.lazy_imports import load

load("sqlglot")  # this module is imported when SQL is first parsed, by any thread
_DIALECT = None


def spark_dialect() -> Any:
    """sqlglot's Spark dialect, reading a doubled quote inside a string as one quote ('it''s' is
    "it's"), as Spark 4 does; sqlglot alone reads it as two adjacent strings."""
    global _DIALECT
    if _DIALECT is None:
        from sqlglot.dialects.spark import Spark

        class SparkSQL(Spark):
            class Tokenizer(Spark.Tokenizer):
                STRING_ESCAPES = ["\\", "'"]

        _DIALECT = SparkSQL()
    return _DIALECT


def parse(text: str) -> Any:
    """The sqlglot tree of a SQL expression; ValueError naming the text when it is not one."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    try:
        return sqlglot.parse_one(text, read=spark_dialect())
    except SqlglotError as e:
        raise ValueError(f"not a SQL expression: {text!r} ({e})") from None


# What may give another value each time Spark computes it: the time, random numbers, ids Spark numbers
_VARYING_NODES = ("CurrentDate", "CurrentDatetime", "CurrentTime", "CurrentTimestamp", "CurrentTimestampLTZ",
                  "Localtimestamp", "Rand", "Randn", "Shuffle", "Uuid")
_VARYING_NAMES = frozenset({"now", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
                            "input_file_block_start", "input_file_block_length"})


def varies_between_runs(text: str) -> bool:
    """Whether the SQL expression `text` may give another value each time Spark computes it (what two
    jobs both write must then be computed once). Text sqlglot cannot read counts as varying."""
    from sqlglot import exp

    try:
        node = parse(text)
    except ValueError:
        return True
    return any(type(n).__name__ in _VARYING_NODES
               or (isinstance(n, exp.Anonymous) and str(n.name).lower() in _VARYING_NAMES) for n in node.walk())


def to_sql(node: Any) -> str:
    return node.sql(dialect=spark_dialect())


def conjuncts(text: str) -> list[Any]:
    """The top-level AND parts of a condition (parentheses around a part removed)."""
    from sqlglot import exp

    node = parse(text)
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        while isinstance(n, exp.Paren):
            n = n.this
        if isinstance(n, exp.And):
            stack.extend([n.right, n.left])
        else:
            out.append(n)
    return out


def _alias_and_column(node: Any) -> tuple[str, str] | None:
    """(alias, column) of an `alias.column` reference."""
    from sqlglot import exp

    if isinstance(node, exp.Column) and len(node.parts) == 2:
        return node.parts[0].name, node.parts[1].name
    return None


def equi_keys(on: str, source_alias: str, target_alias: str) -> list[tuple[str, str]]:
    """(source column, target column) of each top-level `S.a = T.b` conjunct. Only `=`: a NULL key never
    matches, which is what lets min/max statistics of the keys prune target files (`<=>` would match
    NULLs)."""
    from sqlglot import exp

    out = []
    for c in conjuncts(on):
        if not isinstance(c, exp.EQ):
            continue
        left, right = _alias_and_column(c.this), _alias_and_column(c.expression)
        if left is None or right is None:
            continue
        if left[0].lower() == target_alias.lower() and right[0].lower() == source_alias.lower():
            left, right = right, left
        if left[0].lower() == source_alias.lower() and right[0].lower() == target_alias.lower():
            out.append((left[1], right[1]))
    return out


def only_alias_conjuncts(on: str, alias: str, other_alias: str) -> list[str]:
    """Conjuncts that reference `alias` and not `other_alias` (e.g. incremental_predicates on the
    merge target), as SQL with the alias removed from their columns."""
    from sqlglot import exp

    out = []
    for c in conjuncts(on):
        qualifiers = {col.parts[0].name.lower() for col in c.find_all(exp.Column) if len(col.parts) > 1}
        if alias.lower() not in qualifiers or other_alias.lower() in qualifiers:
            continue

        def unqualify(node: Any) -> Any:
            if isinstance(node, exp.Column) and len(node.parts) > 1 and node.parts[0].name.lower() == alias.lower():
                return exp.column(node.parts[-1].copy()) if len(node.parts) == 2 else \
                    exp.Dot.build([p.copy() for p in node.parts[1:]])
            return node

        out.append(to_sql(c.copy().transform(unqualify)))
    return out


def qualified_only_by(text: str, alias: str) -> bool:
    """Whether every column `text` references is qualified by `alias` (`s.op = 'd'`; a constant too). An
    unqualified name could be either side's column, which only the join's analysis settles."""
    from sqlglot import exp

    return all(len(col.parts) > 1 and col.parts[0].name.lower() == alias.lower()
               for col in parse(text).find_all(exp.Column))
