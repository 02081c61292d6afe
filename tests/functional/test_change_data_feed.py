"""The change data feed through dbt: `change_data_feed: true` on an incremental merge model, and a
downstream model that consumes exactly the changes it has not seen (`changes_since_last_run`), recorded
in the same commit as its output. Killed at random points and rerun, its output is what one
uninterrupted reading of the changes gives: nothing skipped, nothing repeated."""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from deltalog.snapshot import Snapshot
from tests.support import dbt_process as cli
from tests.support.selection import FULL

pytestmark = pytest.mark.dbt

ORDERS = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', change_data_feed=true) }}
select id, cast(id * {{ var('factor', 1) }} as bigint) as amount from range({{ var('lo', 0) }}, {{ var('hi', 10) }})
"""

ORDER_CHANGES = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id, amount, _change_type, _commit_version from {{ changes_since_last_run(ref('orders')) }}
"""


def _table(path) -> pa.Table:
    return pa.table(deltalake.DeltaTable(str(path)).to_pyarrow_table())


def _consumed(orders: Path, changes: Path) -> int:
    """The version of `orders` the changes model's table records as read (its txn)."""
    app = f"dbt-deltalog changes of {Snapshot.load(str(orders)).metadata.id}"
    return Snapshot.load(str(changes)).app_transactions[app]


def _expected(orders: Path, first: int, last: int) -> Counter:
    """What reading `orders` once gives: its rows at `first` as inserts, then every change after it."""
    start = deltalake.DeltaTable(str(orders), version=first).to_pyarrow_table()
    out = Counter((r["id"], r["amount"], "insert", first) for r in pa.table(start).to_pylist())
    if last > first:
        feed = pa.table(deltalake.DeltaTable(str(orders)).load_cdf(starting_version=first + 1,
                                                                  ending_version=last).read_all())
        out.update((r["id"], r["amount"], r["_change_type"], r["_commit_version"]) for r in feed.to_pylist())
    return out


def _got(changes: Path) -> Counter:
    return Counter((r["id"], r["amount"], r["_change_type"], r["_commit_version"])
                   for r in _table(changes).to_pylist())


class TestChangesSinceLastRun:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": ORDERS, "order_changes.sql": ORDER_CHANGES}

    def test_each_change_is_consumed_once(self, project, deltalog_warehouse):
        base = Path(deltalog_warehouse) / project.test_schema
        orders, changes = base / "orders", base / "order_changes"
        run_dbt(["run"])
        first = _consumed(orders, changes)
        assert first == deltalake.DeltaTable(str(orders)).version()
        assert _got(changes) == _expected(orders, first, first)  # a first build reads every row

        run_dbt(["run", "-s", "orders", "--vars", json.dumps({"factor": 2, "lo": 5, "hi": 12})])
        run_dbt(["run", "-s", "order_changes"])
        latest = deltalake.DeltaTable(str(orders)).version()
        assert _consumed(orders, changes) == latest
        got = _got(changes)
        assert got == _expected(orders, first, latest)
        assert got[(7, 7, "update_preimage", latest)] == 1 and got[(7, 14, "update_postimage", latest)] == 1
        assert got[(11, 22, "insert", latest)] == 1

        # nothing new upstream: the rerun adds no row, and its commit records the same version
        before = deltalake.DeltaTable(str(changes)).version()
        run_dbt(["run", "-s", "order_changes"])
        assert _got(changes) == got and _consumed(orders, changes) == latest
        assert deltalake.DeltaTable(str(changes)).version() == before + 1

    def test_a_table_built_before_it_read_changes_needs_a_full_refresh(self, project, deltalog_warehouse):
        run_dbt(["run", "-s", "orders"])
        (Path(project.project_root) / "models" / "order_changes.sql").write_text(
            "{{ config(materialized='incremental', incremental_strategy='append') }}\n"
            "select id, amount, 'insert' as _change_type, 0L as _commit_version from {{ ref('orders') }}\n")
        run_dbt(["run", "-s", "order_changes", "--full-refresh"])
        (Path(project.project_root) / "models" / "order_changes.sql").write_text(ORDER_CHANGES)
        base = Path(deltalog_warehouse) / project.test_schema
        before = deltalake.DeltaTable(str(base / "order_changes")).version()
        _, out = run_dbt_and_capture(["run", "-s", "order_changes"], expect_pass=False)
        assert "--full-refresh" in out and "records no version" in out
        assert deltalake.DeltaTable(str(base / "order_changes")).version() == before
        run_dbt(["run", "-s", "order_changes", "--full-refresh"])
        assert _consumed(base / "orders", base / "order_changes") == deltalake.DeltaTable(str(base / "orders")).version()


def test_killed_runs_neither_skip_nor_repeat_a_change(tmp_path):
    """The consumer is killed at random points of its run (reading changes, writing, committing), then
    rerun to the end: its table always equals one uninterrupted reading of the upstream's changes."""
    project = cli.project(tmp_path / "p")
    (project / "models" / "orders.sql").write_text(ORDERS)
    (project / "models" / "order_changes.sql").write_text(ORDER_CHANGES)
    orders = project / "warehouse" / "analytics" / "orders"
    changes = project / "warehouse" / "analytics" / "order_changes"
    built = cli.dbt(project, "run", "-s", "orders", "order_changes")
    assert built.returncode == 0, built.stdout + built.stderr
    first = _consumed(orders, changes)
    rng = random.Random(12)
    killed_before_commit = killed_after_commit = 0
    for trial in range(4 if FULL else 3):
        upstream = cli.dbt(project, "run", "-s", "orders", "--vars",
                           json.dumps({"factor": trial + 2, "lo": 3 * trial, "hi": 10 + 4 * trial}))
        assert upstream.returncode == 0, upstream.stdout + upstream.stderr
        latest = deltalake.DeltaTable(str(orders)).version()
        before = deltalake.DeltaTable(str(changes)).version()
        run = cli.start_dbt(project, "run", "-s", "order_changes")
        try:
            cli.wait_for_line(run, "START sql incremental model")
            # the first kill as the model starts (a warm server may commit an append in under a second)
            delay = rng.uniform(0.0, 6.0)
            time.sleep(0.0 if trial == 0 else delay)
            run.kill()
            run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
        if deltalake.DeltaTable(str(changes)).version() > before:
            killed_after_commit += 1
        else:
            killed_before_commit += 1
        rerun = cli.dbt(project, "run", "-s", "order_changes")
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert _consumed(orders, changes) == latest
        assert _got(changes) == _expected(orders, first, latest), f"trial {trial}"
    assert killed_before_commit >= 1  # the kills really interrupted runs
