"""Concurrent writers at the dbt level.

- One `dbt run` with `threads: 4` building several tables at once, twice: every model commits exactly
  once per run, the rows are exact (delta-rs and Spark agree).
- Two separate `dbt run` processes running an incremental append model and an incremental merge model
  (partitioned, with an incremental predicate on the partition) on the same target tables, while an
  engine writer in a third process appends too: no lost commit, no version written twice, no row lost
  or duplicated.
- A model that loses a conflict fails with a message naming the exception, the winning version and its
  operation, and what to do; it commits nothing. The race is forced in-process: a concurrent commit is
  made inside the model's own `Transaction.commit`, after its read and before its put-if-absent.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

from deltalog import DeltaTable, Snapshot, write_deltalake

from tests.support.races import winner_commits_first
from tests.support.table_checks import check_table

pytestmark = pytest.mark.dbt
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def table_dir(warehouse, project, name):
    return os.path.join(warehouse, project.test_schema, name)


def rows(path, columns):
    t = deltalake.DeltaTable(path).to_pyarrow_table(columns=columns)
    return sorted(tuple(r[c] for c in columns) for r in t.to_pylist())


# ---- threads inside one dbt run --------------------------------------------------------------------

SOURCE = "select id, id % 3 as grp from range({n})"
THREADED_MODELS = {
    **{f"t{i}.sql": "{{ config(materialized='table') }} " + SOURCE.format(n=10 * (i + 1)) for i in range(4)},
    "inc_append.sql": ("{{ config(materialized='incremental', incremental_strategy='append') }} "
                       "select id + {{ var('run', 0) }} * 100 as id, {{ var('run', 0) }} as run from range(5)"),
    "inc_merge.sql": ("{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', "
                      "partition_by=['grp']) }} "
                      "select id, id % 2 as grp, {{ var('run', 0) }} as run from range(6)"),
}


class TestThreadsInOneRun:
    @pytest.fixture(scope="class")
    @classmethod
    def dbt_profile_target(cls, deltalog_warehouse):
        return {"type": "deltalog", "threads": 4, "master": "local[2]", "spark_server": False,
                "warehouse": deltalog_warehouse,
                "spark_conf": {"spark.sql.shuffle.partitions": "2"}}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return THREADED_MODELS

    def test_two_threaded_runs(self, project, deltalog_warehouse):
        for run in (0, 1):
            results = run_dbt(["run", "--threads", "4", "--vars", json.dumps({"run": run})])
            assert len(results) == 6
        for i in range(4):
            path = table_dir(deltalog_warehouse, project, f"t{i}")
            chk = check_table(path)
            assert chk.version == 1  # create, then one overwrite: never a lost or doubled commit
            assert rows(path, ["id"]) == [(n,) for n in range(10 * (i + 1))]
        path = table_dir(deltalog_warehouse, project, "inc_append")
        assert check_table(path).version == 1
        assert rows(path, ["id", "run"]) == sorted([(n, 0) for n in range(5)] + [(n + 100, 1) for n in range(5)])
        path = table_dir(deltalog_warehouse, project, "inc_merge")
        assert check_table(path).version == 1
        assert rows(path, ["id", "run"]) == [(n, 1) for n in range(6)]


# ---- a model that loses a conflict --------------------------------------------------------------

def delete_first_file(uri: str) -> int:
    """A concurrent DELETE of one whole file (as `delete from t where ...` would commit it)."""
    txn = DeltaTable(uri).transaction()
    victim = txn.snapshot.add_files()[0]
    txn.read_files([victim])
    txn.add_actions([victim.remove()])
    return txn.commit(operation="DELETE", parameters={"predicate": "[\"id = 1\"]"})


def blind_append(uri: str) -> int:
    schema = Snapshot.load(uri).arrow_schema
    data = pa.table({f.name: pa.array([9] if f.name == "id" else ["z"] if pa.types.is_string(f.type) else [9],
                                      f.type) for f in schema})
    return write_deltalake(uri, data, mode="append")


CONFLICT_MODEL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select id, concat('v', {{ var('run', 0) }}) as name from range(1, 5)
"""


class TestModelLosingAConflict:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"contested.sql": CONFLICT_MODEL}

    def test_1_build(self, project, deltalog_warehouse):
        run_dbt(["run"])
        assert deltalake.DeltaTable(table_dir(deltalog_warehouse, project, "contested")).version() == 0

    def test_2_losing_merge_fails_with_named_conflict(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "contested")
        with winner_commits_first(delete_first_file, "/contested") as state:
            results = run_dbt(["run", "--vars", "{run: 1}"], expect_pass=False)
        r = results[0]
        assert state.get("winner_version") == 1, f"the model failed before its commit: {r.message}"
        assert r.node.name == "contested" and str(r.status) in ("error", "RunStatus.Error")
        msg = r.message or ""
        assert "ConcurrentDeleteReadException" in msg, msg
        assert "version 1" in msg and "DELETE" in msg, msg                      # the winner
        assert "Partition the table" in msg and "predicates" in msg and "retry" in msg.lower(), msg
        assert "Nothing was committed" in msg, msg
        chk = check_table(path)
        assert chk.version == 1  # the winner's commit only
        assert [h["operation"] for h in deltalake.DeltaTable(path).history()][:1] == ["DELETE"]

    def test_3_rerun_after_the_conflict_lands(self, project, deltalog_warehouse):
        path = table_dir(deltalog_warehouse, project, "contested")
        run_dbt(["run", "--vars", "{run: 1}"])
        assert check_table(path).version == 2
        assert rows(path, ["id", "name"]) == [(i, "v1") for i in range(1, 5)]

    def test_4_merge_retries_past_a_blind_insert(self, project, deltalog_warehouse):
        """WriteSerializable (the default): a concurrent blind INSERT does not conflict with the merge;
        the model lands at the next version and both changes are in the table."""
        path = table_dir(deltalog_warehouse, project, "contested")
        with winner_commits_first(blind_append, "/contested") as state:
            run_dbt(["run", "--vars", "{run: 2}"])
        assert state["winner_version"] == 3
        chk = check_table(path)
        assert chk.version == 4
        hist = deltalake.DeltaTable(path).history(2)
        assert [h["operation"] for h in hist] == ["MERGE", "WRITE"]
        assert hist[0]["readVersion"] == 2
        assert rows(path, ["id", "name"]) == [(i, "v2") for i in range(1, 5)] + [(9, "z")]


