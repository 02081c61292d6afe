"""SQL text this project writes for Spark (and for its own predicate parser, sqlglot's Spark dialect in
sql.py): identifiers and literals, one way everywhere."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any


def quote_identifier(name: str) -> str:
    """A column or table name as Spark SQL writes it: backquoted, backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_literal(value: Any) -> str:
    """A Python value as a Spark SQL literal. Strings escape backslashes and quotes with a backslash
    (Spark's own escaping, which sql.py's dialect reads too); a timestamp with a time zone is given in
    UTC, the session time zone every Spark this project starts has."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
