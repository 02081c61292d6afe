"""Multi-dimensional clustering as Spark expressions: Z-order (Delta's approach) and a Hilbert curve.

Each clustering column is mapped to a *range id*: its rank among boundaries sampled from the data
(1,000 ranges by default). Ranks, unlike raw values, spread every column evenly over the same number
of bits, whatever its type or skew, and strings with a long common prefix are ranked on the part where
they differ. The ids' bits are then combined into one sort key — interleaved (MSB first, round-robin)
for Z-order, or Skilling's transform to the Hilbert curve's transposed form and then interleaved —
and the rows are range-partitioned on that key (plus a noise byte, against skew) into a set number of
files and sorted within each, so both files and Parquet row groups hold compact boxes of the space.

Everything per row is a Spark expression or JVM code: values become order-preserving doubles
(numbers, dates, timestamps; strings via the bytes after their sampled common prefix), ranks come from
`Bucketizer` (a binary search on the JVM), bits from shifts and masks. No Python runs per row.
"""
from __future__ import annotations

import os
from typing import Sequence

from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.types import (
    BooleanType, ByteType, DateType, DecimalType, DoubleType, FloatType, IntegerType, LongType, ShortType,
    StringType, TimestampNTZType, TimestampType,
)

DEFAULT_NUM_RANGES = 1000
DEFAULT_SAMPLE_ROWS = 100_000
CURVES = ("zorder", "hilbert")
_KEY_BYTES = 6  # bytes of a string (after its common prefix) in its sort key: 48 bits, exact in a double
_CHUNK_BITS = 62  # bits of the curve key per long column (non-negative longs sort like the bits)
_INTERNAL = "__deltalog_cluster_"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _common_prefix(values: Sequence[str]) -> str:
    if not values:
        return ""
    return os.path.commonprefix([min(values), max(values)])


def order_key(df: DataFrame, column: str, prefix: str | None = None) -> Column:
    """An order-preserving double for `column` (null stays null). Strings are keyed on the bytes after
    `prefix` (the common prefix of sampled values); values not starting with it sort before or after."""
    dtype = df.schema[column].dataType
    c = F.col(_q(column))
    if isinstance(dtype, (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType)):
        return c.cast("double")
    if isinstance(dtype, BooleanType):
        return c.cast("int").cast("double")
    if isinstance(dtype, DateType):
        return F.unix_date(c).cast("double")
    if isinstance(dtype, (TimestampType, TimestampNTZType)):
        ts = c if isinstance(dtype, TimestampType) else F.to_timestamp(c)
        return F.unix_micros(ts).cast("double")
    if isinstance(dtype, StringType):
        prefix = prefix or ""
        n = len(prefix)
        # Spark compares strings by their UTF-8 bytes, so big-endian bytes after the prefix keep order.
        rest = F.encode(F.substring(c, n + 1, _KEY_BYTES), "UTF-8")
        padded = F.substring(F.concat(rest, F.unhex(F.lit("00" * _KEY_BYTES))), 1, _KEY_BYTES)
        key = F.conv(F.hex(padded), 16, 10).cast("double")
        if not n:
            return F.when(c.isNull(), F.lit(None).cast("double")).otherwise(key)
        head = F.substring(c, 1, n)
        return (F.when(c.isNull(), F.lit(None).cast("double"))
                .when(head < F.lit(prefix), F.lit(-1.0))
                .when(head > F.lit(prefix), F.lit(float(1 << (8 * _KEY_BYTES))))
                .otherwise(key))
    raise TypeError(f"column {column!r} of type {dtype.simpleString()} cannot be clustered; cluster on "
                    f"numbers, strings, dates, timestamps or booleans")


