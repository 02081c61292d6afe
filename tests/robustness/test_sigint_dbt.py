"""Ctrl-C (a real SIGINT) delivered to a `dbt run` process whose Spark runs inside it, mid-model: the
command stops, the table stays at its last version with every row, and the next run builds on it."""

from __future__ import annotations

import signal
import time

import deltalake

from tests.support import dbt_process as cli


def test_sigint_mid_model_leaves_the_table_whole(tmp_path):
    project = cli.project(tmp_path / "p", spark_server=False)
    built = cli.dbt(project, "run", "-s", "slow")
    assert built.returncode == 0, built.stdout + built.stderr
    table = str(project / "warehouse" / "analytics" / "slow")

    running = cli.start_dbt(project, "run", "-s", "slow", "--vars", "{sleep_ms: 400}")
    try:
        cli.wait_for_line(running, "START sql table model")
        time.sleep(2)  # inside the model's Spark job
        running.send_signal(signal.SIGINT)
        running.communicate(timeout=120)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode != 0
    assert deltalake.DeltaTable(table).version() == 0
    assert cli.rows(project, "slow") == list(range(40))

    again = cli.dbt(project, "run", "-s", "slow")
    assert again.returncode == 0, again.stdout + again.stderr
    assert deltalake.DeltaTable(table).version() == 1
    assert cli.rows(project, "slow") == list(range(40))
