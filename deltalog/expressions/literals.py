"""Literal values and value strings in a column's comparison domain, by Delta type: a literal coerced
to the column's type, a partition value string read like the literal it is compared with, stats and
partition strings of dates and timestamps parsed, and the Arrow types they compare in."""
from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa

INTEGRAL_TYPES = {"byte", "short", "integer", "long"}


def coerce_partition_value(text: str, like: Any) -> Any:
    """A partition value string read in the type of the literal it is compared with."""
    if isinstance(like, bool):
        return text.lower() == "true"
    if isinstance(like, int):
        return int(text)
    if isinstance(like, float):
        return float(text)
    if isinstance(like, decimal.Decimal):
        return decimal.Decimal(text)
    if isinstance(like, dt.datetime):
        v = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if (v.tzinfo is None) != (like.tzinfo is None):
            v = v.replace(tzinfo=None) if like.tzinfo is None else v.replace(tzinfo=dt.timezone.utc)
        return v
    if isinstance(like, dt.date):
        return dt.date.fromisoformat(text[:10])
    return text


def base_type(delta_type: Any) -> str | None:
    if not isinstance(delta_type, str):
        return None
    if delta_type.startswith("decimal"):
        return "decimal"
    return delta_type


def stats_json_type(base: str) -> pa.DataType | None:
    if base in INTEGRAL_TYPES:
        return pa.int64()
    if base in ("float", "double", "decimal"):
        return pa.float64()
    if base in ("string", "date", "timestamp", "timestamp_ntz"):
        return pa.string()
    return None  # boolean, binary, nested: no min/max in Delta stats


def arrow_value_type(base: str) -> pa.DataType:
    return {
        "string": pa.string(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"), "boolean": pa.bool_(),
    }.get(base, pa.int64() if base in INTEGRAL_TYPES else pa.float64())


def coerce_literal(value: Any, base: str) -> Any:
    """The literal in the column's comparison domain, or raise ValueError/TypeError (then: keep)."""
    if value is None:
        raise ValueError("null literal")
    if base in INTEGRAL_TYPES:
        if isinstance(value, bool):
            raise TypeError("boolean for an integer column")
        if isinstance(value, (float, decimal.Decimal)):
            raise TypeError("fractional literal for an integer column")  # Spark widens; keep all
        return int(value)
    if base in ("float", "double", "decimal"):
        if isinstance(value, bool):
            raise TypeError("boolean for a numeric column")
        f = float(value)
        if math.isnan(f):
            raise ValueError("NaN")
        return f
    if base == "string":
        if not isinstance(value, str):
            raise TypeError("non-string literal for a string column")
        return value
    if base == "date":
        if isinstance(value, dt.datetime):
            raise TypeError("timestamp literal for a date column")
        if isinstance(value, dt.date):
            return value
        return dt.date.fromisoformat(str(value).strip())
    if base in ("timestamp", "timestamp_ntz"):
        if isinstance(value, dt.datetime):
            v = value
        elif isinstance(value, dt.date):
            v = dt.datetime(value.year, value.month, value.day)
        else:
            v = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        if base == "timestamp":
            if v.tzinfo is None:
                v = v.replace(tzinfo=dt.timezone.utc)  # naive literals are read as UTC
            return v.astimezone(dt.timezone.utc)
        return v.replace(tzinfo=None) if v.tzinfo is None else v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if base == "boolean":
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise ValueError(value)
    raise TypeError(base)


def parse_time_strings(arr: pa.Array, base: str) -> pa.Array:
    """Stats or partition value strings of date/timestamp columns to Arrow temporal values; unparsable
    entries become null (unknown)."""
    arr = arr.cast(pa.string())
    if base == "date":
        out = []
        for s in arr.to_pylist():
            try:
                out.append(None if s is None else dt.date.fromisoformat(s[:10]))
            except ValueError:
                out.append(None)
        return pa.array(out, pa.date32())
    tz = dt.timezone.utc if base == "timestamp" else None
    out = []
    for s in arr.to_pylist():
        if s is None:
            out.append(None)
            continue
        try:
            v = dt.datetime.fromisoformat(s.strip().replace("Z", "+00:00"))
        except ValueError:
            out.append(None)
            continue
        if base == "timestamp":
            v = v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v.astimezone(dt.timezone.utc)
        elif v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        out.append(v)
    return pa.array(out, pa.timestamp("us", tz="UTC" if tz else None))
