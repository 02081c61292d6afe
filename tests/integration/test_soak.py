"""A day of dbt commands on a generated project of about 40 nodes (tests/support/soak_project.py), as users run
them, each command its own process: `seed`, `build`, ten `run --vars 'round: N'` (five in CI's selection), `snapshot`, `test`,
`run --select` and `--exclude`, a failing model then `retry`, `--full-refresh`, `docs generate`,
`source freshness`, a Ctrl-C in the middle of a run and the run after it.

After every command every table is read with delta-rs and must equal what DuckDB computes from the
seeds for the round its model last ran with (run_results.json says which models ran). Threads 1, 4 and 8,
with the Spark server and without: CI runs threads 8 with the server; DELTALOG_FULL_SUITE=1 runs all six."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import deltalake
import pytest

from tests.support import dbt_process as cli
from tests.support import soak_project as soak
from tests.support.selection import FULL, full_only

pytestmark = [pytest.mark.dbt, pytest.mark.spark]

CONFIGS = [pytest.param(8, True, id="threads8-server")] + [
    pytest.param(t, s, id=f"threads{t}-{'server' if s else 'jvm'}",
                 marks=full_only("threads 8 with the server runs every command of the day"))
    for t, s in [(1, True), (4, True), (1, False), (4, False), (8, False)]]
# `dbt run` rounds after the first build: ten in the full suite, five in CI's (19 commands in the day, not 24)
LAST = 11 if FULL else 6


class Day:
    def __init__(self, project: Path):
        self.project = project
        self.oracle = soak.Oracle(project)
        self.built_at: dict = {}  # model -> the round of the rows it last read, when it last succeeded
        self.snapshot_at = None  # the round customer_totals was at when the snapshot last ran
        self.commands = 0
        self.log = []

    def dbt(self, *args: str, round_: int | None = None, built_round: int | None = None, expect_ok: bool = True):
        """Run a command; `built_round`: the round the models it builds run with (default `round_`)."""
        argv = list(args) + (["--vars", f"{{round: {round_}}}"] if round_ is not None else [])
        started = time.monotonic()
        result = cli.dbt(self.project, *argv, timeout=900)
        self.commands += 1
        out = result.stdout + result.stderr
        self.log.append(f"dbt {' '.join(argv)}: exit {result.returncode} in {time.monotonic() - started:.1f} s")
        if expect_ok:
            assert result.returncode == 0, f"dbt {' '.join(argv)} failed:\n{out[-8000:]}"
        assert "partially initialized module" not in out and "deadlock detected" not in out, out[-8000:]
        if args[0] in ("run", "build", "retry", "snapshot"):
            self.record(built_round if built_round is not None else round_)
        self.check(f"after dbt {' '.join(argv)}")
        return result

    def record(self, round_: int) -> None:
        """The models (and the snapshot) the command built, from its run_results.json."""
        done = json.loads((self.project / "target" / "run_results.json").read_text())
        succeeded = [r["unique_id"] for r in done["results"] if r["status"] == "success"]
        for unique_id in succeeded:  # in the order they finished: a model after the ones it reads
            if unique_id.startswith("model."):
                name = unique_id.split(".", 2)[2]
                upstream = soak.READS_ROUND_OF.get(name)
                self.built_at[name] = round_ if upstream is None else self.built_at[upstream]
        if any(u.startswith("snapshot.") for u in succeeded):
            self.snapshot_at = self.built_at["customer_totals"]

    def check(self, when: str) -> None:
        warehouse = self.project / "warehouse" / "analytics"
        for table, columns in soak.TABLES.items():
            if table not in self.built_at:
                continue
            got = deltalake.DeltaTable(str(warehouse / table)).to_pyarrow_table(columns=columns).to_pylist()
            rows = sorted(tuple(r[c] for c in columns) for r in got)
            assert rows == self.oracle.rows(table, self.built_at[table]), \
                f"{when}: {table} (built with round {self.built_at[table]}) differs from DuckDB's"
        if self.snapshot_at is not None:
            snap = deltalake.DeltaTable(str(warehouse / "tier_snapshot")).to_pyarrow_table().to_pylist()
            current = sorted((r["customer_id"], r["tier"], r["total"]) for r in snap if r["dbt_valid_to"] is None)
            assert current == self.oracle.snapshot_current(self.snapshot_at), f"{when}: tier_snapshot"


@pytest.mark.parametrize("threads,server", CONFIGS)
def test_a_day_of_commands(tmp_path, threads, server):
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

    stop_servers()
    project = soak.write(tmp_path / "soak", threads, server)
    day = Day(project)
    try:
        day.dbt("seed")
        day.dbt("build", round_=1)
        for n in range(2, LAST + 1):
            day.dbt("run", round_=n)
        day.dbt("snapshot", round_=LAST)
        day.dbt("test", round_=LAST)
        day.dbt("run", "--select", "customer_totals+", round_=LAST + 1)
        day.dbt("run", "--exclude", "customer_totals+", round_=LAST + 1)

        soak.marker(project).write_text("fail once\n")
        failed = day.dbt("run", round_=LAST + 1, expect_ok=False)
        assert failed.returncode == 1 and "flaky: the marker file is there" in failed.stdout, failed.stdout[-4000:]
        soak.marker(project).unlink()
        day.dbt("retry", built_round=LAST + 1)  # the failed model, with the failed command's vars
        assert day.built_at["flaky"] == LAST + 1

        day.dbt("run", "--full-refresh", round_=LAST + 1)
        day.dbt("docs", "generate", round_=LAST + 1)
        catalog = json.loads((project / "target" / "catalog.json").read_text())
        assert "model.soak.customer_totals" in catalog["nodes"]
        day.dbt("source", "freshness")
        assert json.loads((project / "target" / "sources.json").read_text())["results"][0]["status"] == "pass"

        _interrupt_a_run(day)
        day.dbt("run", round_=LAST + 1)
        day.dbt("build", round_=LAST + 1)
    finally:
        stop_servers()
        print(f"\nsoak threads={threads} server={server}: {day.commands} commands\n" + "\n".join(day.log))


def _interrupt_a_run(day: Day) -> None:
    """Ctrl-C while the slow model's Spark job runs: nothing half-written, every table as before."""
    # each of the slow model's 4 tasks sleeps 10 s: the signal lands mid-job however slowly the START line
    # reaches us (at 250 ms a row the job could end before it, and the run then succeeded)
    running = cli.start_dbt(day.project, "run", "--vars", f"{{round: {LAST + 1}, sleep_ms: 1000}}")
    try:
        cli.wait_for_line(running, "START sql table model `analytics.slow`", timeout=300)
        time.sleep(2)
        running.send_signal(signal.SIGINT)
        running.communicate(timeout=180)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    day.commands += 1
    day.log.append(f"dbt run (Ctrl-C mid-run): exit {running.returncode}")
    assert running.returncode != 0
    day.check("after Ctrl-C")
