"""Partition values and data file paths, exactly as Delta Lake (on Spark) writes them.

Three layers of encoding meet here:
- `partitionValues` in the log hold each value as a string the way Spark casts it (`serialize_partition_value`);
- the folder `col=value/` Hive-escapes that string (`partition_folder`);
- `add.path` URI-encodes the relative path once more (`encode_path`); readers decode it once (`decode_path`).
"""
from __future__ import annotations

import datetime as dt
import math
import os
import re
import struct
import uuid
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Sequence
from urllib.parse import unquote

from .errors import InvalidTableError
from .schema import decimal_precision_scale, normalize_type_name

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Spark's ExternalCatalogUtils.charToEscape (non-Windows): control characters and these.
_HIVE_ESCAPE = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))
# Characters Java's java.net.URI quotes in a path: everything not legal there (non-ASCII: see encode_path).
_URI_ILLEGAL = frozenset([chr(c) for c in range(0x00, 0x21)] + list("\"#%<>?[\\]^`{|}\x7f"))

_DECIMAL_CONTEXT = Context(prec=80)  # wider than decimal(38,s), so quantize never overflows
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


# ---------------------------------------------------------------------------------------------------
# partitionValues strings


# The folder of a table's Iceberg metadata (table_format: iceberg): never data files, never vacuumed as such.
ICEBERG_METADATA_DIR = "metadata"

def _java_double_string(x: float) -> str:
    """Java's Double.toString (what Spark's cast to string gives): 1.0, 1.0E-5, 1.0E20, NaN, Infinity."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    # Shortest round-tripping digits (as Java, JDK 19+, picks them): value = 0.DIGITS * 10**point
    _, digit_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + exponent
    digits_neg = x < 0
    sign = "-" if digits_neg else ""
    ax = abs(x)
    if 1e-3 <= ax < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    # Scientific: d.ddddE<n>
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}E{point - 1}"


def _float32_shortest(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (Java's Float.toString digits)."""
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    f32 = struct.unpack("f", struct.pack("f", x))[0]
    for precision in range(1, 10):
        candidate = float(f"{f32:.{precision}g}")
        if struct.unpack("f", struct.pack("f", candidate))[0] == f32:
            return candidate
    return f32


def _format_timestamp(value: dt.datetime) -> str:
    s = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        s += f".{value.microsecond:06d}"
    return s


def _to_utc_naive(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def serialize_partition_value(value: Any, delta_type: str) -> str | None:
    """The `partitionValues` string of one value of a partition column of type `delta_type`.

    None (and, as Spark does, an empty string) -> None, which the folder spells __HIVE_DEFAULT_PARTITION__.
    Timestamps are written as UTC wall-clock time `yyyy-MM-dd HH:mm:ss[.ffffff]`; timestamp_ntz as is.
    """
    if value is None:
        return None
    t = normalize_type_name(delta_type)
    if t == "string":
        s = value if isinstance(value, str) else str(value)
        return s if s != "" else None
    if t in ("long", "integer", "short", "byte"):
        return str(int(value))
    if t == "boolean":
        return "true" if value else "false"
    if t == "double":
        return _java_double_string(float(value))
    if t == "float":
        return _java_double_string(_float32_shortest(float(value)))
    if t.startswith("decimal"):
        _, scale = decimal_precision_scale(t)
        d = value if isinstance(value, Decimal) else Decimal(str(value))
        return format(d.quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT), "f")
    if t == "date":
        if isinstance(value, dt.datetime):
            value = value.date()
        if isinstance(value, str):
            value = dt.date.fromisoformat(value)
        return value.isoformat()
    if t in ("timestamp", "timestamp_ntz"):
        if isinstance(value, str):
            value = parse_partition_value(value, t)
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            value = dt.datetime(value.year, value.month, value.day)
        return _format_timestamp(_to_utc_naive(value) if t == "timestamp" else value.replace(tzinfo=None))
    if t == "binary":
        return bytes(value).decode("utf-8", errors="replace")
    raise InvalidTableError(f"partition values of type '{delta_type}' are not supported.")


def parse_partition_value(s: str | None, delta_type: str) -> Any:
    """The Python value of a `partitionValues` string: int, float, Decimal, bool, date, datetime (timestamp:
    aware UTC; timestamp_ntz: naive), str or bytes. Accepts ISO-8601 timestamps (`...T...Z`) too."""
    if s is None or s == "":
        return None  # the protocol: an empty string, for any type, is a null partition value
    t = normalize_type_name(delta_type)
    try:
        if t == "string":
            return s
        if t in ("long", "integer", "short", "byte"):
            return int(s)
        if t == "boolean":
            low = s.lower()
            if low not in ("true", "false"):
                raise ValueError(s)
            return low == "true"
        if t in ("double", "float"):
            return float(s)
        if t.startswith("decimal"):
            return Decimal(s)
        if t == "date":
            return dt.date.fromisoformat(s[:10])
        if t in ("timestamp", "timestamp_ntz"):
            value = _parse_timestamp(s)
            if t == "timestamp":
                # A value with no offset is UTC wall-clock time (as delta-rs and our writer use it).
                return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None \
                    else value.astimezone(dt.timezone.utc)
            return value.replace(tzinfo=None) if value.tzinfo is None \
                else value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        if t == "binary":
            return s.encode("utf-8")
    except (ValueError, InvalidOperation):
        raise InvalidTableError(
            f"partition value {s!r} is not a valid {delta_type}.") from None
    raise InvalidTableError(f"partition values of type '{delta_type}' are not supported.")


