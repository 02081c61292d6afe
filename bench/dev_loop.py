"""The dev loop and CI: `dbt build` on dbt-deltalog, dbt-duckdb and dbt-sail, in one run.

    pip install -e '.[bench,connect]'      # the peer, dbt-duckdb; Spark's Connect client
    python bench/dev_loop.py               # 3 rounds of the generated projects, dbt-duckdb and deltalog ways

Three projects (SQL that every engine runs):

  jaffle       generated: 3 seeds, 3 staging views, 2 mart tables, 20 data tests: 28 nodes
  jaffle_shop  dbt's jaffle_shop project's exact shape, written here (bench/jaffle_shop_project.py): its
               seeds (100 customers, 99 orders, 113 payments), staging views in CTEs, the customers and
               orders marts (payment methods pivoted), two schema files with docs and its 20 tests: 28 nodes
  tests        generated: 8 seeds, 8 staging views, 8 tables, 144 data tests: 168 nodes, mostly tests on
               small tables, as a package's integration project is

and the ways to build each, each build a fresh `dbt build` process, wall time measured around it:

  duckdb             dbt-duckdb on a DuckDB file (always run: rows and ratios are taken against it)
  deltalog-server    dbt-deltalog with `spark_server: true`: the first build of a round starts the local
                     Spark server (no server running before it), later builds attach to it
  deltalog-connect   dbt-deltalog with `method: connect` on a local Spark Connect server (pyspark's own,
                     local[*], started by this script before the rounds: its start is not in any build)
  deltalog-inprocess dbt-deltalog with `spark_server: false`: a JVM per command (the old behaviour)
  deltalog-spark-tests  as deltalog-server, with `small_tests_here: false`: every data test a Spark job
  deltalog-ci        dbt-deltalog with CI=true in the environment, the default profile: a JVM per command,
                     no server, as analytics-engineering CI runs it
  deltalog-ci-noarchive  as deltalog-ci, with `spark.deltalog.classArchive: false`: the JVM starts
                     without the class-data-sharing archive (deltalog/spark/class_archive.py), for the
                     archive's gain before/after in one run
  deltalog-ci-late   as deltalog-ci, with `spark.deltalog.startEarly: false`: Spark starts when the first
                     connection opens, after dbt's parse, instead of during it (the early start's gain)
  deltalog-ci-sparkseeds  as deltalog-ci, with `spark.deltalog.arrowSeeds: false`: every seed loaded by Spark
  deltalog-ci-eagercompiler  as deltalog-ci, with `spark.deltalog.lateOptimizingCompiler: false`: the JVM's
                     own thresholds for its optimizing compiler (the behaviour before)
  deltalog-server-eagercompiler  as deltalog-server, likewise
  sail-parquet       dbt-sail (Sail, a Spark Connect server in Rust, embedded in the dbt process, no JVM),
                     its default file format (Parquet tables in the project's spark-warehouse)
  sail-delta         dbt-sail with `file_format: delta` and an absolute `location_root`, for models and seeds

dbt-sail runs from its own virtual environment, `.bench-cache/sail-venv` (made when missing: dbt-sail
needs dbt-spark[session]'s pyspark, and pysail 0.7 answers Spark Connect clients up to 4.2).

Every deltalog way runs with XDG_CACHE_HOME in a folder of its own under the bench's work folder: its
first build of the first round has no class archive and an empty warehouse, as a user's first command on
a machine (or every CI build that keeps no cache) would, and is reported on its own (`first-ever`); the
archive is recorded in the background after it, and the next way starts once no archive is being
recorded. `first` is the best of later rounds' first builds.

A round is: first build (no server, no `target/`), then a second build of the unchanged project (dbt's
partial parse, the server warm), per way; with `--later N`, N more builds after those (a dev loop's later
builds). Reported as a markdown table per project: the best of the rounds for each (for later builds, the
median of each round's, then the best), the ratios to dbt-duckdb's builds and to dbt-sail's (Parquet)
first build. A build that fails or does not pass every node is reported (the way's row says which build
and which nodes) instead of stopping the bench, and left out of the best times. After the rounds, every
table the project stores (jaffle_shop: the seeds too) is read back, Delta tables with `deltalake`, Sail's
Parquet with pyarrow, and compared with dbt-duckdb's rows; a difference marks the way incorrect.

The whole comparison (issue 57), on an idle machine:

    python bench/dev_loop.py --rounds 3 --later 3 --projects jaffle_shop tests \
        --ways duckdb deltalog-server deltalog-ci deltalog-ci-noarchive sail-parquet sail-delta --json dev-loop.json

`--before CHECKOUT` (a folder holding an older commit of this repository, e.g. `git worktree add
/tmp/before HEAD~3`) adds, for each deltalog way, the way `<way>@before`: the same profile with that
checkout's `dbt/adapters/deltalog` and `deltalog` first on PYTHONPATH, for a change's before/after in
one run.

`--command test` times `dbt test` instead of `dbt build` (each round builds the project first, untimed,
then stops the server and removes `target/`): a CI job's separate test step.

`--json PATH` writes every build's time and problem, the best of each, and the rows' verdicts; `--plot
PATH.svg` draws the best first and second builds per way as bars, a panel per project (bench/plots.py).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import csv
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

DBT = Path(sys.executable).with_name("dbt")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/support/spark_connect.py starts the Connect server

import jaffle_shop_project  # noqa: E402  (bench/, this script's folder)

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


PROJECTS = {"jaffle": 28, "tests": 168, "jaffle_shop": jaffle_shop_project.NODES}  # nodes that must pass
DATA_TESTS = {"jaffle": 20, "tests": 144, "jaffle_shop": 20}  # what `dbt test` runs of each


def make_project(root: Path, profile: dict, kind: str = "jaffle", configs: dict | None = None) -> Path:
    """The project `kind` in `root`, built with `profile`; `configs` (e.g. a file format) set for all models and
    seeds in dbt_project.yml."""
    (root / "models" / "staging").mkdir(parents=True, exist_ok=True)
    if kind == "jaffle":
        for rel, sql in MODELS.items():
            (root / "models" / rel).write_text(sql)
        (root / "models" / "schema.yml").write_text(SCHEMA_YML)
        write_seeds(root / "seeds")
    elif kind == "jaffle_shop":
        jaffle_shop_project.write_project(root)
    else:
        write_test_heavy(root)
    project_yml = PROJECT_YML
    if configs:
        settings = "".join(f"    +{key}: {json.dumps(value)}\n" for key, value in configs.items())
        project_yml = project_yml.replace("  dev_loop:\n", "  dev_loop:\n" + settings, 1)
        project_yml += "seeds:\n  dev_loop:\n" + settings
    (root / "dbt_project.yml").write_text(project_yml)
    (root / "profiles.yml").write_text(json.dumps({"dev_loop": {"target": "dev", "outputs": {"dev": profile}}}))
    return root


@dataclass
class Way:
    """How one way builds: its profile, the `dbt` it runs, the environment it adds (None: removed), the
    configs its project sets for every model and seed."""
    profile: dict
    dbt: Path = DBT
    env: dict = field(default_factory=dict)
    configs: dict = field(default_factory=dict)
    deltalog: bool = True


SAIL_VENV = ROOT / ".bench-cache" / "sail-venv"
# dbt-sail pulls dbt-spark[session] (its own pyspark); pysail 0.7 refuses a 4.3 client (checked with 4.2.0)
SAIL_PACKAGES = ["dbt-sail", "pysail", "pyspark[connect]==4.2.0"]


def sail_dbt() -> Path:
    """dbt with dbt-sail, from a virtual environment of its own (its pyspark is not ours), made when missing."""
    dbt = SAIL_VENV / "bin" / "dbt"
    if not dbt.exists():
        print(f"installing {' '.join(SAIL_PACKAGES)} into {SAIL_VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(SAIL_VENV)], check=True)
        subprocess.run([str(SAIL_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "-c",
                        str(ROOT / "constraints.txt"), *SAIL_PACKAGES], check=True)
    return dbt


def sail_versions() -> str:
    done = subprocess.run([str(SAIL_VENV / "bin" / "python"), "-c",
                           "import importlib.metadata as m; print(', '.join(p + ' ' + m.version(p) for p in "
                           "('dbt-sail', 'pysail', 'pyspark', 'dbt-core')))"], capture_output=True, text=True)
    return done.stdout.strip()


# a process outside our venv: none of our paths, nor the Spark our pyspark would start
SAIL_ENV = {"PYTHONPATH": None, "VIRTUAL_ENV": None, "SPARK_HOME": None, "PYSPARK_PYTHON": None}

WAY_NAMES = ["duckdb", "deltalog-server", "deltalog-connect", "deltalog-inprocess", "deltalog-spark-tests",
             "deltalog-ci", "deltalog-ci-noarchive", "deltalog-ci-late", "deltalog-ci-sparkseeds", "deltalog-ci-eagercompiler",
             "deltalog-server-eagercompiler", "sail-parquet",
             "sail-delta"]


def make_ways(base: Path, names: list[str], connect_url: str | None, before: Path | None = None) -> dict[str, Way]:
    def deltalog(**profile) -> dict:
        return {"type": "deltalog", "schema": "main", "threads": 4, **profile}

    EAGER = "spark.deltalog.lateOptimizingCompiler"  # `false`: the JVM's own compiler thresholds
    ci = {"CI": "true"}  # spark_server's `auto` is off in CI: a JVM per command
    made = {
        "duckdb": lambda: Way({"type": "duckdb", "path": str(base / "duckdb" / "dev.duckdb"), "schema": "main",
                               "threads": 4}, deltalog=False),
        "deltalog-server": lambda: Way(deltalog(spark_server=True)),
        "deltalog-connect": lambda: Way(deltalog(method="connect", host=connect_url)),
        "deltalog-inprocess": lambda: Way(deltalog(spark_server=False)),
        "deltalog-spark-tests": lambda: Way(deltalog(spark_server=True, small_tests_here=False)),
        "deltalog-ci": lambda: Way(deltalog(), env=ci),
        "deltalog-ci-noarchive": lambda: Way(deltalog(spark_conf={"spark.deltalog.classArchive": "false"}), env=ci),
        "deltalog-ci-late": lambda: Way(deltalog(spark_conf={"spark.deltalog.startEarly": "false"}), env=ci),
        "deltalog-ci-sparkseeds": lambda: Way(deltalog(spark_conf={"spark.deltalog.arrowSeeds": "false"}), env=ci),
        "deltalog-ci-eagercompiler": lambda: Way(deltalog(spark_conf={EAGER: "false"}), env=ci),
        "deltalog-server-eagercompiler": lambda: Way(deltalog(spark_server=True, spark_conf={EAGER: "false"})),
        "sail-parquet": lambda: Way({"type": "sail", "schema": "main", "threads": 4}, dbt=sail_dbt(),
                                    env=SAIL_ENV, deltalog=False),
        "sail-delta": lambda: Way({"type": "sail", "schema": "main", "threads": 4}, dbt=sail_dbt(), env=SAIL_ENV,
                                  configs={"file_format": "delta", "location_root": str(base / "warehouse-sail-delta")},
                                  deltalog=False),
    }
    chosen = [(name, made[name]()) for name in names]
    if before is not None:
        for name, way in list(chosen):
            if way.deltalog:
                old = made[name]()
                old.env = {**old.env, "PYTHONPATH": str(before)}  # ahead of the editable install
                chosen.append((f"{name}@before", old))
    ways = {}
    for name, way in chosen:
        if way.deltalog:
            way.profile["warehouse"] = str(base / f"warehouse-{name}")
            # the class archive the local JVM records and maps: this way's own, so its first build records it
            way.env = {**way.env, "XDG_CACHE_HOME": str(base / f"cache-{name}")}
        ways[name] = way
    return ways


def build(project: Path, way: Way, env: dict, nodes: int, command: str = "build") -> tuple[float, str | None]:
    """Seconds of one `dbt <command>` and what was wrong with it (None: every node passed)."""
    env = {k: v for k, v in {**env, **way.env}.items() if v is not None}
    if way.dbt != DBT:
        env["PATH"] = f"{way.dbt.parent}{os.pathsep}{env.get('PATH', '')}"
    started = time.perf_counter()
    done = subprocess.run([str(way.dbt), command, "--profiles-dir", str(project), "--project-dir", str(project)],
                          cwd=project, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode == 0 and f"PASS={nodes} " in done.stdout:
        return elapsed, None
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)  # dbt colours its summary
    summary = re.findall(r"PASS=\d+ WARN=\d+ ERROR=\d+ SKIP=\d+", plain)
    failed = re.findall(r"(?:\]: in|Failure in|Error in) (?:test|model|seed|snapshot) (\S+)", plain)
    problem = (summary[-1] if summary else f"exit code {done.returncode}") + (f" ({', '.join(failed[:4])}"
                                                                              f"{', ...' if len(failed) > 4 else ''})"
                                                                              if failed else "")
    (project / "last-failed-build.log").write_text(done.stdout + done.stderr)
    return elapsed, problem


def stop_servers(env: dict) -> None:
    subprocess.run([sys.executable, "-m", "dbt.adapters.deltalog.runtime.spark_server", "stop"], env=env,
                   capture_output=True, check=True)
    wait_for_archive_recorders()


# a class archive being recorded in the background (the recorder, or an older tree's JVM writing it at exit)
RECORDING = ("dbt.adapters.deltalog.runtime.archive_recorder", "deltalog.spark.class_archive", "-XX:ArchiveClassesAtExit")


def wait_for_archive_recorders(timeout_s: float = 600) -> None:
    """Until no class archive is being recorded: one way's recording is not another way's neighbour."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        recording = False
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            recording = recording or any(mark in cmdline for mark in RECORDING)
        if not recording:
            return
        time.sleep(1)


