"""dbt `table` model: dbt-deltalog versus dbt-spark (file_format: parquet), on the same Spark settings.

    python bench/dbt_table_bench.py                 # 10 million rows
    python bench/dbt_table_bench.py --rows 200000   # a quick run

One generated dbt project, two profiles (`type: deltalog` and `type: spark, method: session`) with the
same Spark conf. Every dbt invocation runs in its own subprocess, so each gets a fresh JVM started with
that conf; the times are dbt's own per-model execution times (run_results.json), which leave out JVM
start-up and project parsing. Steps, in this order:

  1. build the `table` model with each adapter (first build), then rebuild it with each (overwrite)
  2. build an `incremental` merge model (unique_key id) with dbt-deltalog, then merge 1% changed rows
     into it twice: rows clustered at the end of the table (recent orders) and rows scattered over
     every file (id % 100 = 0), each timed beside the full rebuild of step 1
  3. read every dbt-deltalog table back with `deltalake` and check rows and changed values

Prints a markdown table of the times and the ratios ours / dbt-spark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DBT = Path(sys.executable).with_name("dbt")

TABLE_SQL = """\
{% if target.type == 'spark' %}{{ config(file_format='parquet') }}{% endif %}
-- A wide-ish orders table generated in Spark: ints, a date, a timestamp, decimals, strings, a boolean.
select
    id,
    cast(id % 100000 as int) as customer_id,
    cast(id % 5000 as int) as product_id,
    date_add(date'2025-01-01', cast(id % 730 as int)) as order_date,
    timestamp_seconds(1735689600 + id * 3) as ordered_at,
    cast((id * 7919 % 100000) / 100.0 as decimal(12,2)) as amount,
    cast(id % 7 as int) as quantity,
    element_at(array('placed', 'shipped', 'completed', 'returned', 'cancelled'), cast(id % 5 as int) + 1) as status,
    concat('customer-', cast(id % 100000 as string), '@example.com') as email,
    id % 3 = 0 as is_gift,
    sha2(cast(id as string), 256) as token
from range(0, {{ var('rows') }}, 1, {{ var('partitions') }})
"""

MERGE_SQL = """\
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
-- The same rows as the table model; an incremental run sends 1% of them with amount + 1.
{% set change = var('change', 'none') %}
select
    id,
    cast(id % 100000 as int) as customer_id,
    cast(id % 5000 as int) as product_id,
    date_add(date'2025-01-01', cast(id % 730 as int)) as order_date,
    timestamp_seconds(1735689600 + id * 3) as ordered_at,
    cast((id * 7919 % 100000) / 100.0 + {{ 1 if is_incremental() else 0 }} as decimal(12,2)) as amount,
    cast(id % 7 as int) as quantity,
    element_at(array('placed', 'shipped', 'completed', 'returned', 'cancelled'), cast(id % 5 as int) + 1) as status,
    concat('customer-', cast(id % 100000 as string), '@example.com') as email,
    id % 3 = 0 as is_gift,
    sha2(cast(id as string), 256) as token
from range(0, {{ var('rows') }}, 1, {{ var('partitions') }})
{% if is_incremental() %}
  {% if change == 'clustered' %}