_TS_RE = re.compile(
    r"^(\d{4,})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?\s*(Z|[+-]\d{2}:?\d{2})?$")


def _parse_timestamp(s: str) -> dt.datetime:
    m = _TS_RE.match(s.strip())
    if not m:
        raise ValueError(s)
    year, month, day, hh, mm, ss, frac, tz = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    value = dt.datetime(int(year), int(month), int(day), int(hh or 0), int(mm or 0), int(ss or 0), micro)
    if tz:
        if tz == "Z":
            value = value.replace(tzinfo=dt.timezone.utc)
        else:
            sign = -1 if tz[0] == "-" else 1
            digits = tz[1:].replace(":", "")
            offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            value = value.replace(tzinfo=dt.timezone(sign * offset))
    return value


# ---------------------------------------------------------------------------------------------------
# Folders and paths


def escape_path_name(s: str) -> str:
    """Hive's escaping of a partition column name or value inside a folder name (`%XX`, upper-case)."""
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPE else c for c in s)


def unescape_path_name(s: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), s)


def partition_folder(columns: Sequence[str], values: Sequence[str | None] | dict[str, str | None]) -> str:
    """`col1=v1/col2=v2` (no trailing slash) for serialised partition values; '' when unpartitioned."""
    if isinstance(values, dict):
        values = [values.get(c) for c in columns]
    parts = []
    for c, v in zip(columns, values):
        parts.append(f"{escape_path_name(c)}={HIVE_DEFAULT_PARTITION if v is None else escape_path_name(v)}")
    return "/".join(parts)


def parse_partition_folder(relative_path: str) -> dict[str, str | None]:
    """The `col=value` pairs in the folders of a relative (URI-decoded) file path, unescaped."""
    out: dict[str, str | None] = {}
    for segment in relative_path.split("/")[:-1]:
        if "=" not in segment:
            continue
        name, _, value = segment.partition("=")
        out[unescape_path_name(name)] = None if value == HIVE_DEFAULT_PARTITION else unescape_path_name(value)
    return out


def encode_path(relative_path: str) -> str:
    """`add.path` of a relative file path: URI-encoded as java.net.URI does (space -> %20, % -> %25), and
    non-ASCII as %XX of its UTF-8 bytes too. Both forms are valid and delta-spark decodes either, but
    delta-rs matches a later `remove` (always ASCII-encoded there) against the add's raw string, so a raw
    non-ASCII add would never be removed by delta-rs."""
    return "".join(
        "".join(f"%{b:02X}" for b in c.encode("utf-8")) if c in _URI_ILLEGAL or ord(c) > 127 else c
        for c in relative_path)


def decode_path(path: str) -> str:
    """The relative file-system path (or absolute URI) of an `add.path`: URI-decoded once."""
    return unquote(path)


def is_absolute_path(path: str) -> bool:
    return path.startswith("/") or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) is not None


def absolute_file_path(root: str, log_path: str) -> str:
    """The local path (or another store's URI) of a data file as the log names it (URI-encoded):
    relative to the table root, an absolute path, or a URI (`file:` URIs become local paths)."""
    return file_path_of(root, decode_path(log_path))


def file_path_of(root: str, p: str) -> str:
    """`absolute_file_path` for a path already URI-decoded."""
    from urllib.parse import urlparse

    parsed = urlparse(p)
    if parsed.scheme == "file":
        return parsed.path
    if (parsed.scheme and len(parsed.scheme) > 1) or p.startswith("/"):
        return p
    return os.path.join(root, p)


def location_uri(location: str) -> str:
    """A location as a full URI with its file system's scheme, as Iceberg's metadata names its files and
    folders (its spec asks for that; Trino's native local file system refuses a bare path): a local
    absolute path becomes `file:///abs/path` (Hadoop's `file:/abs/path` too), an object store's URI
    (`s3://`, `abfss://`, ...) stays as it is. Not URI-encoded: Iceberg readers take what follows the
    scheme as the path. The same for a location already written so, so two locations, of old metadata
    (bare paths) or new, are the same file when their `location_uri`s are equal."""
    if location.startswith("file://"):
        return location
    if location.startswith("file:"):
        return "file://" + location[len("file:"):]
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", location)
    if scheme and len(scheme.group(1)) > 1:  # `C:` drive letters are paths, not schemes
        return location
    return "file://" + os.path.abspath(location)


def new_data_file_path(folder: str = "", part: int = 0, extension: str = ".c000.snappy.parquet") -> str:
    """A fresh relative data file path (not URI-encoded): `col=v/part-00000-<uuid>.c000.snappy.parquet`."""
    name = f"part-{part:05d}-{uuid.uuid4()}{extension}"
    return f"{folder}/{name}" if folder else name


def datetime_to_micros(value: dt.datetime) -> int:
    """Microseconds since the epoch (naive values taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    delta = value - _EPOCH_UTC
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
