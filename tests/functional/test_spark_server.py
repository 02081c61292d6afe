"""The local Spark server (`spark_server: true`): dbt commands as a user runs them, each its own process.

One server per test here, in the test run's own server folder (conftest `spark_server_folder`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import pytest

from dbt.adapters.deltalog.runtime import spark_server
from dbt.adapters.deltalog.connections import SESSION_REACHED, DeltalogCredentials
from deltalog.processes import alive as _alive  # an exited server not yet reaped counts as gone
from tests.support import dbt_process as cli


def _server() -> dict:
    servers = spark_server.list_servers()
    assert len(servers) == 1, servers
    return servers[0]


@pytest.fixture(autouse=True)
def no_server_outlives_its_test():
    """Each test starts from no server: one left running would be attached to by the next."""
    spark_server.stop_servers()
    yield
    spark_server.stop_servers()


def test_commands_share_one_server(tmp_path):
    project = cli.project(tmp_path / "p")
    first = cli.dbt(project, "run", "-s", "numbers")
    assert first.returncode == 0, first.stdout + first.stderr
    server = _server()
    state_file = Path(spark_server.state_dir()) / f"{server['key']}.json"
    assert oct(state_file.stat().st_mode & 0o777) == "0o600"  # it holds the gateway's secret

    second = cli.dbt(project, "run", "-s", "numbers")
    assert second.returncode == 0, second.stdout + second.stderr
    assert _server()["pid"] == server["pid"]  # attached to the same JVM, none started
    assert "incubator" not in second.stdout + second.stderr  # the JVM's notices go to the server's log
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "numbers")).version() == 1
    assert cli.rows(project, "numbers") == list(range(10))

    debug = cli.dbt(project, "debug")
    assert f"Spark server: running (pid {server['pid']}" in debug.stdout, debug.stdout

    assert spark_server.stop_servers() == 1
    assert not _alive(server["pid"]) and not state_file.exists()


def test_a_command_attaches_to_a_running_server_only_when_a_statement_needs_spark(tmp_path):
    # attaching beside dbt's parse costs a build that needs no Spark its round trips (the GIL is shared)
    project = cli.project(tmp_path / "p")
    first = cli.dbt(project, "--debug", "run", "-s", "numbers")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Spark started early" in first.stdout  # no server yet: it starts while dbt parses
    again = cli.dbt(project, "--debug", "run", "-s", "numbers")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Spark started early" not in again.stdout
    assert "the Spark server is up: attaching when a statement needs it" in again.stdout
    assert SESSION_REACHED in again.stdout  # the model's Spark job attached then
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "numbers")).version() == 1


def test_a_server_stops_when_idle(tmp_path):
    # Its own test: a short idle timeout between commands would race a loaded machine's dbt start-up.
    project = cli.project(tmp_path / "p", idle_timeout=6)
    run = cli.dbt(project, "run", "-s", "numbers")
    assert run.returncode == 0, run.stdout + run.stderr
    server = _server()
    state_file = Path(spark_server.state_dir()) / f"{server['key']}.json"
    deadline = time.monotonic() + 90
    while _alive(server["pid"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(server["pid"]), "the server did not stop after its idle timeout"
    assert not state_file.exists()
    assert spark_server.list_servers() == []


def test_ctrl_c_stops_only_its_own_command_and_a_killed_command_loses_nothing(tmp_path):
    project = cli.project(tmp_path / "p")
    built = cli.dbt(project, "run", "-s", "slow", "slow_too")  # version 0 of both, 40 rows each
    assert built.returncode == 0, built.stdout + built.stderr
    pid = _server()["pid"]

    # Two commands on the server at once; Ctrl-C in the first interrupts its Spark jobs only.
    # (its model's Spark jobs take 20 s and more: still running when Ctrl-C comes, on a busy machine too)
    interrupted = cli.start_dbt(project, "run", "-s", "slow", "--vars", "{sleep_ms: 1000}")
    other = cli.start_dbt(project, "run", "-s", "slow_too", "--vars", "{sleep_ms: 100}")
    try:
        cli.wait_for_line(interrupted, "START sql table model")
        time.sleep(2)
        interrupted.send_signal(signal.SIGINT)
        out, _ = interrupted.communicate(timeout=120)
        assert interrupted.returncode != 0, out
        out, _ = other.communicate(timeout=300)
        assert other.returncode == 0, out  # its jobs were not cancelled with the other command's
    finally:
        for p in (interrupted, other):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert _alive(pid)
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "slow")).version() == 0
    assert cli.rows(project, "slow") == list(range(40))
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "slow_too")).version() == 1

    # A command killed mid-write: the server lives on, the table stays at its last version, and
    # the next command builds on the same server.
    killed = cli.start_dbt(project, "run", "-s", "slow", "--vars", "{sleep_ms: 400}")
    try:
        cli.wait_for_line(killed, "START sql table model")
        time.sleep(2)
        killed.kill()
        killed.wait(timeout=30)
    finally:
        if killed.poll() is None:
            killed.kill()
    assert _alive(pid)
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "slow")).version() == 0
    again = cli.dbt(project, "run", "-s", "slow")
    assert again.returncode == 0, again.stdout + again.stderr
    assert _server()["pid"] == pid
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "slow")).version() == 1
    assert cli.rows(project, "slow") == list(range(40))


def test_a_server_that_was_killed_is_replaced(tmp_path):
    project = cli.project(tmp_path / "p")
    assert cli.dbt(project, "run", "-s", "numbers").returncode == 0
    dead = _server()["pid"]
    os.kill(dead, signal.SIGKILL)  # its JVM ends with it (pyspark's gateway reads its stdin)
    deadline = time.monotonic() + 30
    while _alive(dead) and time.monotonic() < deadline:
        time.sleep(0.2)
    rerun = cli.dbt(project, "run", "-s", "numbers")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert _server()["pid"] != dead
    assert cli.rows(project, "numbers") == list(range(10))


@pytest.mark.parametrize("value, ci, master, expected", [
    ("auto", "", "local[*]", True),
    ("auto", "true", "local[*]", False),
    ("auto", "", "spark://host:7077", False),
    (True, "true", "spark://host:7077", True),
    ("false", "", "local[*]", False),
])
def test_when_the_server_is_used(monkeypatch, value, ci, master, expected):
    monkeypatch.setenv("CI", ci)
    creds = DeltalogCredentials.from_dict({"schema": "s", "master": master, "spark_server": value})
    assert creds.uses_spark_server() is expected


@pytest.mark.parametrize("field, value", [("spark_server", "sometimes"), ("spark_server_idle_timeout", 0),
                                          ("spark_server_idle_timeout", "ten")])
def test_bad_server_settings_are_named(field, value):
    with pytest.raises(Exception) as caught:
        DeltalogCredentials.from_dict({"schema": "s", field: value})
    assert field in str(caught.value) and repr(value) in str(caught.value)


def test_server_state_is_keyed_by_settings():
    base = spark_server.server_key("local[2]", {"a": "1"})
    assert base == spark_server.server_key("local[2]", {"a": "1"})
    assert base != spark_server.server_key("local[2]", {"a": "2"})
    assert base != spark_server.server_key("local[1]", {"a": "1"})
    # a switch only the dbt process reads shares the server; one the JVM reads does not
    assert base == spark_server.server_key("local[2]", {"a": "1", "spark.deltalog.answerReuse": "false",
                                                        "spark.deltalog.startEarly": "false"})
    assert base != spark_server.server_key("local[2]", {"a": "1", "spark.deltalog.classArchive": "false"})
    assert json.loads(json.dumps({"k": base}))["k"] == base


def _serves_here(pid: int) -> bool:
    """Whether the server process `pid` is one of this test run's folder (it runs in its state folder);
    the other test worker's servers have the same key."""
    try:
        return os.readlink(f"/proc/{pid}/cwd") == os.path.realpath(spark_server.state_dir())
    except OSError:
        return False