def boundaries(values: Sequence[float | None], num_ranges: int) -> list[float]:
    """At most num_ranges-1 strictly increasing cut points splitting the sample into equal parts."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return []
    cuts = {vals[min(len(vals) - 1, (len(vals) * i) // num_ranges)] for i in range(1, num_ranges)}
    return sorted(cuts)


class RangeModel:
    """Per clustering column, the cut points of its ranges (and for strings the common prefix skipped),
    fitted on a sample so that several frames can be ranked the same way."""

    def __init__(self, columns: Sequence[str], prefixes: dict[str, str], splits: dict[str, list[float]],
                 num_ranges: int):
        self.columns = list(columns)
        self.prefixes = prefixes
        self.splits = splits
        self.bits = max(1, (num_ranges - 1).bit_length())

    def with_range_ids(self, df: DataFrame) -> tuple[DataFrame, list[str]]:
        """`df` plus one int column per clustering column: the value's range id, nulls in range 0."""
        from pyspark.ml.feature import Bucketizer  # JVM-side binary search over the cut points

        key_names = [f"{_INTERNAL}key{i}" for i in range(len(self.columns))]
        id_names = [f"{_INTERNAL}rid{i}" for i in range(len(self.columns))]
        out = df.select("*", *[F.coalesce(order_key(df, c, self.prefixes.get(c)), F.lit(float("-inf"))).alias(k)
                               for c, k in zip(self.columns, key_names)])
        for c, k, rid in zip(self.columns, key_names, id_names):
            out = Bucketizer(splits=self.splits[c], inputCol=k, outputCol=rid + "_d",
                             handleInvalid="keep").transform(out)
            out = out.withColumn(rid, F.col(rid + "_d").cast("int")).drop(rid + "_d", k)
        return out, id_names


def fit_ranges(df: DataFrame, columns: Sequence[str], num_ranges: int = DEFAULT_NUM_RANGES,
               sample_rows: int = DEFAULT_SAMPLE_ROWS, seed: int = 42, total_rows: int | None = None) -> RangeModel:
    """Sample `df` (one Spark job) and cut each column's values into `num_ranges` ranges of equal row
    counts. `total_rows` (e.g. from the files' stats) saves counting the rows first."""
    total = total_rows if total_rows is not None else df.count()
    fraction = min(1.0, sample_rows / max(total, 1))
    sample_df = df.select(*[_q(c) for c in columns])
    if fraction < 1.0:
        sample_df = sample_df.sample(False, fraction, seed)
    rows = sample_df.collect()
    prefixes: dict[str, str] = {}
    splits = {}
    for i, c in enumerate(columns):
        dtype = df.schema[c].dataType
        values = [r[i] for r in rows]
        if isinstance(dtype, StringType):
            prefixes[c] = _common_prefix([v for v in values if v is not None])
        order_key(df, c, prefixes.get(c))  # refuses types that cannot be clustered
        keys = [_python_key(v, dtype, prefixes.get(c)) for v in values]
        cuts = [x for x in boundaries(keys, num_ranges) if x != float("-inf")]
        splits[c] = [float("-inf")] + cuts + [float("inf")] if cuts else [float("-inf"), 0.0, float("inf")]
    return RangeModel(columns, prefixes, splits, num_ranges)


def range_ids(df: DataFrame, columns: Sequence[str], num_ranges: int = DEFAULT_NUM_RANGES,
              sample_rows: int = DEFAULT_SAMPLE_ROWS, seed: int = 42) -> tuple[DataFrame, list[str], int]:
    """`df` plus its range id columns. Returns (frame, id column names, bits per id)."""
    model = fit_ranges(df, columns, num_ranges, sample_rows, seed)
    out, ids = model.with_range_ids(df)
    return out, ids, model.bits


