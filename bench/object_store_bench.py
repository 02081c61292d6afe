"""Tables on S3 (a SeaweedFS server on 127.0.0.1, started here) against local disk, with delta-rs on the
same server and the same disk as the peer, in one run.

    python bench/object_store_bench.py [--commits 30] [--rows 1000000]

  commit       median latency of one small append (one data file + one commit), `--commits` times:
               deltalog's engine (`write_deltalake`) and delta-rs (`deltalake.write_deltalake`)
  load         best of 5 loads of the latest snapshot of that table (its commits and checkpoint)
  table        a `table` model's write of `--rows` rows x 6 columns from Spark (`write_dataframe`,
               overwrite), then a full read back through Spark (sum of a column): what `dbt run` does
Prints each time and the S3 / local ratio, and deltalog / delta-rs on the same store.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import deltalake  # noqa: E402
import pyarrow as pa  # noqa: E402

from deltalog import Snapshot, filesystem, write_deltalake  # noqa: E402
from tests.seaweed import seaweedfs  # noqa: E402


def _batch(i: int) -> pa.Table:
    return pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64()), "v": pa.array([float(i)] * 100)})


def commits(uri: str, options: dict, n: int, ours: bool) -> tuple[float, float]:
    """(median commit seconds, best-of-5 load seconds)."""
    times = []
    for i in range(n):
        t = time.perf_counter()
        if ours:
            write_deltalake(uri, _batch(i), mode="append", storage_options=options or None)
        else:
            deltalake.write_deltalake(uri, _batch(i), mode="append", storage_options=options or None)
        times.append(time.perf_counter() - t)
    loads = []
    for _ in range(5):
        t = time.perf_counter()
        if ours:
            Snapshot.load(uri, storage_options=options or None).num_files
        else:
            deltalake.DeltaTable(uri, storage_options=options or None).version()
        loads.append(time.perf_counter() - t)
    return statistics.median(times), min(loads)


def table_model(spark, uri: str, rows: int) -> tuple[float, float]:
    from deltalog.spark.operations import write_dataframe
    from deltalog.spark.reader import snapshot_dataframe

    df = spark.range(rows).selectExpr("id", "id % 1000 AS customer", "cast(id % 97 AS double) AS amount",
                                      "date_add(date'2025-01-01', cast(id % 365 AS int)) AS day",
                                      "concat('order-', id) AS name", "id % 3 = 0 AS flag").repartition(4)
    t = time.perf_counter()
    write_dataframe(df, uri, mode="overwrite")
    write = time.perf_counter() - t
    t = time.perf_counter()
    got = snapshot_dataframe(spark, Snapshot.load(uri)).selectExpr("count(*)", "sum(amount)").collect()[0]
    read = time.perf_counter() - t
    assert got[0] == rows, f"{uri}: read back {got[0]} rows of {rows}"
    return write, read


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    local = tempfile.mkdtemp(prefix="deltalog-bench-")
    results: dict[str, dict[str, float]] = {}
    try:
        with seaweedfs() as s3:
            options = s3.storage_options()
            filesystem.configure(s3.uri(), options)
            places = {"local": (lambda name: os.path.join(local, name), {}),
                      "s3": (lambda name: s3.uri("bench", name), options)}
            for where, (at, opts) in places.items():
                for engine in ("deltalog", "delta-rs"):
                    c, load = commits(at(f"commits_{engine}"), opts, args.commits, engine == "deltalog")
                    results.setdefault("commit", {})[f"{engine} {where}"] = c
                    results.setdefault("load", {})[f"{engine} {where}"] = load
            from dbt.adapters.deltalog.session import get_spark

            spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "4"})
            table_model(spark, places["local"][0]("warmup"), 10_000)
            for where, (at, _) in places.items():
                write, read = table_model(spark, at("orders"), args.rows)
                results.setdefault("table write", {})[f"deltalog {where}"] = write
                results.setdefault("table read", {})[f"deltalog {where}"] = read
    finally:
        shutil.rmtree(local, ignore_errors=True)
    print(f"{'measure':<12} {'who/where':<18} {'seconds':>9}   ratio")
    for measure, row in results.items():
        for key, seconds in row.items():
            engine, where = key.split(" ")
            notes = []
            if where == "s3" and f"{engine} local" in row:
                notes.append(f"s3/local {seconds / row[f'{engine} local']:.2f}x")
            if engine == "deltalog" and f"delta-rs {where}" in row:
                notes.append(f"deltalog/delta-rs {seconds / row[f'delta-rs {where}']:.2f}x")
            print(f"{measure:<12} {key:<18} {seconds:>9.4f}   {', '.join(notes)}")


if __name__ == "__main__":
    main()
