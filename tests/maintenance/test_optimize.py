"""OPTIMIZE on a real Spark session: compaction, Z-order and Hilbert clustering (pruning measured with
min/max stats), the no-op and incremental re-runs, the commit's shape, validation; read back by
delta-rs."""
import json
import os

import deltalake
import pytest

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

from deltalog.errors import InvalidTableError  # noqa: E402
from deltalog.expressions import prune_snapshot  # noqa: E402
from deltalog.snapshot import Snapshot  # noqa: E402
from deltalog.spark.operations import write_dataframe  # noqa: E402
from deltalog.spark.optimize import optimize  # noqa: E402

pytestmark = pytest.mark.spark


def rows(uri):
    t = deltalake.DeltaTable(uri).to_pyarrow_table()
    return sorted(zip(t.column("a").to_pylist(), t.column("b").to_pylist(), t.column("s").to_pylist()))


def last_commit(uri):
    snap = Snapshot.load(uri)
    with open(os.path.join(uri, "_delta_log", "%020d.json" % snap.version)) as f:
        return [json.loads(line) for line in f if line.strip()]


def make_table(spark, uri, batches=4, rows_per=2000, files_per=4, partitioned=False):
    for i in range(batches):
        df = spark.range(i * rows_per, (i + 1) * rows_per).select(
            (F.col("id") * 7919 % 10007).alias("a"),
            (F.rand(i) * 1000).cast("long").alias("b"),
            F.concat(F.lit("customer-account-0000000-"), (F.col("id") * 31 % 5000).cast("string")).alias("s"),
            (F.col("id") % 2).alias("p"),
        )
        write_dataframe(df.repartition(files_per), uri, mode="append",
                        partition_by=["p"] if partitioned else None)


def pruned_fraction(uri, predicates):
    snap = Snapshot.load(uri)
    fractions = [prune_snapshot(snap, p).to_pylist().count(False) / snap.num_files for p in predicates]
    return sum(fractions) / len(fractions)


@pytest.fixture(scope="module")
def base_rows(spark, tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("base") / "t")
    make_table(spark, uri)
    return uri, rows(uri)


def test_compaction_bins_small_files_per_partition(spark, tmp_path):
    uri = str(tmp_path / "t")
    make_table(spark, uri, batches=2, rows_per=500, files_per=3, partitioned=True)
    before = Snapshot.load(uri)
    assert before.num_files == 12
    expected = rows(uri)
    v = optimize(spark, uri)
    after = Snapshot.load(uri)
    assert v == before.version + 1
    assert after.num_files == 2  # one file per partition
    assert rows(uri) == expected
    actions = last_commit(uri)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    assert json.loads(info["operationParameters"]["zOrderBy"]) == []
    m = info["operationMetrics"]
    assert m["numRemovedFiles"] == "12" and m["numAddedFiles"] == "2" and m["partitionsOptimized"] == "2"
    assert all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)
    # nothing small left: no commit
    assert optimize(spark, uri) is None
    # a max size below every file leaves single-file bins: nothing to do
    make_table(spark, uri, batches=1, rows_per=100, files_per=1, partitioned=True)
    assert optimize(spark, uri, max_file_size=10) is None


def test_zorder_prunes_better_and_reruns_are_cheap(spark, tmp_path, base_rows):
    uri = str(tmp_path / "t")
    make_table(spark, uri)
    predicates_a = [f"a >= {x} AND a < {x + 500}" for x in range(0, 10000, 1000)]
    predicates_s = [f"s = 'customer-account-0000000-{x}'" for x in range(0, 5000, 500)]
    before_a, before_s = pruned_fraction(uri, predicates_a), pruned_fraction(uri, predicates_s)
    v = optimize(spark, uri, zorder_by=["a", "s"], target_files=8)
    assert v is not None
    snap = Snapshot.load(uri)
    assert snap.num_files == 8
    assert rows(uri) == base_rows[1]
    after_a, after_s = pruned_fraction(uri, predicates_a), pruned_fraction(uri, predicates_s)
    assert after_a > before_a + 0.3 and after_s > before_s + 0.2, (before_a, after_a, before_s, after_s)
    info = last_commit(uri)[0]["commitInfo"]
    assert json.loads(info["operationParameters"]["zOrderBy"]) == ["a", "s"]
    tags = [dict(t) for t in snap.files.column("tags").to_pylist()]
    assert all(t["ZCUBE_ZORDER_BY"] == '["a", "s"]' for t in tags)

    # nothing new: no commit
    assert optimize(spark, uri, zorder_by=["a", "s"]) is None
    # a small append: only the new files are clustered
    make_table(spark, uri, batches=1, rows_per=500, files_per=3)
    new_bytes = sum(Snapshot.load(uri).files.column("size").to_pylist()) - sum(snap.files.column("size").to_pylist())
    optimize(spark, uri, zorder_by="a, s")
    m = last_commit(uri)[0]["commitInfo"]["operationMetrics"]
    assert int(m["numRemovedFiles"]) == 3 and int(m["numRemovedBytes"]) == new_bytes
    # other columns: everything is clustered again
    optimize(spark, uri, zorder_by=["b"])
    m = last_commit(uri)[0]["commitInfo"]["operationMetrics"]
    assert int(m["numRemovedFiles"]) == Snapshot.load(uri, version=Snapshot.load(uri).version - 1).num_files


