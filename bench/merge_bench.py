"""MERGE cost against a full rebuild of the same table, copy-on-write and with deletion vectors,
through deltalog.spark.operations.

    python bench/merge_bench.py [--rows 2000000] [--files 16] [--only ...] [--repeat 1]

Builds an orders-like table (rows x 11 columns, `files` files) with `write_dataframe`, then times:
  rebuild       overwrite the whole table
  clustered     merge 1% changed rows whose ids are the last 1% (one file touched)
  scattered     merge 1% changed rows with id % 100 = 0 (every file touched)
  insert        merge 1% new ids (no target row matches)
  clustered_dv, scattered_dv   the same merges on a copy with deletion_vectors (merge-on-read)
  read, read_dv                a full scan (sum of amount) of the table without DVs and of a DV table
                               whose rows a scattered merge marked 1% deleted (their new versions in
                               new files): written and merged once for the read, not timed (median of 5)
  read_all, read_dv_all        the same reading every column (into Spark's noop sink)
  floor         the scattered merge's changed rows alone computed and written as Parquet by plain Spark
                (no table, no match): the least any merge of them can cost here
and prints each time with its ratio to the rebuild (reads: read_dv / read). Each merge is checked (row
count, changed values). Targets (issue 11): scattered_dv >= 10x faster than rebuild; read_dv <= 1.2x read.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dbt.adapters.deltalog.runtime.session import get_spark  # noqa: E402

from deltalog.spark.operations import merge, write_dataframe  # noqa: E402
from deltalog.spark.reader import register_view  # noqa: E402

COLUMNS = """
    id,
    cast(id % 100000 as int) as customer_id,
    cast(id % 5000 as int) as product_id,
    date_add(date'2025-01-01', cast(id % 730 as int)) as order_date,
    timestamp_seconds(1735689600 + id * 3) as ordered_at,
    cast((id * 7919 % 100000) / 100.0 + {bump} as decimal(12,2)) as amount,
    cast(id % 7 as int) as quantity,
    element_at(array('placed', 'shipped', 'completed', 'returned', 'cancelled'), cast(id % 5 as int) + 1) as status,
    concat('customer-', cast(id % 100000 as string), '@example.com') as email,
    id % 3 = 0 as is_gift,
    sha2(cast(id as string), 256) as token