def stored_tables(kind: str) -> tuple[str, ...]:
    if kind == "jaffle":
        return ("customers", "orders")
    if kind == "jaffle_shop":
        return jaffle_shop_project.STORED_TABLES  # the seeds too: a seed appended to is caught
    return tuple(ENTITIES)


def read_table(base: Path, way: str, table: str) -> list[dict]:
    if way.startswith("deltalog") or way == "sail-delta":
        from deltalake import DeltaTable

        folder = base / f"warehouse-{way}" / "main" / table
        if way == "sail-delta":  # location_root/<table>
            folder = base / f"warehouse-{way}" / table
        return DeltaTable(str(folder)).to_pyarrow_table().to_pylist()
    if way == "sail-parquet":
        import pyarrow.parquet as pq

        # Sail's embedded catalog lives as long as its process: each build writes every table into a new
        # folder <table>-<uuid> of the project's spark-warehouse; the newest is the last build's
        folders = sorted((base / way / "spark-warehouse").glob(f"{table}-*"), key=lambda p: p.stat().st_mtime)
        if not folders:
            raise FileNotFoundError(f"no folder {table}-* in {base / way / 'spark-warehouse'}")
        return pq.read_table(str(folders[-1])).to_pylist()
    raise ValueError(f"no reader for way {way}")