def test_a_command_that_ends_while_its_server_starts_leaves_one_server(tmp_path):
    # `dbt seed` of new seeds needs no Spark: it ends while the server it started early is still coming
    # up. The `dbt run` right after waits for that server instead of starting a second one.
    project = cli.project(tmp_path / "p")
    (project / "seeds").mkdir(exist_ok=True)
    (project / "seeds" / "letters.csv").write_text("id,letter\n1,a\n2,b\n")
    seeded = cli.dbt(project, "seed")
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    starting = [p for p in Path(spark_server.state_dir()).glob("*.starting")
                if spark_server._starting_pid(p.stem) is not None]
    built = cli.dbt(project, "run", "-s", "numbers")
    assert built.returncode == 0, built.stdout + built.stderr
    server = _server()
    serving = [line for line in os.popen("ps -ww -eo pid,args").read().splitlines()
               if f"spark_server serve {server['key']}" in line and _serves_here(int(line.split()[0]))]
    assert len(serving) == 1, serving
    if starting:  # the seed ended before its server was up: the run attached to that very server
        assert spark_server._starting_pid(server["key"]) is None
        assert int(starting[0].read_text()) == server["pid"]


ATTACH_FROM_A_THREAD = r"""
import json, os, sys, threading
from dbt.adapters.deltalog.runtime import spark_server

changed = []
for name in ("__setitem__", "__delitem__"):
    original = getattr(os._Environ, name)
    def watch(self, key, *rest, _original=original, _name=name):
        changed.append((_name, key))
        return _original(self, key, *rest)
    setattr(os._Environ, name, watch)
before = dict(os.environ)
done = []
thread = threading.Thread(target=lambda: done.append(spark_server.attach("local[1]", {}).range(3).count()))
thread.start()
while thread.is_alive():  # what dbt's parse does meanwhile: its secrets' scrubbing reads the environment
    [v for k, v in os.environ.items()]
thread.join()
gateway = [c for c in changed if c[1].startswith("PYSPARK_GATEWAY")]
print(json.dumps({"rows": done, "gateway_changes": gateway,
                  "gateway_left": sorted(k for k in os.environ if k.startswith("PYSPARK_GATEWAY") and k not in before)}))
"""