"""


def rows_df(spark, start: int, end: int, files: int, bump: int = 0, where: str | None = None):
    sql = f"select {COLUMNS.format(bump=bump)} from range({start}, {end}, 1, {files})"
    if where:
        sql += f" where {where}"
    return spark.sql(sql)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--only", default="rebuild,clustered,scattered,insert,clustered_dv,scattered_dv,read,floor")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each timed step this many times, each on the table as it was before the step's "
                         "first run (restored from a copy, not timed), and report the median")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="deltalog-merge-bench-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # the adapter's own embedded session (its JVM settings included), with more driver memory
    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "4g"})
    n, f = args.rows, args.files
    uri = os.path.join(work, "orders")
    on = "DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id"
    times: dict[str, float] = {}
    try:
        write_dataframe(rows_df(spark, 0, n, f), uri, mode="overwrite")

        def timed(name, fn, table: str | None = None):
            """`fn` run `--repeat` times; `table` (the one it changes) is put back as it was before each
            later run, so that every run does the same work."""
            before = table + ".before" if table and args.repeat > 1 else None
            if before:
                shutil.copytree(table, before)
            runs = []
            for i in range(args.repeat):
                if i and before:
                    shutil.rmtree(table)
                    shutil.copytree(before, table)
                t = time.time()
                fn()
                runs.append(time.time() - t)
            if before:
                shutil.rmtree(before)
            times[name] = sorted(runs)[len(runs) // 2]
            more = f" (median of {len(runs)}: {', '.join(f'{r:.1f}' for r in runs)})" if len(runs) > 1 else ""
            print(f"{name:10s} {times[name]:7.1f} s{more}", flush=True)

        def check(expected_rows: int, where: str, bump: int, path: str = uri) -> None:
            df = register_view(spark, "t", path)
            got = df.count()
            assert got == expected_rows, (got, expected_rows)
            bad = spark.sql(f"select count(*) from t where {where} and amount != "
                            f"cast((id * 7919 % 100000) / 100.0 + {bump} as decimal(12,2))").collect()[0][0]
            assert bad == 0, bad

        todo = args.only.split(",")
        if "rebuild" in todo:
            timed("rebuild", lambda: write_dataframe(rows_df(spark, 0, n, f), uri, mode="overwrite"))
        if "clustered" in todo:
            timed("clustered", lambda: merge(spark, uri, rows_df(spark, n - n // 100, n, f, bump=1), on,
                                             when_matched_update="*", when_not_matched_insert="*"), uri)
            check(n, f"id >= {n - n // 100}", 1)
        if "scattered" in todo:
            timed("scattered", lambda: merge(spark, uri, rows_df(spark, 0, n, f, bump=2, where="id % 100 = 0"), on,
                                             when_matched_update="*", when_not_matched_insert="*"), uri)
            check(n, "id % 100 = 0", 2)
        if "insert" in todo:
            timed("insert", lambda: merge(spark, uri, rows_df(spark, n, n + n // 100, f), on,
                                          when_matched_update="*", when_not_matched_insert="*"), uri)
            check(n + n // 100, f"id >= {n}", 0)
        if "floor" in todo:
            timed("floor", lambda: rows_df(spark, 0, n, f, bump=2, where="id % 100 = 0").write.mode("overwrite")
                  .parquet(os.path.join(work, "floor")))
        dv_uri = os.path.join(work, "orders_dv")
        dvs = {"delta.enableDeletionVectors": "true"}
        if any(t.endswith("_dv") for t in todo):
            write_dataframe(rows_df(spark, 0, n, f), dv_uri, mode="overwrite", configuration=dvs)
            if "clustered_dv" in todo:
                timed("clustered_dv", lambda: merge(spark, dv_uri, rows_df(spark, n - n // 100, n, f, bump=1), on,
                                                    when_matched_update="*", when_not_matched_insert="*"), dv_uri)
            if "scattered_dv" in todo:
                timed("scattered_dv", lambda: merge(spark, dv_uri,
                                                    rows_df(spark, 0, n, f, bump=2, where="id % 100 = 0"), on,
                                                    when_matched_update="*", when_not_matched_insert="*"), dv_uri)
            check(n, "id % 100 = 0" if "scattered_dv" in todo else f"id >= {n - n // 100}",
                  2 if "scattered_dv" in todo else 1, dv_uri)
        if "read" in todo:
            # Reads take well under a second: alternate the two tables for 5 rounds (after one warm-up
            # round) and keep each one's median, of one column summed and of every column (noop sink).
            plain = os.path.join(work, "orders_plain")
            write_dataframe(rows_df(spark, 0, n, f), plain, mode="overwrite")
            # 1% of the rows deleted, as one scattered merge leaves them (the DV merges above left more)
            read_dv = os.path.join(work, "orders_read_dv")
            write_dataframe(rows_df(spark, 0, n, f), read_dv, mode="overwrite", configuration=dvs)
            merge(spark, read_dv, rows_df(spark, 0, n, f, bump=2, where="id % 100 = 0"), on,
                  when_matched_update="*", when_not_matched_insert="*")
            check(n, "id % 100 = 0", 2, read_dv)
            tables = {"read": plain, "read_dv": read_dv}
            queries = {"": lambda df: df.agg({"amount": "sum"}).collect(),
                       "_all": lambda df: df.write.format("noop").mode("overwrite").save()}
            runs: dict[str, list[float]] = {}
            for round_ in range(6):
                for name, path in tables.items():
                    for suffix, query in queries.items():
                        t = time.time()
                        query(register_view(spark, "r", path))  # the snapshot and its DVs loaded each time
                        if round_:
                            runs.setdefault(name + suffix, []).append(time.time() - t)
            for key, values in runs.items():
                times[key] = sorted(values)[len(values) // 2]
                print(f"{key:10s} {times[key]:7.2f} s (median of {len(values)})", flush=True)
        base = times.get("rebuild")
        print(f"\n{n} rows x 11 columns, {f} files, local[2]")
        for k, v in times.items():
            if k.startswith("read_dv") and times.get(k.replace("_dv", "")):
                print(f"| {k:12s} | {v:7.2f} s | {v / times[k.replace('_dv', '')]:5.2f}x read without DVs |")
            else:
                print(f"| {k:12s} | {v:7.1f} s | {v / base:5.2f}x rebuild |" if base else f"| {k} | {v:.1f} s |")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