def compare_rows(work: Path, kind: str, ways: list[str]) -> dict[str, str | None]:
    """Per way: None when every stored table of the project equals DuckDB's (rows as sorted tuples, amounts
    rounded), else what differs."""
    import duckdb

    con = duckdb.connect(str(work / kind / "duckdb" / "dev.duckdb"), read_only=True)

    def norm(rows):
        return sorted(tuple(round(float(v), 2) if isinstance(v, (float, int, Decimal)) and not isinstance(v, bool)
                            else (None if v is None else str(v)) for v in row) for row in rows)

    verdicts: dict[str, str | None] = {way: None for way in ways}
    for table in stored_tables(kind):
        theirs = norm(con.execute(f"select * from main.{table}").fetchall())
        for way in ways:
            if verdicts[way]:
                continue
            try:
                ours = norm([tuple(r.values()) for r in read_table(work / kind, way, table)])
            except Exception as e:  # a table the way did not write
                verdicts[way] = f"{table}: not readable ({type(e).__name__}: {str(e)[:200]})"
                continue
            if ours != theirs:
                verdicts[way] = f"{table}: {len(ours)} rows, dbt-duckdb's {len(theirs)}, not the same"
    con.close()
    return verdicts


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def seconds(b: dict, run: str) -> str:
    if b.get(run):
        return f"{b[run]:.1f} s"
    return f"{b[f'{run}_failed']:.1f} s (failed)" if b.get(f"{run}_failed") else "-"