def test_hilbert_clusters_too(spark, tmp_path, base_rows):
    uri = str(tmp_path / "t")
    make_table(spark, uri)
    predicates = [f"a >= {x} AND a < {x + 500} AND b >= {x // 10} AND b < {x // 10 + 300}"
                  for x in range(0, 9000, 1000)]
    before = pruned_fraction(uri, predicates)
    optimize(spark, uri, zorder_by=["a", "b"], curve="hilbert", target_files=8)
    assert pruned_fraction(uri, predicates) > before + 0.3
    assert rows(uri) == base_rows[1]
    info = last_commit(uri)[0]["commitInfo"]
    assert info["operationParameters"]["curve"] == "hilbert"
    assert optimize(spark, uri, zorder_by=["a", "b"], curve="hilbert") is None
    # the same columns with the other curve are not "already clustered"
    assert optimize(spark, uri, zorder_by=["a", "b"]) is not None


def test_where_rewrites_only_selected_partitions(spark, tmp_path):
    uri = str(tmp_path / "t")
    make_table(spark, uri, batches=2, rows_per=500, files_per=2, partitioned=True)
    before = Snapshot.load(uri)
    untouched = {r["path"] for r in before.files.to_pylist() if dict(r["partition_values"])["p"] == "0"}
    optimize(spark, uri, zorder_by=["a"], where="p = 1")
    after = Snapshot.load(uri)
    paths = {r["path"] for r in after.files.to_pylist()}
    assert untouched <= paths
    info = last_commit(uri)[0]["commitInfo"]
    assert json.loads(info["operationParameters"]["predicate"]) == ["`p` = 1"]
    assert info["operationMetrics"]["partitionsOptimized"] == "1"
    assert optimize(spark, uri, zorder_by=["a"], where="p = 1") is None
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 1000


def test_validation_names_table_column_and_what_is_allowed(spark, tmp_path):
    uri = str(tmp_path / "t")
    make_table(spark, uri, batches=1, rows_per=100, files_per=2, partitioned=True)
    version = Snapshot.load(uri).version
    with pytest.raises(InvalidTableError, match=r"'nope' does not exist.*Allowed.*a, b, s"):
        optimize(spark, uri, zorder_by=["nope"])
    with pytest.raises(InvalidTableError, match="'p' is a partition column"):
        optimize(spark, uri, zorder_by=["a", "p"])
    with pytest.raises(InvalidTableError, match="only use partition columns"):
        optimize(spark, uri, zorder_by=["a"], where="a > 3")
    with pytest.raises(InvalidTableError, match="curve"):
        optimize(spark, uri, zorder_by=["a"], curve="peano")
    # a column without statistics (beyond dataSkippingNumIndexedCols)
    uri2 = str(tmp_path / "t2")
    df = spark.range(10).select(F.col("id").alias("a"), F.col("id").alias("b"))
    write_dataframe(df, uri2, mode="append", configuration={"delta.dataSkippingNumIndexedCols": "1"})
    with pytest.raises(InvalidTableError, match="'b' has no statistics"):
        optimize(spark, uri2, zorder_by=["b"])
    assert Snapshot.load(uri).version == version


