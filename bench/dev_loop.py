"""The dev loop: `dbt build` of generated projects on dbt-deltalog and on dbt-duckdb, in one run.

    pip install -e '.[bench,connect]'      # the peer, dbt-duckdb; Spark's Connect client
    python bench/dev_loop.py               # 3 rounds of both projects

Two generated projects (SQL that both engines run):

  jaffle  3 seeds, 3 staging views, 2 mart tables, 20 data tests: 28 nodes, the size of dbt's jaffle shop
  tests   8 seeds, 8 staging views, 8 tables, 144 data tests: 168 nodes, mostly tests on small tables, as
          a package's integration project is

and four ways to build each, each a fresh `dbt build` process, wall time measured around it:

  duckdb             dbt-duckdb on a DuckDB file
  deltalog-server    dbt-deltalog with `spark_server: true`: the first build of a round starts the local
                     Spark server (no server running before it), later builds attach to it
  deltalog-connect   dbt-deltalog with `method: connect` on a local Spark Connect server (pyspark's own,
                     local[*], started by this script before the rounds: its start is not in any build)
  deltalog-inprocess dbt-deltalog with `spark_server: false`: a JVM per command (the old behaviour)
  deltalog-spark-tests  as deltalog-server, with `small_tests_here: false`: every data test a Spark job
                     (not run unless named in --ways)

A round is: first build, then a second build of the unchanged project (dbt's partial parse, the
server warm), per way; with `--later N`, N more builds after those (a dev loop's later builds, on a
server whose JVM has compiled more of Spark). Reported: the best of the rounds for each (for later
builds, the median of each round's, then the best), and the ratios to dbt-duckdb.
Every deltalog table is read back with `deltalake` and compared with DuckDB's rows.

`--json PATH` writes every build's time and the best of each; `--plot PATH.svg` draws the best first
and second builds per way as bars, a panel per project (bench/plots.py, matplotlib).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

DBT = Path(sys.executable).with_name("dbt")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/support/spark_connect.py starts the Connect server

MODELS = {
    "staging/stg_customers.sql": """\
select id as customer_id, first_name, last_name from {{ ref('raw_customers') }}
""",
    "staging/stg_orders.sql": """\
select id as order_id, user_id as customer_id, order_date, status from {{ ref('raw_orders') }}
""",
    "staging/stg_payments.sql": """\
select id as payment_id, order_id, payment_method, amount / 100.0 as amount from {{ ref('raw_payments') }}
""",
    "customers.sql": """\
with customers as (select * from {{ ref('stg_customers') }}),
orders as (select * from {{ ref('stg_orders') }}),
payments as (select * from {{ ref('stg_payments') }}),
customer_orders as (
    select customer_id, min(order_date) as first_order, max(order_date) as most_recent_order,
           count(order_id) as number_of_orders
    from orders group by customer_id
),
customer_payments as (
    select orders.customer_id, sum(amount) as total_amount
    from payments left join orders on payments.order_id = orders.order_id
    group by orders.customer_id
)
select customers.customer_id, customers.first_name, customers.last_name,
       customer_orders.first_order, customer_orders.most_recent_order, customer_orders.number_of_orders,
       customer_payments.total_amount as customer_lifetime_value
from customers
left join customer_orders on customers.customer_id = customer_orders.customer_id
left join customer_payments on customers.customer_id = customer_payments.customer_id
""",
    "orders.sql": """\
{% set payment_methods = ['credit_card', 'coupon', 'bank_transfer', 'gift_card'] %}
with orders as (select * from {{ ref('stg_orders') }}),
payments as (select * from {{ ref('stg_payments') }}),
order_payments as (
    select order_id,
           {% for m in payment_methods %}sum(case when payment_method = '{{ m }}' then amount else 0 end) as {{ m }}_amount,
           {% endfor %}sum(amount) as total_amount
    from payments group by order_id
)
select orders.order_id, orders.customer_id, orders.order_date, orders.status,
       {% for m in payment_methods %}order_payments.{{ m }}_amount,
       {% endfor %}order_payments.total_amount as amount
