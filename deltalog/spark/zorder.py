"""Multi-dimensional clustering as Spark expressions: Z-order (Delta's approach) and a Hilbert curve.

Each clustering column is mapped to a *range id*: its rank among boundaries sampled from the data
(1,000 ranges by default). Ranks, unlike raw values, spread every column evenly over the same number
of bits, whatever its type or skew, and strings with a long common prefix are ranked on the part where
they differ. The ids' bits are then combined into one sort key — interleaved (MSB first, round-robin)
for Z-order, or Skilling's transform to the Hilbert curve's transposed form and then interleaved —
and the rows are split on that key (plus a noise byte, against skew) into a set number of files and
sorted within each, so both files and Parquet row groups hold compact boxes of the space. The files'
key ranges come from the same sample as the column ranges (its keys computed with numpy, step for step
like the Spark expressions): one sampling job and one shuffle, where repartitionByRange would sample
the whole input again.

Everything per row is a Spark expression or JVM code: values become order-preserving doubles
(numbers, dates, timestamps; strings via the bytes after their sampled common prefix), ranks come from
`Bucketizer` (a binary search on the JVM), bits from shifts and masks. No Python runs per row. Where
the session's tasks can load this package's jar (the embedded local Spark), ranks, string keys and
(for up to 62 bits of ids) curve keys come from its `io.deltalog.cluster` classes instead: the same
numbers, ranks 8x cheaper (a branch-free search, strings keyed straight from their bytes), and one
small class the JIT compiles once per JVM where the projections generate a large method per query.
"""
from __future__ import annotations

import os
import struct
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.lazy_imports import load

load("spark")  # pyspark whole before any import from it (lazy_imports.py says why)
from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.types import (
    BooleanType, ByteType, DateType, DecimalType, DoubleType, FloatType, IntegerType, LongType, ShortType,
    StringType, TimestampNTZType, TimestampType,
)

from .embedded import jar_function, runs_jar_classes

DEFAULT_NUM_RANGES = 1000
DEFAULT_SAMPLE_ROWS = 100_000
MOSTLY_DISTINCT = 0.5  # share of distinct sampled values above which a column gets no Parquet dictionary
CURVES = ("zorder", "hilbert")
_KEY_BYTES = 6  # bytes of a string (after its common prefix) in its sort key: 48 bits, exact in a double
_CHUNK_BITS = 62  # bits of the curve key per long column (non-negative longs sort like the bits)
_INTERNAL = "__deltalog_cluster_"
# A file cut moves to a curve-cell boundary at most this share of a file's rows away: as far as the
# sampling noise of a quantile (about 0.4 file at 256 files from 100,000 sampled rows).
SNAP_TOLERANCE = 0.5
_PART_KEY_BITS = 45  # leading curve bits in the file key; with a noise byte below, exact in a double


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _common_prefix(values: pa.ChunkedArray) -> str:
    """The prefix all the strings share: that of the smallest and the largest."""
    bounds = pc.min_max(values).as_py()
    if bounds["min"] is None:
        return ""
    return os.path.commonprefix([bounds["min"], bounds["max"]])


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
        # Spark compares strings by their UTF-8 bytes, so the big-endian number of the first bytes after
        # the prefix keeps order. hex/rpad/conv is the cheapest spelling found (2x faster than
        # encode/concat/unhex on 10M rows).
        key = F.conv(F.rpad(F.hex(F.substring(c, n + 1, _KEY_BYTES)), 2 * _KEY_BYTES, "0"), 16, 10).cast("double")
        if not n:
            return key  # null stays null
        return (F.when(c.startswith(F.lit(prefix)), key)
                .when(c.isNull(), F.lit(None).cast("double"))
                .when(c < F.lit(prefix), F.lit(-1.0))
                .otherwise(F.lit(float(1 << (8 * _KEY_BYTES)))))
    raise TypeError(f"column {column!r} of type {dtype.simpleString()} cannot be clustered; cluster on "
                    f"numbers, strings, dates, timestamps or booleans")