def interleave_bits(ids: Sequence[Column], bits: int) -> list[Column]:
    """The ids' bits interleaved MSB first, round-robin over the ids, as a list of non-negative longs
    (62 bits each, most significant first) that sort like the whole bit string."""
    total = bits * len(ids)
    chunks: list[list[Column]] = [[] for _ in range((total + _CHUNK_BITS - 1) // _CHUNK_BITS)]
    pos = 0
    for b in range(bits - 1, -1, -1):
        for c in ids:
            chunk, offset = divmod(pos, _CHUNK_BITS)
            width = min(_CHUNK_BITS, total - chunk * _CHUNK_BITS)
            shift = width - 1 - offset
            bit = F.shiftright(c.cast("long"), b).bitwiseAND(F.lit(1))
            chunks[chunk].append(F.shiftleft(bit, shift) if shift else bit)
            pos += 1
    out = []
    for terms in chunks:
        acc = terms[0]
        for t in terms[1:]:
            acc = acc.bitwiseOR(t)
        out.append(acc)
    return out


def hilbert_transpose(df: DataFrame, id_names: Sequence[str], bits: int) -> tuple[DataFrame, list[str]]:
    """Skilling's AxestoTranspose (2004) on the range ids, one Spark projection per bit level:
    afterwards the Hilbert index is the interleaving of the columns' bits. Returns (frame, transposed
    column names)."""
    n = len(id_names)
    xs = [f"{_INTERNAL}h{i}" for i in range(n)]
    keep = [F.col(_q(c)) for c in df.columns]
    df = df.select(*keep, *[F.col(c).cast("long").alias(x) for c, x in zip(id_names, xs)])
    if n == 1:
        return df, xs
    m = 1 << (bits - 1)
    q = m
    while q > 1:  # inverse undo, one level per projection (the steps within a level composed)
        p = q - 1
        x = [F.col(v) for v in xs]
        for i in range(n):
            high = x[i].bitwiseAND(F.lit(q)) != 0
            if i == 0:
                x[0] = F.when(high, x[0].bitwiseXOR(F.lit(p))).otherwise(x[0])
                continue
            t = x[0].bitwiseXOR(x[i]).bitwiseAND(F.lit(p))
            x[0], x[i] = (F.when(high, x[0].bitwiseXOR(F.lit(p))).otherwise(x[0].bitwiseXOR(t)),
                          F.when(high, x[i]).otherwise(x[i].bitwiseXOR(t)))
        df = df.select(*[F.col(_q(c)) for c in df.columns if c not in xs], *[e.alias(v) for e, v in zip(x, xs)])
        q >>= 1
    x = [F.col(v) for v in xs]
    for i in range(1, n):  # Gray encode
        x[i] = x[i].bitwiseXOR(x[i - 1])
    df = df.select(*[F.col(_q(c)) for c in df.columns if c not in xs], *[e.alias(v) for e, v in zip(x, xs)])
    last = F.col(xs[n - 1])
    t = F.lit(0).cast("long")
    q = m
    while q > 1:
        t = t.bitwiseXOR(F.when(last.bitwiseAND(F.lit(q)) != 0, F.lit(q - 1)).otherwise(F.lit(0)))
        q >>= 1
    tn = f"{_INTERNAL}t"
    df = df.withColumn(tn, t)
    df = df.select(*[F.col(_q(c)) for c in df.columns if c not in xs and c != tn],
                   *[F.col(v).bitwiseXOR(F.col(tn)).alias(v) for v in xs])
    return df, xs


def _python_key(value, dtype, prefix: str | None) -> float | None:
    """The same order key as `order_key`, computed in Python for sampled values."""
    import datetime as dt
    if value is None:
        return None
    if isinstance(dtype, StringType):
        p = prefix or ""
        head = value[:len(p)]
        if head < p:
            return -1.0
        if head > p:
            return float(1 << (8 * _KEY_BYTES))
        raw = (value[len(p):len(p) + _KEY_BYTES].encode("utf-8") + b"\0" * _KEY_BYTES)[:_KEY_BYTES]
        return float(int.from_bytes(raw, "big"))
    if isinstance(dtype, BooleanType):
        return float(int(value))
    if isinstance(dtype, DateType):
        return float((value - dt.date(1970, 1, 1)).days)
    if isinstance(dtype, (TimestampType, TimestampNTZType)):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc) if isinstance(dtype, TimestampNTZType) else \
                value.astimezone(dt.timezone.utc)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return float((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)
    return float(value)


def _curve(model: RangeModel, df: DataFrame, curve: str) -> tuple[DataFrame, list[str]]:
    if curve not in CURVES:
        raise ValueError(f"unknown clustering curve {curve!r}; allowed: {', '.join(CURVES)}")
    out, id_names = model.with_range_ids(df)
    if curve == "hilbert":
        out, id_names = hilbert_transpose(out, id_names, model.bits)
    zs = interleave_bits([F.col(c) for c in id_names], model.bits)
    key_names = [f"{_INTERNAL}z{i}" for i in range(len(zs))]
    out = out.select(*[F.col(_q(c)) for c in df.columns], *[z.alias(k) for z, k in zip(zs, key_names)])
    return out, key_names


def curve_keys(df: DataFrame, columns: Sequence[str], curve: str = "zorder",
               num_ranges: int = DEFAULT_NUM_RANGES, seed: int = 42,
               total_rows: int | None = None) -> tuple[DataFrame, list[str]]:
    """`df` plus the curve's sort key columns (longs, most significant first)."""
    if curve not in CURVES:
        raise ValueError(f"unknown clustering curve {curve!r}; allowed: {', '.join(CURVES)}")
    return _curve(fit_ranges(df, columns, num_ranges, seed=seed, total_rows=total_rows), df, curve)


def _layout(keyed: DataFrame, keys: list[str], num_files: int, partition_columns: Sequence[str],
            columns: list[str], seed: int) -> DataFrame:
    parts = [F.col(_q(c)) for c in partition_columns]
    noise = f"{_INTERNAL}noise"
    keyed = keyed.select("*", (F.rand(seed) * 256).cast("int").alias(noise))
    ordered = keyed.repartitionByRange(max(1, int(num_files)), *parts, *[F.col(k) for k in keys], F.col(noise))
    ordered = ordered.sortWithinPartitions(*parts, *[F.col(k) for k in keys])
    return ordered.select(*[F.col(_q(c)) for c in columns])


def cluster(df: DataFrame, columns: Sequence[str], num_files: int, curve: str = "zorder",
            partition_columns: Sequence[str] = (), num_ranges: int = DEFAULT_NUM_RANGES,
            seed: int = 42, total_rows: int | None = None) -> DataFrame:
    """`df` with its rows laid out along the curve: range-partitioned on (table partition columns,
    curve key, a noise byte) into `num_files` Spark partitions, each sorted by the curve key. The
    columns are those of `df`."""
    keyed, keys = curve_keys(df, columns, curve, num_ranges, seed, total_rows)
    return _layout(keyed, keys, num_files, partition_columns, df.columns, seed)


def cluster_parts(parts: Sequence[tuple[DataFrame, int]], columns: Sequence[str], curve: str = "zorder",
                  partition_columns: Sequence[str] = (), num_ranges: int = DEFAULT_NUM_RANGES,
                  seed: int = 42, total_rows: int | None = None) -> DataFrame:
    """Several frames (e.g. one per table partition), each laid out along the curve into its own number
    of files, with range ids fitted once over all of them. A Spark partition of the result never mixes
    two input frames, so no output file straddles two table partitions."""
    from functools import reduce
    frames = [f for f, _ in parts]
    union = reduce(DataFrame.union, frames)
    model = fit_ranges(union, columns, num_ranges, seed=seed, total_rows=total_rows)
    out = []
    for frame, n in parts:
        keyed, keys = _curve(model, frame, curve)
        out.append(_layout(keyed, keys, n, partition_columns, frame.columns, seed))
    return reduce(DataFrame.union, out)


def linear_sort(df: DataFrame, columns: Sequence[str], num_files: int,
                partition_columns: Sequence[str] = ()) -> DataFrame:
    """The baseline: rows range-partitioned and sorted on the columns in order (ORDER BY a, b, c)."""
    keys = [F.col(_q(c)) for c in (*partition_columns, *columns)]
    return df.repartitionByRange(max(1, int(num_files)), *keys).sortWithinPartitions(*keys)
