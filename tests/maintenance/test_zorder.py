"""The clustering layout places rows by file ids computed from the range sample: the sample's curve
keys (numpy) must equal Spark's, hash targets must land where Spark's hash partitioning sends them,
and each output Spark partition must hold one contiguous, balanced slice of the curve."""
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

from deltalog.expressions import prune_snapshot  # noqa: E402
from deltalog.snapshot import Snapshot  # noqa: E402
from deltalog.spark import zorder  # noqa: E402
from deltalog.spark.operations import write_dataframe  # noqa: E402
from deltalog.spark.optimize import optimize  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("curve", ["zorder", "hilbert"])
@pytest.mark.parametrize("ncols,bits", [(1, 10), (4, 10), (7, 3)])
def test_sample_curve_keys_match_spark(spark, curve, ncols, bits):
    rng = np.random.default_rng(ncols * 100 + bits)
    ids = [rng.integers(0, 1 << bits, 300, dtype=np.int64) for _ in range(ncols)]
    names = [f"c{i}" for i in range(ncols)]
    df = spark.createDataFrame([tuple(int(a[r]) for a in ids) for r in range(300)],
                               ", ".join(f"{n} long" for n in names))
    cols = names
    if curve == "hilbert":
        df, cols = zorder.hilbert_transpose(df, names, bits)
        ids = zorder._np_hilbert_transpose(ids, bits)
    first = zorder.interleave_bits([F.col(c) for c in cols], bits)[0]
    spark_keys = [r[0] for r in df.select(first).collect()]
    np_keys, _ = zorder._np_first_chunk(ids, bits)
    assert spark_keys == np_keys.tolist()


def test_hash_targets_land_in_their_partition(spark):
    n = 37
    targets = zorder.hash_targets(n)
    df = spark.createDataFrame([(p, v) for p, v in enumerate(targets)], "p int, v int")
    got = df.repartition(n, "v").select("p", F.spark_partition_id().alias("pid")).collect()
    assert sorted((r["p"], r["pid"]) for r in got) == [(p, p) for p in range(n)]


@pytest.mark.parametrize("curve", ["zorder", "hilbert"])
def test_cluster_gives_balanced_sorted_slices(spark, curve):
    df = spark.range(0, 40_000).select((F.rand(1) * 1000).cast("long").alias("a"),
                                       (F.pow(F.rand(2), 4) * 1000).cast("long").alias("b"),
                                       F.col("id"))
    out, _ = zorder.cluster(df, ["a", "b"], 8, curve, total_rows=40_000)
    parts = out.select("id", F.spark_partition_id().alias("pid")).groupBy("pid").count().collect()
    counts = sorted(r["count"] for r in parts)
    assert len(counts) == 8 and sum(counts) == 40_000
    # cuts move to curve-cell boundaries, keeping each file within 0.5x..1.5x of its share
    assert counts[0] >= 0.45 * 5000 and counts[-1] <= 1.55 * 5000, counts
    assert out.count() == 40_000 and out.select("id").distinct().count() == 40_000


@pytest.mark.parametrize("curve", ["zorder", "hilbert"])
def test_files_hold_whole_curve_cells(spark, tmp_path, curve):
    """16 files on two uniform columns: each file should be one cell of a 4x4 grid, so a point on
    either column falls in the min/max range of a quarter of the files (75 % pruned). Cuts placed
    by sampled quantiles alone leave files straddling cells by a few rows, with twice the range."""
    import random

    from deltalog.expressions import col
    uri = str(tmp_path / curve)
    df = spark.range(0, 64_000).select((F.rand(1) * 10_000).cast("long").alias("a"),
                                       (F.rand(2) * 10_000).cast("long").alias("b"))
    write_dataframe(df.repartition(8), uri, mode="append")
    optimize(spark, uri, zorder_by=["a", "b"], curve=curve, target_files=16)
    snap = Snapshot.load(uri)
    assert snap.num_files == 16
    rng = random.Random(3)
    for c in ("a", "b"):
        read = [prune_snapshot(snap, col(c) == rng.randrange(10_000)).to_pylist().count(True) / 16
                for _ in range(40)]
        assert sum(read) / len(read) <= 0.28, (c, read)