def boundaries(keys: "np.ndarray", num_ranges: int) -> list[float]:
    """At most num_ranges-1 strictly increasing cut points splitting the keys into equal parts."""
    import numpy as np
    vals = np.sort(keys[~np.isnan(keys)])
    if not len(vals):
        return []
    picks = vals[np.minimum(len(vals) - 1, (len(vals) * np.arange(1, num_ranges)) // num_ranges)]
    return np.unique(picks).tolist()


def sample_keys(values: pa.ChunkedArray | pa.Array, dtype, prefix: str | None) -> "np.ndarray":
    """`order_key` of sampled values (as Spark's `toArrow` gives them), as float64; null is NaN."""
    import numpy as np
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(dtype, StringType):
        return np.array([np.nan if v is None else _python_key(v, dtype, prefix) for v in values.to_pylist()],
                        dtype=np.float64)
    if isinstance(dtype, BooleanType):
        values = pc.cast(values, pa.int8())
    elif isinstance(dtype, DateType):
        values = pc.cast(values, pa.int32())
    elif isinstance(dtype, (TimestampType, TimestampNTZType)):
        values = pc.cast(pc.cast(values, pa.timestamp("us", values.type.tz)), pa.int64())  # UTC micros
    values = pc.cast(values, pa.float64(), safe=False)
    return values.to_numpy(zero_copy_only=False)  # nulls become NaN


class RangeModel:
    """Per clustering column, the cut points of its ranges (and for strings the common prefix skipped),
    fitted on a sample so that several frames can be ranked the same way."""

    def __init__(self, columns: Sequence[str], prefixes: dict[str, str], splits: dict[str, list[float]],
                 num_ranges: int, sample_keys: "dict[str, np.ndarray] | None" = None,
                 sample_frames: "np.ndarray | None" = None):
        self.columns = list(columns)
        self.prefixes = prefixes
        self.splits = splits
        self.bits = max(1, (num_ranges - 1).bit_length())
        # The sampled rows' order keys: their curve keys give the files' boundaries without sampling again.
        self.sample_keys = sample_keys or {}
        self.sample_frames = sample_frames

    def mostly_distinct(self, share: float = MOSTLY_DISTINCT) -> list[str]:
        """Clustering columns whose sampled values are at least `share` distinct: a Parquet dictionary
        of them would hold nearly every value, costing write time and saving no space."""
        import numpy as np
        out = []
        for c in self.columns:
            keys = self.sample_keys.get(c)
            if keys is None:
                continue
            keys = keys[~np.isnan(keys)]
            # strings are keyed on a few bytes, so this undercounts them: the safe side (keep the dictionary)
            if len(keys) and len(np.unique(keys)) >= share * len(keys):
                out.append(c)
        return out

    def sample_range_ids(self, rows: "np.ndarray | None" = None) -> list["np.ndarray"]:
        """The range ids `with_range_ids` gives the sampled rows (Bucketizer's rule: splits[i] <= x <
        splits[i+1], +inf in the last range), as int64 arrays."""
        import numpy as np
        out = []
        for c in self.columns:
            keys = self.sample_keys.get(c, np.zeros(0))
            keys = np.where(np.isnan(keys), -np.inf, keys)  # as `with_range_ids`: nulls rank first
            if rows is not None:
                keys = keys[rows]
            splits = np.array(self.splits[c], dtype=np.float64)
            ids = np.clip(np.searchsorted(splits, keys, side="right") - 1, 0, len(splits) - 2).astype(np.int64)
            out.append(np.minimum((ids << self.bits) // (len(splits) - 1), (1 << self.bits) - 1))
        return out

    def with_range_ids(self, df: DataFrame) -> tuple[DataFrame, list[str]]:
        """`df` plus one int column per clustering column: the value's range id, nulls in range 0.

        Ids are spread over the whole `bits`-bit space (range i of n becomes i * 2^bits / n), so each
        leading bit halves every column's rows exactly, whatever its number of ranges: curve cells then
        hold equal shares of the rows, and file cuts can fall on cell boundaries."""
        id_names = [f"{_INTERNAL}rid{i}" for i in range(len(self.columns))]
        if runs_jar_classes(df.sparkSession):
            ids = [self._jar_range_id(df, c).alias(rid) for c, rid in zip(self.columns, id_names)]
            return df.select("*", *ids), id_names
        load("spark_ml")
        from pyspark.ml.feature import Bucketizer  # JVM-side binary search (importing pyspark.ml takes ~1 s)
        key_names = [f"{_INTERNAL}key{i}" for i in range(len(self.columns))]
        out = df.select("*", *[F.coalesce(order_key(df, c, self.prefixes.get(c)), F.lit(float("-inf"))).alias(k)
                               for c, k in zip(self.columns, key_names)])
        for c, k, rid in zip(self.columns, key_names, id_names):
            out = Bucketizer(splits=self.splits[c], inputCol=k, outputCol=rid + "_d",
                             handleInvalid="keep").transform(out)
            n = len(self.splits[c]) - 1
            spread = F.floor(F.col(rid + "_d") * F.lit(float(1 << self.bits)) / F.lit(float(n)))
            out = out.withColumn(rid, F.least(spread, F.lit((1 << self.bits) - 1)).cast("int")).drop(rid + "_d", k)
        return out, id_names

    def _jar_range_id(self, df: DataFrame, column: str) -> Column:
        """`with_range_ids`' id of `column` computed by the jar's classes (same numbers)."""
        cuts = _packed_doubles(self.splits[column][1:-1])  # the splits without their -inf and +inf
        if isinstance(df.schema[column].dataType, StringType):
            prefix = (self.prefixes.get(column) or "").encode("utf-8")
            range_id = jar_function(df.sparkSession, "cluster.StringRangeId", bytearray(prefix), cuts, self.bits)
            return range_id(F.col(_q(column)).cast("binary"))
        return jar_function(df.sparkSession, "cluster.RangeId", cuts, self.bits)(order_key(df, column))


def _packed_doubles(values: Sequence[float]) -> bytearray:
    """Big-endian doubles: how cut points reach the JVM classes in one call."""
    return bytearray(struct.pack(f">{len(values)}d", *values))


def fit_ranges(df: DataFrame, columns: Sequence[str], num_ranges: int = DEFAULT_NUM_RANGES,
               sample_rows: int = DEFAULT_SAMPLE_ROWS, seed: int = 42, total_rows: int | None = None,
               frame_column: str | None = None) -> RangeModel:
    """Sample `df` (one Spark job) and cut each column's values into `num_ranges` ranges of equal row
    counts. `total_rows` (e.g. from the files' stats) saves counting the rows first. `frame_column`
    (an int column) is kept per sampled row, to tell apart frames sampled as one union."""
    total = total_rows if total_rows is not None else df.count()
    fraction = min(1.0, sample_rows / max(total, 1))
    sample_df = df.select(*[_q(c) for c in columns], *([F.col(frame_column)] if frame_column else []))
    if fraction < 1.0:
        sample_df = sample_df.sample(False, fraction, seed)
    sample = sample_df.toArrow()  # Arrow, not Row objects: the sample reaches numpy in one piece
    prefixes: dict[str, str] = {}
    splits = {}
    keys_by_column = {}
    for i, c in enumerate(columns):
        dtype = df.schema[c].dataType
        if isinstance(dtype, StringType):
            prefixes[c] = _common_prefix(sample.column(i))
        order_key(df, c, prefixes.get(c))  # refuses types that cannot be clustered
        keys = sample_keys(sample.column(i), dtype, prefixes.get(c))
        keys_by_column[c] = keys
        cuts = [x for x in boundaries(keys, num_ranges) if x not in (float("-inf"), float("inf"))]
        splits[c] = [float("-inf")] + cuts + [float("inf")] if cuts else [float("-inf"), 0.0, float("inf")]
    frames = sample.column(len(columns)).to_numpy(zero_copy_only=False) if frame_column else None
    return RangeModel(columns, prefixes, splits, num_ranges, keys_by_column, frames)


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
    """Skilling's AxestoTranspose (2004) on the range ids: afterwards the Hilbert index is the
    interleaving of the columns' bits. Returns (frame, transposed column names).

    One projection per step, each reading plain columns: composing a level's steps into one expression
    nests the first column's expression once per column (3^n copies), which makes the generated code
    too big to compile and Spark falls back to interpreting it."""
    n = len(id_names)
    xs = [f"{_INTERNAL}h{i}" for i in range(n)]
    others = [F.col(_q(c)) for c in df.columns]
    df = df.select(*others, *[F.col(c).cast("long").alias(x) for c, x in zip(id_names, xs)])
    if n == 1:
        return df, xs

    def step(updates: dict[str, Column]) -> DataFrame:
        return df.select(*others, *[updates[v].alias(v) if v in updates else F.col(v) for v in xs])

    m = 1 << (bits - 1)
    q = m
    while q > 1:
        p = F.lit(q - 1)
        level = (q).bit_length() - 1
        x0 = F.col(xs[0])
        df = step({xs[0]: F.when(x0.bitwiseAND(F.lit(q)) != 0, x0.bitwiseXOR(p)).otherwise(x0)})
        for i in range(1, n):
            x0, xi = F.col(xs[0]), F.col(xs[i])
            high = F.shiftright(xi, level).bitwiseAND(F.lit(1)) != 0
            t = x0.bitwiseXOR(xi).bitwiseAND(p)
            df = step({xs[0]: x0.bitwiseXOR(F.when(high, p).otherwise(t)),
                       xs[i]: F.when(high, xi).otherwise(xi.bitwiseXOR(t))})
        q >>= 1
    for i in range(1, n):  # Gray encode
        df = step({xs[i]: F.col(xs[i]).bitwiseXOR(F.col(xs[i - 1]))})
    last = F.col(xs[n - 1])
    t = F.lit(0).cast("long")
    q = m
    while q > 1:
        t = t.bitwiseXOR(F.when(last.bitwiseAND(F.lit(q)) != 0, F.lit(q - 1)).otherwise(F.lit(0)))
        q >>= 1
    tn = f"{_INTERNAL}t"
    df = df.select("*", t.alias(tn))
    df = df.select(*others, *[F.col(v).bitwiseXOR(F.col(tn)).alias(v) for v in xs])
    return df, xs


def _np_hilbert_transpose(ids: list, bits: int) -> list:
    """`hilbert_transpose` on numpy int64 arrays (the sampled rows), step for step."""
    import numpy as np
    x = [a.astype(np.int64) for a in ids]
    n = len(x)
    if n == 1:
        return x
    m = 1 << (bits - 1)
    q = m
    while q > 1:
        p = q - 1
        for i in range(n):
            high = (x[i] & q) != 0
            if i == 0:
                x[0] = np.where(high, x[0] ^ p, x[0])
                continue
            t = (x[0] ^ x[i]) & p
            x[0], x[i] = np.where(high, x[0] ^ p, x[0] ^ t), np.where(high, x[i], x[i] ^ t)
        q >>= 1
    for i in range(1, n):
        x[i] = x[i] ^ x[i - 1]
    t = np.zeros_like(x[0])
    q = m
    while q > 1:
        t = t ^ np.where((x[n - 1] & q) != 0, q - 1, 0)
        q >>= 1
    return [v ^ t for v in x]


def _np_first_chunk(ids: list, bits: int) -> tuple:
    """The first long of `interleave_bits` for numpy int64 arrays, and its width in bits."""
    import numpy as np
    total = bits * len(ids)
    width = min(_CHUNK_BITS, total)
    acc = np.zeros(len(ids[0]) if ids else 0, dtype=np.int64)
    pos = 0
    for b in range(bits - 1, -1, -1):
        for a in ids:
            if pos >= width:
                return acc, width
            acc |= ((a >> b) & 1) << (width - 1 - pos)
            pos += 1
    return acc, width


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's Murmur3Hash of an int column (`hash(int)`, also what HashPartitioning uses)."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask
    k1 = (value & mask) * 0xCC9E2D51 & mask
    k1 = rotl(k1, 15) * 0x1B873593 & mask
    h1 = seed ^ k1
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def hash_targets(n: int) -> list[int]:
    """For each Spark partition p < n, an int whose hash partitioning sends it to p: so a
    `repartition(n, col)` on the mapped partition ids places every row exactly, with no sampling job
    (which `repartitionByRange` would run over the whole input)."""
    out: dict[int, int] = {}
    v = 0
    while len(out) < n:
        out.setdefault(_murmur3_int(v) % n, v)  # Python's % is Spark's pmod for n > 0
        v += 1
    return [out[p] for p in range(n)]


def _partition_key(keyed: DataFrame, first_key: str, width: int, seed: int) -> tuple[Column, int]:
    """A double that orders rows like the curve's leading bits, with a noise byte below them so heavy
    duplicates of a key still spread over several files. Returns (expression, bits dropped)."""
    drop = max(0, width - _PART_KEY_BITS)
    noise = (F.rand(seed) * 256).cast("long")
    return (F.shiftright(F.col(first_key), drop) * F.lit(256) + noise).cast("double"), drop


def _file_cuts(sample_ids: list, bits: int, curve: str, num_files: int, drop: int, seed: int) -> list[float]:
    """Cut points of the partition key splitting the sampled rows into `num_files` about equal parts.

    Each cut moves to the coarsest curve-cell boundary within SNAP_TOLERANCE of a file's rows from
    it, keeping every file between 0.5x and 1.5x its share: a file that crosses a cell boundary by a
    few rows spans both cells, which doubles its min/max range in some column and stops it being
    skipped. At an aligned boundary the noise byte plays no
    part, so the file holds exactly whole cells."""
    import numpy as np
    if not len(sample_ids) or not len(sample_ids[0]) or num_files <= 1:
        return []
    ids = _np_hilbert_transpose(sample_ids, bits) if curve == "hilbert" else sample_ids
    first, width = _np_first_chunk(ids, bits)
    base = np.sort(first >> drop)  # the partition key without its noise byte
    noise = np.random.default_rng(seed).integers(0, 256, len(first), dtype=np.int64)
    keys = np.sort(((first >> drop) * 256 + noise).astype(np.float64))
    level_bits = width - drop
    per_file = len(keys) / num_files
    picks, shift_before = [], 0.0  # shift: how far (in files) the previous cut moved
    for q in (len(keys) * np.arange(1, num_files)) // num_files:
        cut, shift_here = float(keys[q]), 0.0
        for level in range(1, level_bits + 1):
            shift = level_bits - level
            aligned = ((int(base[q]) + (1 << shift >> 1)) >> shift) << shift  # nearest cell boundary
            moved = (int(np.searchsorted(base, aligned)) - int(q)) / per_file
            # within the sampling noise, and the file before it stays between 0.5x and 1.5x its share
            if abs(moved) <= SNAP_TOLERANCE and abs(moved - shift_before) <= SNAP_TOLERANCE:
                cut, shift_here = float(aligned * 256), moved
                break
        picks.append(cut)
        shift_before = shift_here
    return sorted(set(picks))


def _with_file_ids(model: RangeModel, frame: DataFrame, curve: str, num_files: int, offset: int,
                   sample_rows: "np.ndarray | None", seed: int) -> tuple[DataFrame, list[str]]:
    """`frame` with its curve keys and the output file (offset + rank of its partition key among the
    cut points sampled for this frame) as an int column."""
    keyed, keys = _curve(model, frame, curve)
    width = min(_CHUNK_BITS, model.bits * len(model.columns))
    pkey, drop = _partition_key(keyed, keys[0], width, seed)
    cuts = _file_cuts(model.sample_range_ids(sample_rows), model.bits, curve, num_files, drop, seed)
    fid = f"{_INTERNAL}file"
    if not cuts:
        return keyed.withColumn(fid, F.lit(offset).cast("int")), keys
    if runs_jar_classes(frame.sparkSession):
        rank = jar_function(frame.sparkSession, "cluster.Rank", _packed_doubles(cuts))(pkey)
        return keyed.withColumn(fid, (rank + F.lit(offset)).cast("int")), keys
    load("spark_ml")
    from pyspark.ml.feature import Bucketizer
    pk = f"{_INTERNAL}pkey"
    keyed = keyed.withColumn(pk, pkey)
    keyed = Bucketizer(splits=[float("-inf")] + cuts + [float("inf")], inputCol=pk, outputCol=fid + "_d",
                       handleInvalid="keep").transform(keyed)
    keyed = keyed.withColumn(fid, (F.col(fid + "_d") + F.lit(offset)).cast("int")).drop(fid + "_d", pk)
    return keyed, keys


def _place(frames: list[DataFrame], keys: list[str], total_files: int, columns: list[str]) -> DataFrame:
    """One shuffle: each row to the Spark partition its file id names, then sorted by the curve key."""
    from functools import reduce
    fid = f"{_INTERNAL}file"
    union = reduce(DataFrame.union, frames)
    targets = hash_targets(total_files)
    target = F.element_at(F.array(*[F.lit(v) for v in targets]), F.col(fid) + 1).cast("int")
    placed = union.repartition(total_files, target.alias(f"{_INTERNAL}target"))
    return placed.sortWithinPartitions(*[F.col(k) for k in keys]).select(*[F.col(_q(c)) for c in columns])


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
    n, bits = len(id_names), model.bits
    if n * bits <= _CHUNK_BITS and runs_jar_classes(df.sparkSession):  # one long: the jar's CurveKey
        packed = F.lit(0).cast("long")
        for i, c in enumerate(id_names):
            packed = packed.bitwiseOR(F.shiftleft(F.col(c).cast("long"), bits * (n - 1 - i)))
        curve_key = jar_function(df.sparkSession, "cluster.CurveKey", curve == "hilbert", n, bits, returns="LongType")
        key = f"{_INTERNAL}z0"
        return out.select(*[F.col(_q(c)) for c in df.columns], curve_key(packed).alias(key)), [key]
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
            seed: int = 42, total_rows: int | None = None) -> tuple[DataFrame, RangeModel]:
    """`df` with its rows laid out along the curve into `num_files` Spark partitions, each sorted by
    the curve key, and the ranges fitted for it. Without table partition columns, the files' key ranges come from the same sample
    as the column ranges; with them, rows are range-partitioned on (partition columns, curve key, a
    noise byte). The columns are those of `df`."""
    if curve not in CURVES:
        raise ValueError(f"unknown clustering curve {curve!r}; allowed: {', '.join(CURVES)}")
    n = max(1, int(num_files))
    model = fit_ranges(df, columns, num_ranges, seed=seed, total_rows=total_rows)
    if partition_columns:
        keyed, keys = _curve(model, df, curve)
        return _layout(keyed, keys, n, partition_columns, df.columns, seed), model
    keyed, keys = _with_file_ids(model, df, curve, n, 0, None, seed)
    return _place([keyed], keys, n, df.columns), model


def cluster_parts(parts: Sequence[tuple[DataFrame, int]], columns: Sequence[str], curve: str = "zorder",
                  partition_columns: Sequence[str] = (), num_ranges: int = DEFAULT_NUM_RANGES,
                  seed: int = 42, total_rows: int | None = None) -> tuple[DataFrame, RangeModel]:
    """Several frames (e.g. one per table partition), each laid out along the curve into its own number
    of files, with range ids fitted once over all of them (one sampling job) and all frames placed by
    one shuffle. A Spark partition of the result never mixes two input frames, so no output file
    straddles two table partitions."""
    import numpy as np
    from functools import reduce
    if curve not in CURVES:
        raise ValueError(f"unknown clustering curve {curve!r}; allowed: {', '.join(CURVES)}")
    frame_col = f"{_INTERNAL}frame"
    union = reduce(DataFrame.union, [f.select("*", F.lit(i).alias(frame_col)) for i, (f, _) in enumerate(parts)])
    model = fit_ranges(union, columns, num_ranges, seed=seed, total_rows=total_rows, frame_column=frame_col)
    sampled = np.asarray(model.sample_frames if model.sample_frames is not None else [], dtype=np.int64)
    keyed_frames, keys, offset = [], [], 0
    for i, (frame, n) in enumerate(parts):
        n = max(1, int(n))
        keyed, keys = _with_file_ids(model, frame, curve, n, offset, np.flatnonzero(sampled == i), seed)
        keyed_frames.append(keyed)
        offset += n
    return _place(keyed_frames, keys, offset, parts[0][0].columns), model


def linear_sort(df: DataFrame, columns: Sequence[str], num_files: int,
                partition_columns: Sequence[str] = ()) -> DataFrame:
    """The baseline: rows range-partitioned and sorted on the columns in order (ORDER BY a, b, c)."""
    keys = [F.col(_q(c)) for c in (*partition_columns, *columns)]
    return df.repartitionByRange(max(1, int(num_files)), *keys).sortWithinPartitions(*keys)
