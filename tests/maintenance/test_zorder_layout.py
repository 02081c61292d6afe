"""The clustering layout places rows by file ids computed from the range sample: the sample's curve
keys (numpy) must equal Spark's, hash targets must land where Spark's hash partitioning sends them,
and each output Spark partition must hold one contiguous, balanced slice of the curve."""
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

from deltalog.spark import zorder  # noqa: E402

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
    assert counts[0] > 0.6 * 5000 and counts[-1] < 1.4 * 5000, counts
    assert out.count() == 40_000 and out.select("id").distinct().count() == 40_000