def _edge_case_frame(spark):
    import datetime as dt
    rows = [("k-aé中b", 5, 2.5, dt.date(2020, 3, 1), dt.datetime(2021, 5, 6, 7, 8, 9, 123456), True),
            ("k-", -3, -0.5, dt.date(1969, 12, 31), dt.datetime(1960, 1, 1), False),
            ("k", 0, float("nan"), dt.date(2000, 1, 1), dt.datetime(2000, 1, 1), None),  # shorter than the prefix
            ("j-zzz", 1 << 40, float("inf"), None, None, True),  # below the prefix
            ("l", -(1 << 40), float("-inf"), dt.date(2000, 1, 2), dt.datetime(2000, 1, 2), False),  # above it
            ("k-zzzzzzzzzz", None, None, dt.date(1, 1, 1), dt.datetime(9999, 1, 1), True),
            (None, 7, 0.0, dt.date(9999, 12, 31), dt.datetime(1970, 1, 1), None)]
    rng = np.random.default_rng(3)
    for i in range(2000):
        rows.append((f"k-{rng.integers(0, 10 ** rng.integers(1, 9))}", int(rng.integers(-1000, 1000)),
                     float(rng.normal()), dt.date(2000, 1, 1) + dt.timedelta(days=int(rng.integers(0, 9000))),
                     dt.datetime(2000, 1, 1) + dt.timedelta(seconds=int(rng.integers(0, 10 ** 9))),
                     bool(rng.integers(0, 2))))
    return spark.createDataFrame(rows, "s string, i long, f double, d date, t timestamp, b boolean")


@pytest.mark.parametrize("num_ranges", [1000, 7])
def test_jar_range_ids_equal_the_portable_expressions(spark, monkeypatch, num_ranges):
    """The embedded session ranks values with the jar's classes; clusters use Bucketizer and Spark
    expressions. Both must give every row the same range id, or one table would be laid out two ways."""
    from deltalog.spark.embedded import runs_jar_classes
    assert runs_jar_classes(spark)
    df = _edge_case_frame(spark).withColumn("row", F.monotonically_increasing_id())
    columns = ["s", "i", "f", "d", "t", "b"]
    # fitted on the regular rows, so the edge cases fall below, above and outside the ranges
    model = zorder.fit_ranges(df.where("row >= 7"), columns, num_ranges=num_ranges, sample_rows=500, seed=5)
    assert model.prefixes["s"] == "k-"
    ids = {}
    for jar in (True, False):
        monkeypatch.setattr(zorder, "runs_jar_classes", lambda _spark, jar=jar: jar)
        out, names = model.with_range_ids(df)
        ids[jar] = sorted(tuple(r) for r in out.select("row", *names).collect())
    assert ids[True] == ids[False]
    spread = {c: len({r[i + 1] for r in ids[True]}) for i, c in enumerate(columns)}
    assert spread["s"] > 3 and spread["i"] > 3 and spread["b"] >= 2, spread


@pytest.mark.parametrize("curve", ["zorder", "hilbert"])
def test_jar_file_ids_equal_the_portable_expressions(spark, monkeypatch, curve):
    df = spark.range(0, 30_000).select((F.rand(1) * 1000).cast("long").alias("a"),
                                       F.concat(F.lit("user-"), (F.rand(2) * 1e6).cast("long").cast("string")).alias("s"),
                                       F.col("id"))
    placed = {}
    for jar in (True, False):
        monkeypatch.setattr(zorder, "runs_jar_classes", lambda _spark, jar=jar: jar)
        out, _ = zorder.cluster(df, ["a", "s"], 6, curve, total_rows=30_000)
        placed[jar] = sorted(tuple(r) for r in out.select("id", F.spark_partition_id()).collect())
    assert placed[True] == placed[False]
    assert len({p for _, p in placed[True]}) == 6


@pytest.mark.parametrize("curve", ["zorder", "hilbert"])
@pytest.mark.parametrize("ncols,bits", [(1, 10), (2, 10), (4, 10), (6, 10), (7, 3)])
def test_jar_curve_keys_equal_the_portable_expressions(spark, monkeypatch, curve, ncols, bits):
    """The jar's CurveKey (ids packed in one long) gives the key the projections give."""
    rng = np.random.default_rng(ncols * 10 + bits)
    names = [f"c{i}" for i in range(ncols)]
    rows = [tuple(int(v) for v in rng.integers(0, 1 << bits, ncols)) for _ in range(400)]
    rows += [tuple([(1 << bits) - 1] * ncols), tuple([0] * ncols)]
    df = spark.createDataFrame(rows, ", ".join(f"{n} long" for n in names)).withColumn("row", F.monotonically_increasing_id())

    class Ids(zorder.RangeModel):  # range ids are the columns themselves
        def with_range_ids(self, frame):
            return frame.select("*", *[F.col(c).cast("int").alias(f"rid_{c}") for c in names]), \
                [f"rid_{c}" for c in names]

    model = Ids(names, {}, {c: [float("-inf"), float("inf")] for c in names}, 1 << bits)
    assert model.bits == bits
    keys = {}
    for jar in (True, False):
        monkeypatch.setattr(zorder, "runs_jar_classes", lambda _spark, jar=jar: jar)
        out, key_names = zorder._curve(model, df, curve)
        assert len(key_names) == 1
        keys[jar] = sorted(tuple(r) for r in out.select("row", *key_names).collect())
    assert keys[True] == keys[False]
    assert len({k for _, k in keys[True]}) > 300