from orders left join order_payments on orders.order_id = order_payments.order_id
""",
}

SCHEMA_YML = """\
version: 2
models:
  - name: customers
    columns:
      - name: customer_id
        data_tests: [unique, not_null]
  - name: orders
    columns:
      - name: order_id
        data_tests: [unique, not_null]
      - name: customer_id
        data_tests:
          - not_null
          - relationships: {arguments: {to: ref('customers'), field: customer_id}}
      - name: status
        data_tests:
          - accepted_values: {arguments: {values: ['placed', 'shipped', 'completed', 'return_pending', 'returned']}}
      - name: amount
        data_tests: [not_null]
      - name: credit_card_amount
        data_tests: [not_null]
      - name: coupon_amount
        data_tests: [not_null]
      - name: bank_transfer_amount
        data_tests: [not_null]
      - name: gift_card_amount
        data_tests: [not_null]
  - name: stg_customers
    columns:
      - name: customer_id
        data_tests: [unique, not_null]
  - name: stg_orders
    columns:
      - name: order_id
        data_tests: [unique, not_null]
      - name: status
        data_tests:
          - accepted_values: {arguments: {values: ['placed', 'shipped', 'completed', 'return_pending', 'returned']}}
  - name: stg_payments
    columns:
      - name: payment_id
        data_tests: [unique, not_null]
      - name: payment_method
        data_tests:
          - accepted_values: {arguments: {values: ['credit_card', 'coupon', 'bank_transfer', 'gift_card']}}
"""

PROJECT_YML = """\
name: dev_loop
version: "1.0"
profile: dev_loop
models:
  dev_loop:
    +materialized: table
    staging:
      +materialized: view