# ---- separate dbt processes and an engine writer on the same tables ---------------------------------

EVENTS_SQL = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select {{ var('writer') }} as writer, {{ var('run') }} as run, id from range(5)
"""

LATEST_SQL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key=['writer', 'id'],
          partition_by=['writer'],
          incremental_predicates=["DBT_INTERNAL_DEST.writer = " ~ var('writer')]) }}
select {{ var('writer') }} as writer, id, {{ var('run') }} as run from range(4)
"""

ENGINE_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import pyarrow as pa
    from deltalog import Snapshot, write_deltalake
    uri, n = sys.argv[1], int(sys.argv[2])
    schema = Snapshot.load(uri).arrow_schema
    for i in range(n):
        data = {{"writer": [99], "run": [i], "id": [1000 + i]}}
        write_deltalake(uri, pa.table({{f.name: pa.array(data[f.name], f.type) for f in schema}}),
                        mode="append", extra_commit_info={{"engineWriter": i}})
""")


def _write_project(root: str, warehouse: str) -> None:
    os.makedirs(os.path.join(root, "models"), exist_ok=True)
    with open(os.path.join(root, "dbt_project.yml"), "w") as f:
        f.write("name: race\nversion: '1.0'\nconfig-version: 2\nprofile: race\nmodel-paths: ['models']\n")
    with open(os.path.join(root, "profiles.yml"), "w") as f:
        f.write(textwrap.dedent(f"""
            race:
              target: dev
              outputs:
                dev:
                  type: deltalog
                  schema: race
                  threads: 2
                  master: local[1]
                  spark_server: false  # each process its own JVM: processes race, not sessions
                  warehouse: {warehouse}
                  spark_conf: {{spark.sql.shuffle.partitions: "1"}}
        """))
    for name, sql in (("events.sql", EVENTS_SQL), ("latest.sql", LATEST_SQL)):
        with open(os.path.join(root, "models", name), "w") as f:
            f.write(sql)


def _dbt_cmd(project: str, writer: int, runs: list[int]) -> list[str]:
    """One shell process running `dbt run` once per run number, one after the other."""
    dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
    lines = [f"{dbt} run --project-dir {project} --profiles-dir {project} "
             f"--vars '{{writer: {writer}, run: {r}}}' || exit 1" for r in runs]
    return ["bash", "-c", " && ".join(lines)]


def test_two_dbt_processes_and_an_engine_writer(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    projects = [str(tmp_path / f"p{i}") for i in (1, 2)]
    for p in projects:
        _write_project(p, warehouse)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    # The tables exist before the race (two processes creating one table: one of them must lose),
    # created by the engine with the schema the models produce.
    events = os.path.join(warehouse, "race", "events")
    latest = os.path.join(warehouse, "race", "latest")
    write_deltalake(events, pa.table({"writer": pa.array([0] * 5, pa.int32()), "run": pa.array([0] * 5, pa.int32()),
                                      "id": pa.array(range(5), pa.int64())}))
    write_deltalake(latest, pa.table({"writer": pa.array([0] * 4, pa.int32()), "id": pa.array(range(4), pa.int64()),
                                      "run": pa.array([0] * 4, pa.int32())}), partition_by=["writer"])
    runs = [1]
    procs = [subprocess.Popen(_dbt_cmd(p, w, runs), cwd=p, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for w, p in zip((1, 2), projects)]
    engine_commits = 6
    engine = subprocess.Popen([sys.executable, "-c", ENGINE_WRITER.format(root=ROOT), events,
                               str(engine_commits)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    engine_out = engine.communicate(timeout=300)[0]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]
    assert engine.returncode == 0, engine_out[-3000:]

    # events: every append landed once — the first build, 2 processes x 2 runs, 6 engine commits.
    chk = check_table(events)
    assert chk.version == 2 * len(runs) + engine_commits
    expected = [(0, 0, i) for i in range(5)] + [(w, r, i) for w in (1, 2) for r in runs for i in range(5)] \
        + [(99, i, 1000 + i) for i in range(engine_commits)]
    assert rows(events, ["writer", "run", "id"]) == sorted(expected)
    infos = chk.commit_infos
    assert sorted(i["engineWriter"] for i in infos if "engineWriter" in i) == list(range(engine_commits))
    assert len([i for i in infos if i.get("dbtUniqueId") == "model.race.events"]) == 2 * len(runs)

    # latest: the two processes' merges touched disjoint partitions: both landed every time.
    chk = check_table(latest)
    assert chk.version == 2 * len(runs)
    assert rows(latest, ["writer", "id", "run"]) == sorted(
        [(0, i, 0) for i in range(4)] + [(w, i, runs[-1]) for w in (1, 2) for i in range(4)])
    assert all(i["operation"] == "MERGE" for i in chk.commit_infos[1:])