def test_attaching_from_a_thread_leaves_the_environment_alone(tmp_path):
    """A command attaches to the server in a thread while dbt parses in the main one, which reads
    os.environ (dbt's secret scrubbing iterates it): the attach must neither set nor remove a variable
    there. Through pyspark's launch_gateway it set PYSPARK_GATEWAY_PORT and removed it again, and the
    main thread's iteration failed with a KeyError for it (the soak's `dbt seed`, once in CI)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", ATTACH_FROM_A_THREAD], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={**os.environ, "CI": "true"})
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {"rows": [3], "gateway_changes": [], "gateway_left": []}, seen


def _reported(key: str, commands: int, timeout: float = 60) -> dict:
    """The server's state once it has reported its heap after `commands` commands."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = spark_server.read_state(key) or {}
        if state.get("heap") and state.get("commands", 0) >= commands:
            return state
        time.sleep(0.2)
    raise AssertionError(f"no heap report after {commands} command(s): {spark_server.read_state(key)}")


def test_a_server_reports_its_heap_and_restarts_between_commands_when_full(tmp_path, monkeypatch):
    project = cli.project(tmp_path / "p")
    for _ in range(2):
        run = cli.dbt(project, "run", "-s", "numbers")
        assert run.returncode == 0, run.stdout + run.stderr
    server = _server()
    state = _reported(server["key"], 2)
    heap = state["heap"]
    assert 0 < heap["heap_used"] <= heap["heap_max"] and 0 <= heap["old_after_gc"] <= heap["old_max"], heap
    assert heap["heap_max"] > 900 << 20  # a share of the machine's memory, at least Spark's 1 GiB
    status = subprocess.run([sys.executable, "-m", "dbt.adapters.deltalog.runtime.spark_server", "status"],
                            capture_output=True, text=True, timeout=60)
    assert "2 command(s) served, heap" in status.stdout, status.stdout
    debug = cli.dbt(project, "debug")
    assert "command(s) served, heap" in debug.stdout, debug.stdout
    # what the commands' processes held when they ended (their DataFrames, and so the plans and broadcast
    # values behind them) is released once none is attached
    # (looked at from a process of its own: attaching sets pyspark's process-wide gateway, and this test
    # process has a Spark of its own)
    _reported(server["key"], 3)  # two runs and the debug
    look = subprocess.run([sys.executable, "-c", (
        "from dbt.adapters.deltalog.runtime import spark_server as s\n"
        f"b = s._bindings(s._connect(s.read_state({server['key']!r})))\n"
        "print([b.get(k).getClass().getName() for k in list(b.keySet()) if b.get(k) is not None])")],
        capture_output=True, text=True, timeout=120)
    assert look.returncode == 0 and look.stdout.startswith("["), look.stdout + look.stderr
    assert ".Dataset'" not in look.stdout and "DataFrameWriter" not in look.stdout, look.stdout
    assert spark_server.stop_servers() == 1

    # a server whose old generation is always past its restart share: it restarts after each command,
    # and every command (a first, a second) lands whole
    monkeypatch.setenv("DBT_DELTALOG_SERVER_RESTART_SHARE", "0.0")
    pids = []
    for _ in range(2):
        run = cli.dbt(project, "run", "-s", "numbers")
        assert run.returncode == 0, run.stdout + run.stderr
        pid = _server()["pid"] if spark_server.list_servers() else None
        deadline = time.monotonic() + 60
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pid is None or not _alive(pid), "the server did not restart after the command"
        pids.append(pid)
    log = (Path(spark_server.state_dir()) / f"{server['key']}.log").read_text()
    assert "restarting: its old generation holds" in log, log[-2000:]
    assert cli.rows(project, "numbers") == list(range(10))
    assert deltalake.DeltaTable(str(project / "warehouse" / "analytics" / "numbers")).version() == 3