def report(kind: str, saved: dict) -> None:
    best, rounds, later = saved["best"][kind], saved["rounds"], saved["later"]
    duck = best.get("duckdb", {})
    sail = best.get("sail-parquet", {})
    sail_first = sail.get("first")
    print(f"\n{kind}: {PROJECTS[kind]}-node project; first-ever: round 1's first build (a new warehouse; "
          f"a deltalog way: no class archive yet); first: the best of later rounds' first builds; second / later: "
          f"best of {rounds} rounds (wall seconds of `dbt {saved.get('command', 'build')}`)\n")
    head = ["way", "first-ever", "first", "second"] + (["later"] if later else []) + [
        "first-ever / sail's", "first / sail first", "second / sail first", "first / duckdb", "second / duckdb"] + (
        ["later / duckdb"] if later else []) + ["result"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, b in best.items():
        row = [name, seconds(b, "first_ever"), seconds(b, "first"), seconds(b, "second")]
        if later:
            row.append(seconds(b, "later"))
        row += [ratio(b.get("first_ever"), sail.get("first_ever")), ratio(b.get("first"), sail_first), ratio(b.get("second"), sail_first),
                ratio(b.get("first"), duck.get("first")), ratio(b.get("second"), duck.get("second"))]
        if later:
            row.append(ratio(b.get("later"), duck.get("later")))
        problems = saved["problems"][kind].get(name, [])
        rows = saved["rows"][kind].get(name)
        verdict = "; ".join(problems[:3] + ([f"rows differ from dbt-duckdb's: {rows}"] if rows else []))
        row.append(f"**FAILED / INCORRECT**: {verdict}" if verdict else
                   ("ok" if name == "duckdb" else "ok, rows = dbt-duckdb's"))
        print("| " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--projects", nargs="+", choices=sorted(PROJECTS), default=["jaffle", "tests"])
    parser.add_argument("--ways", nargs="+", choices=WAY_NAMES, default=["duckdb", "deltalog-server",
                                                                          "deltalog-connect", "deltalog-inprocess"])
    parser.add_argument("--later", type=int, default=0, help="builds after the second, per round")
    parser.add_argument("--json", help="write every build's time and the best of each here")
    parser.add_argument("--plot", help="draw first and second builds per way into this SVG")
    parser.add_argument("--command", choices=["build", "test"], default="build",
                        help="what each timed command runs (`test`: the project built untimed first, each round)")
    parser.add_argument("--before", type=Path, help="a checkout of an older commit: adds <way>@before per deltalog way")
    args = parser.parse_args()
    if "duckdb" not in args.ways:
        parser.error("--ways needs duckdb: every way's rows and ratios are taken against it")
    try:
        import dbt.adapters.duckdb  # noqa: F401
    except ImportError:
        sys.exit("dbt-duckdb is the peer of this benchmark: pip install 'dbt-duckdb>=1.10,<1.12'")
    if any(w.startswith("sail") for w in args.ways):
        sail_dbt()
        print(f"dbt-sail from {SAIL_VENV}: {sail_versions()}", flush=True)

    # each way's Python byte-compiled, as an installed package is (pip compiles what it installs; this checkout
    # and a `--before` one would compile on every command where PYTHONDONTWRITEBYTECODE is set)
    for folder in [ROOT / "deltalog", ROOT / "dbt" / "adapters" / "deltalog", *([args.before] if args.before else [])]:
        compileall.compile_dir(str(folder), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="dev-loop-"))
    env = dict(os.environ, DBT_DELTALOG_SERVER_DIR=str(work / "servers"), DO_NOT_TRACK="1",
               DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    env.pop("CI", None)
    saved = {"rounds": args.rounds, "later": args.later, "nodes": {kind: PROJECTS[kind] for kind in args.projects},
             "measured": time.strftime("%Y-%m-%d"), "command": args.command, "best": {}, "runs": {}, "problems": {}, "rows": {}}
    with contextlib.ExitStack() as stack:
        connect_url = None
        if "deltalog-connect" in args.ways:
            from tests.support.spark_connect import spark_connect_server

            started = time.perf_counter()
            connect_url = stack.enter_context(spark_connect_server("local[*]"))
            print(f"local Spark Connect server started in {time.perf_counter() - started:.1f} s", flush=True)
        for kind in args.projects:
            runs, problems, rows = run_project(work, env, kind, args.rounds, args.ways, connect_url, args.later,
                                               args.before, args.command)
            saved["runs"][kind], saved["problems"][kind], saved["rows"][kind] = runs, problems, rows
            saved["best"][kind] = {name: best_of(times) for name, times in runs.items()}
    for kind in args.projects:
        report(kind, saved)
    if args.json:
        Path(args.json).write_text(json.dumps(saved, indent=1))
    if args.plot:
        import plots  # matplotlib only when plotting

        plots.dev_loop_builds(saved, args.plot)
    shutil.rmtree(work, ignore_errors=True)


def best_of(times: dict) -> dict:
    """The best of the builds that passed: the first-ever build (round 1's first) on its own, `first` the best
    of later rounds' first builds (round 1's when there is one round). Where no build of a kind passed, the
    best failed one's time under `<kind>_failed` (shown, never taken into a ratio)."""
    slots = {run: list(zip(times[run], times[f"{run}_problem"])) for run in ("first", "second", "later")}
    slots["first_ever"], slots["first"] = slots["first"][:1], slots["first"][1:] or slots["first"][:1]
    best = {}
    for run, builds in slots.items():
        passed = [t for t, problem in builds if problem is None]
        best[run] = min(passed) if passed else None
        if builds and not passed:
            best[f"{run}_failed"] = min(t for t, _ in builds)
    return best


def run_project(work: Path, env: dict, kind: str, rounds: int, way_names: list[str],
                connect_url: str | None, later: int = 0, before: Path | None = None,
                command: str = "build") -> tuple[dict, dict, dict]:
    base = work / kind
    ways = make_ways(base, way_names, connect_url, before)
    projects = {name: make_project(base / name, way.profile, kind, way.configs) for name, way in ways.items()}
    times = {name: {slot: [] for slot in ("first", "second", "later", "first_problem", "second_problem",
                                          "later_problem")} for name in ways}
    problems: dict[str, list[str]] = {name: [] for name in ways}
    try:
        for r in range(rounds):
            for name, project in projects.items():
                stop_servers(env)  # a first build starts from nothing: no server, no partial parse
                shutil.rmtree(project / "target", ignore_errors=True)
                if command == "test":  # what the tests read, built untimed; then from nothing again
                    _, problem = build(project, ways[name], env, PROJECTS[kind])
                    if problem:
                        problems[name].append(f"round {r + 1} build before the tests: {problem}")
                    stop_servers(env)
                    shutil.rmtree(project / "target", ignore_errors=True)
                laters = []
                nodes = DATA_TESTS[kind] if command == "test" else PROJECTS[kind]
                for run in ["first", "second"] + ["later"] * later:
                    elapsed, problem = build(project, ways[name], env, nodes, command)
                    if problem:
                        problems[name].append(f"round {r + 1} {run} build: {problem}")
                    if run == "later":
                        laters.append((elapsed, problem))
                    else:
                        times[name][run].append(elapsed)
                        times[name][f"{run}_problem"].append(problem)
                if laters:
                    times[name]["later"].append(statistics.median(t for t, _ in laters))
                    times[name]["later_problem"].append(next((p for _, p in laters if p), None))
                print(f"{kind} round {r + 1} {name}: first {times[name]['first'][-1]:.1f} s, "
                      f"second {times[name]['second'][-1]:.1f} s"
                      + (f", later {' '.join(f'{t:.1f}' for t, _ in laters)} s" if laters else "")
                      + "".join(f"; {p}" for p in problems[name] if p.startswith(f"round {r + 1} ")), flush=True)
        rows = compare_rows(work, kind, [w for w in ways if w != "duckdb"])
    finally:
        stop_servers(env)
    return times, problems, rows  # every build's seconds and problem, per way and build; rows' verdicts


if __name__ == "__main__":
    main()
