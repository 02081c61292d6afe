"""Tables on S3 (a SeaweedFS server on 127.0.0.1, started here) against local disk, with delta-rs on the
same server and the same disk as the peer, in one run.

    python bench/object_store_bench.py [--commits 30] [--rows 1000000]

  commit       median latency of one small append (one data file + one commit), `--commits` times:
               deltalog's engine (`write_deltalake`) and delta-rs (`deltalake.write_deltalake`)
  load         best of 5 loads of the latest snapshot of that table (its commits and checkpoint)
  table        a `table` model's write of `--rows` rows x 6 columns from Spark (`write_dataframe`,
               overwrite), then a full read back through Spark (sum of a column): what `dbt run` does.
               Each in a Spark of its own: local disk; S3 as this Spark is (no Hadoop connector:
               executors' pyarrow writes, the Python data source reads); and, where the S3A connector
               jars are there (tests/support/hadoop_aws.py), S3 through Spark's own Parquet writer and reader.
Prints each time and the S3 / local ratio, and deltalog / delta-rs on the same store.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import deltalake  # noqa: E402
import pyarrow as pa  # noqa: E402

from deltalog import Snapshot, write_deltalake # noqa: E402

from deltalog.storage import files as filesystem
from tests.support.hadoop_aws import connector_jars, s3a_spark_conf  # noqa: E402
from tests.support.seaweed import seaweedfs  # noqa: E402


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


def table_child(uri: str, rows: int, s3a: bool) -> None:
    """In a process of its own (a fresh JVM, with or without the connector): warm up, then measure."""
    from dbt.adapters.deltalog.runtime.session import get_spark

    options = json.loads(os.environ.get("BENCH_STORAGE_OPTIONS", "{}"))
    if options:
        filesystem.configure(uri.rsplit("/", 2)[0], options)
    conf = {"spark.sql.shuffle.partitions": "4", **(s3a_spark_conf() if s3a else {})}
    spark = get_spark("local[2]", conf)
    table_model(spark, uri + "_warmup", 10_000)
    write, read = table_model(spark, uri, rows)
    print("BENCH " + json.dumps({"write": write, "read": read}), flush=True)


def _table_in_child(uri: str, rows: int, options: dict, s3a: bool) -> tuple[float, float]:
    proc = subprocess.run([sys.executable, __file__, "--table-child", uri, "--rows", str(rows)]
                          + (["--s3a"] if s3a else []), capture_output=True, text=True,
                          env={**os.environ, "BENCH_STORAGE_OPTIONS": json.dumps(options)})
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH "):
            got = json.loads(line[6:])
            return got["write"], got["read"]
    raise RuntimeError(f"table run for {uri} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--table-child", help=argparse.SUPPRESS)
    parser.add_argument("--s3a", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.table_child:
        table_child(args.table_child, args.rows, args.s3a)
        return
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
            runs = [("local", places["local"][0]("orders"), {}, False), ("s3", s3.uri("bench", "orders"), options, False)]
            if connector_jars():
                runs.append(("s3a", s3.uri("bench", "orders_s3a"), options, True))
            else:
                print("(no S3A connector jars: the s3a row is left out; see tests/support/hadoop_aws.py)")
            for where, uri, opts, s3a in runs:
                write, read = _table_in_child(uri, args.rows, opts, s3a)
                results.setdefault("table write", {})[f"deltalog {where}"] = write
                results.setdefault("table read", {})[f"deltalog {where}"] = read
    finally:
        shutil.rmtree(local, ignore_errors=True)
    print(f"{'measure':<12} {'who/where':<18} {'seconds':>9}   ratio")
    for measure, row in results.items():
        for key, seconds in row.items():
            engine, where = key.split(" ")
            notes = []
            if where in ("s3", "s3a") and f"{engine} local" in row:
                notes.append(f"{where}/local {seconds / row[f'{engine} local']:.2f}x")
            if engine == "deltalog" and f"delta-rs {where}" in row:
                notes.append(f"deltalog/delta-rs {seconds / row[f'delta-rs {where}']:.2f}x")
            print(f"{measure:<12} {key:<18} {seconds:>9.4f}   {', '.join(notes)}")


if __name__ == "__main__":
    main()