where id >= {{ var('rows') - var('rows') // 100 }}
  {% else %}
where id % 100 = 0
  {% endif %}
{% endif %}
"""


def spark_conf(memory: str, partitions: int) -> dict[str, str]:
    # The settings both adapters run with.
    return {
        "spark.driver.memory": memory,
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.ansi.enabled": "false",  # dbt-spark forces it off; same for both
        "spark.ui.enabled": "false",
    }


def write_project(root: Path, conf: dict[str, str], master: str) -> None:
    (root / "models").mkdir(parents=True)
    (root / "models" / "bench_orders.sql").write_text(TABLE_SQL)
    (root / "models" / "bench_orders_merge.sql").write_text(MERGE_SQL)
    (root / "dbt_project.yml").write_text(textwrap.dedent("""\
        name: dbt_table_bench
        version: "1.0.0"
        config-version: 2
        profile: bench
        # Start Spark before the model runs (dbt-spark does in its catalog queries; we list the
        # warehouse without Spark), so the model times leave JVM start-up out for both.
        on-run-start: ["select 1"]
        flags:
          send_anonymous_usage_stats: false
        models:
          dbt_table_bench:
            +materialized: table
        """))
    spark_warehouse = root / "spark" / "warehouse"
    profile = {
        "bench": {
            "target": "ours",
            "outputs": {
                "ours": {
                    "type": "deltalog", "schema": "bench", "threads": 1, "master": master,
                    "warehouse": str(root / "ours" / "warehouse"), "spark_conf": conf,
                },
                "spark": {
                    # Hive catalog (dbt-spark's default; derby files land in root/spark) so that the
                    # table outlives the process and the rebuild is a real drop + create.
                    "type": "spark", "method": "session", "host": "localhost", "schema": "bench",
                    "threads": 1,
                    "server_side_parameters": {
                        **conf, "spark.master": master, "spark.sql.warehouse.dir": str(spark_warehouse),
                    },
                },
            },
        }
    }
    (root / "profiles.yml").write_text(json.dumps(profile, indent=2))  # JSON is YAML
    (root / "ours").mkdir()
    (root / "spark").mkdir()


def run_dbt(root: Path, target: str, select: str, variables: dict, label: str) -> dict:
    target_path = root / "runs" / label
    cmd = [str(DBT), "run", "--target", target, "--select", select, "--vars", json.dumps(variables),
           "--profiles-dir", str(root), "--project-dir", str(root), "--target-path", str(target_path)]
    # dbt-spark's session starts a Hive metastore in the working directory: keep it in root/<target>
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root / ("spark" if target == "spark" else "ours"),
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-6000:] + proc.stderr[-3000:])
        raise SystemExit(f"{label}: dbt exited with {proc.returncode}")
    results = json.loads((target_path / "run_results.json").read_text())["results"]
    (result,) = [r for r in results if r["unique_id"].startswith("model.")]  # not the on-run-start hook
    print(f"  {label:<28} model {result['execution_time']:7.2f} s   (process {wall:6.1f} s)", flush=True)
    return {"model_s": result["execution_time"], "wall_s": wall}


def folder_stats(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts]
    return len(files), sum(p.stat().st_size for p in files)


def live_file_stats(table: Path) -> tuple[int, int]:
    """Files of the latest version only (the folder also keeps the rebuilt-over version's files)."""
    from deltalake import DeltaTable

    import pyarrow as pa

    sizes = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).column("size_bytes")
    return len(sizes), sum(sizes.to_pylist())


def check_ours(root: Path, rows: int) -> list[str]:
    """Read the dbt-deltalog tables back with delta-rs: rows, changed amounts, history."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    notes = []
    table = DeltaTable(str(root / "ours" / "warehouse" / "bench" / "bench_orders"))
    assert table.to_pyarrow_dataset().count_rows() == rows, "bench_orders row count"
    notes.append(f"bench_orders: {rows:,} rows, history {[h['operation'] for h in table.history()][::-1]}")

    merged = DeltaTable(str(root / "ours" / "warehouse" / "bench" / "bench_orders_merge"))
    data = merged.to_pyarrow_table(columns=["id", "amount"])
    assert data.num_rows == rows, "bench_orders_merge row count"
    assert pc.count_distinct(data["id"]).as_py() == rows, "bench_orders_merge keys unique"
    ids = data["id"]
    base_amount = pc.divide(pc.cast(pc.remainder(pc.multiply(ids, 7919), 100000), "float64"), 100.0)
    bumped = pc.or_(pc.greater_equal(ids, rows - rows // 100), pc.equal(pc.remainder(ids, 100), 0))
    delta_amount = pc.subtract(pc.cast(data["amount"], "float64"), base_amount)
    changed = pc.greater(delta_amount, 0.5)
    assert pc.all(pc.equal(changed, bumped)).as_py(), "exactly the 1% rows changed"
    notes.append(f"bench_orders_merge: {pc.sum(changed).as_py():,} rows changed, history "
                 f"{[h['operation'] for h in merged.history()][::-1]}")
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=16, help="Spark partitions of the generated rows (files)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--memory", default="4g", help="spark.driver.memory")
    parser.add_argument("--repeat", type=int, default=1, help="rebuilds per adapter (the best time counts)")
    parser.add_argument("--workdir", help="keep the projects and tables here (default: a temp dir, removed)")
    args = parser.parse_args()

    root = Path(args.workdir or tempfile.mkdtemp(prefix="dbt-table-bench-")).resolve()
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} is not empty")
    conf = spark_conf(args.memory, args.partitions)
    write_project(root, conf, args.master)
    base = {"rows": args.rows, "partitions": args.partitions}
    print(f"dbt table bench: {args.rows:,} rows, {args.partitions} partitions, {args.master}, "
          f"driver memory {args.memory}, in {root}", flush=True)
    try:
        t = {}
        t["ours_build"] = run_dbt(root, "ours", "bench_orders", base, "ours_build")
        t["spark_build"] = run_dbt(root, "spark", "bench_orders", base, "spark_build")
        for i in range(args.repeat):  # alternate, so load from elsewhere hits both alike
            for side in ("ours", "spark"):
                run = run_dbt(root, side, "bench_orders", base, f"{side}_rebuild_{i + 1}")
                best = t.get(f"{side}_rebuild")
                if best is None or run["model_s"] < best["model_s"]:
                    t[f"{side}_rebuild"] = run
        t["ours_merge_initial"] = run_dbt(root, "ours", "bench_orders_merge", base, "ours_merge_initial")
        t["ours_merge_clustered"] = run_dbt(root, "ours", "bench_orders_merge", {**base, "change": "clustered"},
                                            "ours_merge_1pct_clustered")
        t["ours_merge_scattered"] = run_dbt(root, "ours", "bench_orders_merge", {**base, "change": "scattered"},
                                            "ours_merge_1pct_scattered")
        notes = check_ours(root, args.rows)
        ours_files = live_file_stats(root / "ours" / "warehouse" / "bench" / "bench_orders")
        spark_files = folder_stats(root / "spark" / "warehouse")
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)

    m = {k: v["model_s"] for k, v in t.items()}
    print()
    print(f"### dbt `table` model, {args.rows:,} rows ({args.master}, same Spark conf, model time from run_results.json)")
    print()
    print("| step | dbt-deltalog (s) | dbt-spark parquet (s) | ours / dbt-spark |")
    print("|---|---:|---:|---:|")
    print(f"| first build | {m['ours_build']:.2f} | {m['spark_build']:.2f} | {m['ours_build'] / m['spark_build']:.2f} |")
    print(f"| rebuild (overwrite{', best of ' + str(args.repeat) if args.repeat > 1 else ''}) | {m['ours_rebuild']:.2f} | {m['spark_rebuild']:.2f} | "
          f"{m['ours_rebuild'] / m['spark_rebuild']:.2f} |")
    print()
    print("| incremental merge, dbt-deltalog | time (s) | / our full rebuild | / dbt-spark full rebuild |")
    print("|---|---:|---:|---:|")
    for key, label in (("ours_merge_clustered", "1% changed rows, clustered (latest ids)"),
                       ("ours_merge_scattered", "1% changed rows, scattered (id % 100 = 0)")):
        print(f"| {label} | {m[key]:.2f} | {m[key] / m['ours_rebuild']:.2f} | {m[key] / m['spark_rebuild']:.2f} |")
    print()
    print(f"Data files of the table: dbt-deltalog {ours_files[0]} files, {ours_files[1] / 1e6:.0f} MB; "
          f"dbt-spark {spark_files[0]} files, {spark_files[1] / 1e6:.0f} MB.")
    for note in notes:
        print(f"Checked with deltalake: {note}.")


if __name__ == "__main__":
    main()
