"""MERGE cost against a full rebuild of the same table, copy-on-write and with deletion vectors,
through deltalog.spark.operations.

    python bench/merge_bench.py [--rows 2000000] [--files 16] [--only ...] [--repeat 1]
                                [--sweep 0.1,1,5,20,50] [--json PATH] [--plot PATH.svg]

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

`--sweep` (percents of the rows) times instead, after the rebuild, a merge that updates that share of
the rows, keys scattered over every file (`id % 100000` below a bound), copy-on-write and with deletion
vectors, each on a fresh copy of its table. `--json` writes the times (and the sweep); `--plot` draws
the sweep's merge time against the share of rows changed, the rebuild as a line (bench/plots.py).
"""
from __future__ import annotations

import argparse
import json
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
    ap.add_argument("--only", help="steps, comma-separated (default: every step; with --sweep: rebuild)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each timed step this many times, each on the table as it was before the step's "
                         "first run (restored from a copy, not timed), and report the median")
    ap.add_argument("--sweep", help="percents of rows changed by scattered merges, e.g. 0.1,1,5,20,50")
    ap.add_argument("--json", help="write the times (and the sweep's) here")
    ap.add_argument("--plot", help="draw the sweep into this SVG (needs --sweep and matplotlib)")
    args = ap.parse_args()
    if args.only is None:
        args.only = ("rebuild" if args.sweep
                     else "rebuild,clustered,scattered,insert,clustered_dv,scattered_dv,read,floor")
    if args.plot and not args.sweep:
        ap.error("--plot draws the sweep: give --sweep too")
    work = tempfile.mkdtemp(prefix="deltalog-merge-bench-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # the adapter's own embedded session (its JVM settings included), with more driver memory
    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "4g"})
    n, f = args.rows, args.files
    uri = os.path.join(work, "orders")
    on = "DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id"
    times: dict[str, float] = {}
    sweep: list[dict] = []
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
        if args.sweep:
            # Each share merged into a fresh copy of the table as written (a copy taken once, not timed),
            # so a point measures that share alone, not what the points before it left behind.
            pristine = {}
            for key, config in (("cow", None), ("dv", dvs)):
                pristine[key] = os.path.join(work, f"sweep_{key}_pristine")
                write_dataframe(rows_df(spark, 0, n, f), pristine[key], mode="overwrite", configuration=config)
            shares = [float(p) for p in args.sweep.split(",")]
            for key in ("cow", "dv"):  # untimed: the first point should not carry the JIT's warm-up of a merge
                warm = os.path.join(work, f"sweep_{key}_warm")
                shutil.copytree(pristine[key], warm)
                merge(spark, warm, rows_df(spark, 0, n, f, bump=3, where=f"id % 100000 < {round(min(shares) * 1000)}"),
                      on, when_matched_update="*", when_not_matched_insert="*")
                shutil.rmtree(warm)
            for percent in shares:
                bound = round(percent * 1000)  # of every 100,000 consecutive ids: scattered over all files
                where = f"id % 100000 < {bound}"
                point = {"percent": percent, "rows_changed": n // 100000 * bound + min(n % 100000, bound)}
                for key in ("cow", "dv"):
                    # a path of its own: no cached snapshot of an earlier point's table can answer for it
                    target = os.path.join(work, f"sweep_{key}_{percent:g}")
                    shutil.copytree(pristine[key], target)
                    name = f"sweep_{key}_{percent:g}%"
                    timed(name, lambda: merge(spark, target, rows_df(spark, 0, n, f, bump=3, where=where), on,
                                              when_matched_update="*", when_not_matched_insert="*"), target)
                    check(n, where, 3, target)
                    point[key] = round(times[name], 3)
                    shutil.rmtree(target)
                sweep.append(point)
        base = times.get("rebuild")
        print(f"\n{n} rows x 11 columns, {f} files, local[2]")
        for k, v in times.items():
            if k.startswith("read_dv") and times.get(k.replace("_dv", "")):
                print(f"| {k:12s} | {v:7.2f} s | {v / times[k.replace('_dv', '')]:5.2f}x read without DVs |")
            else:
                print(f"| {k:12s} | {v:7.1f} s | {v / base:5.2f}x rebuild |" if base else f"| {k} | {v:.1f} s |")
        results = {"rows": n, "files": f, "repeat": args.repeat, "measured": time.strftime("%Y-%m-%d"),
                   "times": {k: round(v, 3) for k, v in times.items()}, "sweep": sweep}
        if args.json:
            with open(args.json, "w") as out:
                json.dump(results, out, indent=1)
        if args.plot:
            import plots  # matplotlib only when plotting

            plots.merge_sweep(results, args.plot)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
