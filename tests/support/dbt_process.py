"""dbt commands run as a user runs them, each its own process, on a small project whose `slow` models
are still running when a test interrupts or kills the command."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# Each row takes `sleep_ms` (Spark's reflect calls Thread.sleep): 40 rows in 4 partitions.
SLOW_SQL = """\
select id, reflect('java.lang.Thread', 'sleep', cast({{ var('sleep_ms', 0) }} as bigint)) as slept
from range(0, 40, 1, 4)
"""


def write_project(root: Path, name: str, models: dict, spark_server: bool = False,
                  idle_timeout: int = 600, dbt_project_extra: str = "", profile_extra: str = "") -> Path:
    """A dbt project in `root` with `models` ({file name: SQL or YAML}) and a deltalog profile: local[2],
    the warehouse in `root/warehouse`, `profile_extra` lines added to its output."""
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text(f"name: {name}\nversion: '1.0'\nprofile: {name}\nconfig-version: 2\n"
                                          + dbt_project_extra)
    (root / "profiles.yml").write_text(textwrap.dedent(f"""\
        {name}:
          target: dev
          outputs:
            dev:
              type: deltalog
              schema: analytics
              threads: 2
              master: local[2]
              warehouse: {root / 'warehouse'}
              spark_server: {str(spark_server).lower()}
              spark_server_idle_timeout: {idle_timeout}
              spark_conf: {{spark.sql.shuffle.partitions: "2"}}
        """) + textwrap.indent(textwrap.dedent(profile_extra), " " * 6))
    for file_name, sql in models.items():
        (root / "models" / file_name).write_text(sql)
    return root


def project(root: Path, idle_timeout: int = 600, spark_server: bool = True) -> Path:
    return write_project(root, "srv", {"numbers.sql": "select id, id * 2 as doubled from range(0, 10)\n",
                                       "slow.sql": SLOW_SQL, "slow_too.sql": SLOW_SQL},
                         spark_server=spark_server, idle_timeout=idle_timeout,
                         dbt_project_extra="models:\n  srv:\n    +materialized: table\n")


def _args(project_dir: Path, *args: str) -> list:
    return [sys.executable, "-c", "from dbt.cli.main import cli; cli()", *args,
            "--profiles-dir", str(project_dir), "--project-dir", str(project_dir)]


def _env() -> dict:
    env = dict(os.environ)
    env.pop("CI", None)  # the profile says whether a server is used, not the test runner
    return env


def dbt(project_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_args(project_dir, *args), capture_output=True, text=True, timeout=timeout,
                          cwd=project_dir, env=_env())


# A command the tests may Ctrl-C handles SIGINT as in a terminal. A shell that starts the suite in the
# background (`bash .ci/run &`) makes its children ignore SIGINT, and Python keeps an ignored SIGINT
# ignored: the command would then run to its end.
_AS_IN_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "


def start_dbt(project_dir: Path, *args: str) -> subprocess.Popen:
    command = _args(project_dir, *args)
    command[2] = _AS_IN_A_TERMINAL + command[2]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=project_dir, env=_env())


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 120) -> list:
    """Lines of `proc`'s output up to the one holding `needle`."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not printed:\n{''.join(seen)}")


def rows(project_dir: Path, table: str) -> list:
    import deltalake

    dt = deltalake.DeltaTable(str(project_dir / "warehouse" / "analytics" / table))
    return sorted(dt.to_pyarrow_table().column("id").to_pylist())