def test_order_keys_match_between_spark_and_the_sample(spark):
    """Range cut points come from sampled values keyed in Python; rows are keyed by Spark. Both must
    agree, or rows would land in the wrong ranges."""
    import datetime as dt

    import math

    from deltalog.spark.zorder import _python_key, order_key, sample_keys
    df = spark.createDataFrame(
        [("prefix-aé中b", dt.date(2020, 3, 1), dt.datetime(2021, 5, 6, 7, 8, 9, 123456), 5, 2.5, True),
         ("prefix-", dt.date(1969, 12, 31), dt.datetime(1960, 1, 1), -3, -0.5, False),
         ("prefiw-zzz", dt.date(2000, 1, 1), dt.datetime(2000, 1, 1), 0, 0.0, None),
         ("prefix-zzzzzzzzzz", None, None, None, None, None)],
        "s string, d date, t timestamp, i long, f double, b boolean")
    for c in df.columns:
        prefix = "prefix-" if c == "s" else None
        spark_keys = [r[0] for r in df.select(order_key(df, c, prefix)).collect()]
        py_keys = [_python_key(r[c], df.schema[c].dataType, prefix) for r in df.collect()]
        assert spark_keys == py_keys, c
        arrow_keys = sample_keys(df.select(c).toArrow().column(0), df.schema[c].dataType, prefix).tolist()
        assert [None if math.isnan(k) else k for k in arrow_keys] == spark_keys, c


@pytest.mark.parametrize("zorder_by", [["u", "s", "g"], None])
def test_mostly_distinct_columns_are_written_without_a_dictionary(spark, tmp_path, monkeypatch, zorder_by):
    """A dictionary of nearly unique values saves no space and costs write time; a column of few
    values keeps its dictionary. Clustering columns are judged by the sample, other fixed-width columns
    by how much their dictionary saved in the files rewritten. The rows are unchanged and delta-rs
    reads them."""
    import pyarrow.parquet as pq

    from deltalog.spark import optimize as optimize_module
    uri = str(tmp_path / "t")
    df = spark.range(20_000).select(
        F.col("id").alias("u"),
        F.concat(F.lit("order-"), F.col("id").cast("string")).alias("s"),
        (F.col("id") % 3).alias("g"),
        F.lit("same").alias("other"),
        (F.col("id") * 7919 % 20_011).alias("key"),  # unique, not clustered on
        (F.col("id") % 500).cast("double").alias("few"),  # 500 values, not clustered on
        F.when(F.col("id") % 10 == 0, F.col("id")).alias("sparse_ids"))  # unique where not null
    write_dataframe(df.repartition(4), uri, mode="append")
    if zorder_by is None:
        write_dataframe(df.limit(10), uri, mode="append")  # a small file, so compaction has work
    options = []
    real_write_files = optimize_module.write_files
    monkeypatch.setattr(optimize_module, "write_files",
                        lambda *a, **k: options.append(k["parquet_options"]) or real_write_files(*a, **k))
    optimize(spark, uri, zorder_by=zorder_by)
    plain = {k.split("#")[1] for k, v in options[0].items() if k.startswith("parquet.enable.dictionary#")}
    # strings are judged only by the sample, so only when clustered on
    assert plain == ({"u", "s", "key", "sparse_ids"} if zorder_by else {"u", "key", "sparse_ids"})
    snap = Snapshot.load(uri)
    for path in snap.files.column("path").to_pylist():
        meta = pq.read_metadata(os.path.join(uri, path))
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        has_dict = {n: meta.row_group(0).column(i).has_dictionary_page for i, n in enumerate(names)}
        assert {n: has_dict[n] for n in plain} == {n: False for n in plain}, path
        assert has_dict["g"] and has_dict["few"] and has_dict["other"], path
    t = deltalake.DeltaTable(uri).to_pyarrow_table()
    assert t.num_rows == (20_000 if zorder_by else 20_010)
    assert sorted(set(t.column("key").to_pylist())) == sorted(r[0] for r in df.select("key").collect())


def test_dictionary_free_columns_come_from_what_a_dictionary_saved(tmp_path):
    """Whoever wrote the files (here pyarrow, dictionaries on): unique fixed-width columns are named,
    repetitive ones, strings and nested fields are not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltalog.spark.writer import dictionary_free_columns
    n = 30_000
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "price": pa.array([i * 0.37 for i in range(n)], pa.float64()),
        "day": pa.array([i % 30 for i in range(n)], pa.int32()),
        "name": pa.array([f"n{i}" for i in range(n)]),
        "nested": pa.array([{"x": i} for i in range(n)], pa.struct([("x", pa.int64())])),
    })
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"f{i}.parquet"))
        pq.write_table(table, paths[-1])
    assert sorted(dictionary_free_columns(paths)) == ["id", "price"]
    assert dictionary_free_columns([]) == []
    # a footer that cannot be read is skipped: reading the file itself reports what is wrong with it
    (tmp_path / "bad.parquet").write_text("not parquet")
    assert sorted(dictionary_free_columns([str(tmp_path / "bad.parquet"), str(tmp_path / "gone.parquet"), *paths])) \
        == ["id", "price"]