"""


def write_seeds(folder: Path, seed: int = 7) -> None:
    """Jaffle-shop-like raw data (100 customers, 99 orders, ~113 payments), generated here."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    names = ["Michael", "Shawn", "Kathleen", "Jimmy", "Katherine", "Sarah", "Martin", "Frank", "Jennifer", "Henry"]
    with open(folder / "raw_customers.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "first_name", "last_name"])
        for i in range(1, 101):
            w.writerow([i, rng.choice(names), chr(65 + rng.randrange(26)) + "."])
    statuses = ["placed", "shipped", "completed", "return_pending", "returned"]
    with open(folder / "raw_orders.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "user_id", "order_date", "status"])
        for i in range(1, 100):
            w.writerow([i, rng.randrange(1, 101), f"2018-{1 + i * 4 // 100:02d}-{1 + i % 28:02d}",
                        rng.choice(statuses)])
    methods = ["credit_card", "coupon", "bank_transfer", "gift_card"]
    with open(folder / "raw_payments.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "order_id", "payment_method", "amount"])
        pid = 0
        for order in range(1, 100):
            for _ in range(1 + (rng.random() < 0.14)):
                pid += 1
                w.writerow([pid, order, rng.choice(methods), rng.randrange(0, 3000)])


ENTITIES = ["accounts", "contacts", "deals", "invoices", "lines", "refunds", "tickets", "visits"]
STATUSES = ["new", "open", "won", "lost", "closed"]


def write_test_heavy(root: Path, seed: int = 11) -> None:
    """The `tests` project: per entity a seed (120 rows; parent_id points at the previous entity), a
    staging view, a table, and 9 data tests on each of the two (unique, 5 not_null, accepted_values,
    relationships, and an expression test)."""
    rng = random.Random(seed)
    (root / "seeds").mkdir(parents=True, exist_ok=True)
    schema = ["version: 2", "models:"]
    for n, entity in enumerate(ENTITIES):
        with open(root / "seeds" / f"raw_{entity}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "parent_id", "status", "amount", "name"])
            for i in range(1, 121):
                w.writerow([i, rng.randrange(1, 121), rng.choice(STATUSES), rng.randrange(0, 5000),
                            f"{entity}-{i}"])
        (root / "models" / "staging" / f"stg_{entity}.sql").write_text(
            f"select id, parent_id, status, amount / 100.0 as amount, name from {{{{ ref('raw_{entity}') }}}}\n")
        (root / "models" / f"{entity}.sql").write_text(
            f"select s.*, upper(s.status) as status_code from {{{{ ref('stg_{entity}') }}}} s\n")
        parent = ENTITIES[n - 1]
        for model, to in ((f"stg_{entity}", f"stg_{parent}"), (entity, parent)):
            schema += [f"  - name: {model}", "    data_tests:",
                       "      - expression_is_true: {arguments: {expression: 'amount >= 0'}}",
                       "    columns:",
                       "      - name: id", "        data_tests: [unique, not_null]",
                       "      - name: parent_id", "        data_tests:", "          - not_null",
                       f"          - relationships: {{arguments: {{to: ref('{to}'), field: id}}}}",
                       "      - name: status", "        data_tests:", "          - not_null",
                       f"          - accepted_values: {{arguments: {{values: {STATUSES}}}}}",
                       "      - name: amount", "        data_tests: [not_null]",
                       "      - name: name", "        data_tests: [not_null]"]
    (root / "models" / "schema.yml").write_text("\n".join(schema) + "\n")
    (root / "macros").mkdir(exist_ok=True)
    (root / "macros" / "expression_is_true.sql").write_text(
        "{% test expression_is_true(model, expression) %}\n"
        "select * from {{ model }} where not ({{ expression }})\n{% endtest %}\n")


PROJECTS = {"jaffle": 28, "tests": 168}  # nodes that must pass


def make_project(root: Path, profile: dict, kind: str = "jaffle") -> Path:
    (root / "models" / "staging").mkdir(parents=True, exist_ok=True)
    if kind == "jaffle":
        for rel, sql in MODELS.items():
            (root / "models" / rel).write_text(sql)
        (root / "models" / "schema.yml").write_text(SCHEMA_YML)
        write_seeds(root / "seeds")
    else:
        write_test_heavy(root)
    (root / "dbt_project.yml").write_text(PROJECT_YML)
    (root / "profiles.yml").write_text(json.dumps({"dev_loop": {"target": "dev", "outputs": {"dev": profile}}}))
    return root


def build(project: Path, env: dict, nodes: int = 28) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(DBT), "build", "--profiles-dir", str(project), "--project-dir", str(project)],
                          cwd=project, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"dbt build failed in {project}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    if f"PASS={nodes} " not in done.stdout:
        sys.exit(f"expected {nodes} passing nodes in {project}:\n{done.stdout[-2000:]}")
    return elapsed


def stop_servers(env: dict) -> None:
    subprocess.run([sys.executable, "-m", "dbt.adapters.deltalog.runtime.spark_server", "stop"], env=env,
                   capture_output=True, check=True)


def compare_rows(work: Path, kind: str, ways: list[str]) -> None:
    """Every deltalog table of the project equals DuckDB's (rows as sorted tuples, amounts rounded)."""
    import duckdb
    from deltalake import DeltaTable

    con = duckdb.connect(str(work / kind / "duckdb" / "dev.duckdb"), read_only=True)
    tables = ("customers", "orders") if kind == "jaffle" else ENTITIES

    def norm(rows):
        return sorted(tuple(round(float(v), 2) if isinstance(v, (float, int, Decimal)) and not isinstance(v, bool)
                            else (None if v is None else str(v)) for v in row) for row in rows)

    for table in tables:
        theirs = norm(con.execute(f"select * from main.{table}").fetchall())
        for way in ways:
            ours = DeltaTable(str(work / kind / f"warehouse-{way}" / "main" / table)).to_pyarrow_table().to_pylist()
            if norm([tuple(r.values()) for r in ours]) != theirs:
                sys.exit(f"{kind}: {table}: {way}'s rows differ from dbt-duckdb's")
    con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--projects", nargs="+", choices=sorted(PROJECTS), default=sorted(PROJECTS))
    parser.add_argument("--ways", nargs="+", default=["duckdb", "deltalog-server", "deltalog-connect",
                                                      "deltalog-inprocess"])
    parser.add_argument("--later", type=int, default=0, help="builds after the second, per round")
    parser.add_argument("--json", help="write every build's time and the best of each here")
    parser.add_argument("--plot", help="draw first and second builds per way into this SVG")
    args = parser.parse_args()
    try:
        import dbt.adapters.duckdb  # noqa: F401
    except ImportError:
        sys.exit("dbt-duckdb is the peer of this benchmark: pip install 'dbt-duckdb>=1.10,<1.12'")

    work = Path(tempfile.mkdtemp(prefix="dev-loop-"))
    env = dict(os.environ, DBT_DELTALOG_SERVER_DIR=str(work / "servers"), DO_NOT_TRACK="1",
               DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    env.pop("CI", None)
    with contextlib.ExitStack() as stack:
        connect_url = None
        if "deltalog-connect" in args.ways:
            from tests.support.spark_connect import spark_connect_server

            started = time.perf_counter()
            connect_url = stack.enter_context(spark_connect_server("local[*]"))
            print(f"local Spark Connect server started in {time.perf_counter() - started:.1f} s", flush=True)
        results, runs = {}, {}
        for kind in args.projects:
            runs[kind] = run_project(work, env, kind, args.rounds, args.ways, connect_url, args.later)
            results[kind] = {name: {run: min(v) for run, v in times.items() if v} for name, times in runs[kind].items()}
    for kind, best in results.items():
        duck = best["duckdb"]
        print(f"\n{kind}: {PROJECTS[kind]}-node project, best of {args.rounds} rounds (wall seconds of `dbt build`)\n")
        later = " later builds | later / duckdb |" if args.later else ""
        print("| way | first build | second build | first / duckdb | second / duckdb |" + later)
        print("|---|---|---|---|---|" + ("---|---|" if args.later else ""))
        for name, b in best.items():
            row = (f"| {name} | {b['first']:.1f} s | {b['second']:.1f} s | {b['first'] / duck['first']:.2f}x "
                   f"| {b['second'] / duck['second']:.2f}x |")
            if args.later:
                row += f" {b['later']:.1f} s | {b['later'] / duck['later']:.2f}x |"
            print(row)
    saved = {"rounds": args.rounds, "later": args.later, "nodes": {kind: PROJECTS[kind] for kind in results},
             "measured": time.strftime("%Y-%m-%d"), "best": results, "runs": runs}
    if args.json:
        Path(args.json).write_text(json.dumps(saved, indent=1))
    if args.plot:
        import plots  # matplotlib only when plotting

        plots.dev_loop_builds(saved, args.plot)
    shutil.rmtree(work, ignore_errors=True)


def run_project(work: Path, env: dict, kind: str, rounds: int, way_names: list[str],
                connect_url: str | None, later: int = 0) -> dict:
    base = work / kind
    profiles = {
        "duckdb": {"type": "duckdb", "path": str(base / "duckdb" / "dev.duckdb"), "schema": "main", "threads": 4},
        "deltalog-server": {"type": "deltalog", "schema": "main", "threads": 4, "spark_server": True},
        "deltalog-connect": {"type": "deltalog", "schema": "main", "threads": 4, "method": "connect",
                             "host": connect_url},
        "deltalog-inprocess": {"type": "deltalog", "schema": "main", "threads": 4, "spark_server": False},
        "deltalog-spark-tests": {"type": "deltalog", "schema": "main", "threads": 4, "spark_server": True,
                                 "small_tests_here": False},
    }
    ways = {name: profiles[name] for name in way_names}
    for name, profile in ways.items():
        if name != "duckdb":
            profile["warehouse"] = str(base / f"warehouse-{name}")
    projects = {name: make_project(base / name, profile, kind) for name, profile in ways.items()}
    times = {name: {"first": [], "second": [], "later": []} for name in ways}
    try:
        for r in range(rounds):
            for name, project in projects.items():
                stop_servers(env)  # a first build starts from nothing: no server, no partial parse
                shutil.rmtree(project / "target", ignore_errors=True)
                for run in ("first", "second"):
                    times[name][run].append(build(project, env, PROJECTS[kind]))
                laters = [build(project, env, PROJECTS[kind]) for _ in range(later)]
                if laters:
                    times[name]["later"].append(statistics.median(laters))
                print(f"{kind} round {r + 1} {name}: first {times[name]['first'][-1]:.1f} s, "
                      f"second {times[name]['second'][-1]:.1f} s"
                      + (f", later {' '.join(f'{t:.1f}' for t in laters)} s" if laters else ""), flush=True)
        compare_rows(work, kind, [w for w in ways if w != "duckdb"])
    finally:
        stop_servers(env)
    return times  # every build's seconds, per way and build (first, second, later)


if __name__ == "__main__":
    main()
