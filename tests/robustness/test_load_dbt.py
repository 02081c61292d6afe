"""Load: several dbt processes, each making many commits to one table (incremental appends, merges that
read-modify-write one counter row from the table itself, OPTIMIZE), all at once, on local disk and on S3
(SeaweedFS), at each isolation level.

Every process ends with all its commits landed (a conflict fails the dbt invocation naming Delta's
exception, and the process runs it again); afterwards every commit is in the log once, versions are
contiguous, the appended rows are there exactly once and the counter equals the number of merges (no
update lost to a race). Reruns per writer are printed.

Size: `DELTALOG_LOAD=<processes>,<commits each>`. The suite runs 3 x 5 on S3 at Serializable (each writer
makes each kind of commit: three appends, a merge, an OPTIMIZE); `DELTALOG_LOAD=8,25 pytest
tests/robustness/test_load_dbt.py -s` runs the four combinations at the size the docs report.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter

import deltalake
import pyarrow as pa
import pytest

from deltalog import Snapshot, write_deltalake

from deltalog.storage import files as filesystem
from load_child import append_ids, kind
from tests.support.seaweed import seaweedfs_or_skip

pytestmark = pytest.mark.dbt
CHILD = __import__("load_child").__file__
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FULL = "DELTALOG_LOAD" in os.environ
PROCESSES, COMMITS = (int(n) for n in os.environ.get("DELTALOG_LOAD", "3,5").split(","))
CONFIGS = ([("local", "WriteSerializable"), ("local", "Serializable"), ("s3", "WriteSerializable"),
            ("s3", "Serializable")] if FULL else [("s3", "Serializable")])

MODEL = """\
{{ config(materialized='incremental', incremental_strategy=var('strategy', 'append'),
          unique_key=('id' if var('strategy', 'append') == 'merge' else none)) }}
{% if var('strategy', 'append') == 'merge' %}
select id, v + 1 as v from {{ this }} where id = -1
{% else %}
select {{ var('writer', 0) }} * 1000000 + {{ var('seq', 0) }} * 1000 + id as id,
       cast({{ var('writer', 0) }} as bigint) as v
from range(20)
{% endif %}
"""
OPTIMIZE_MACRO = "{% macro optimize_load() %}{% do optimize(ref('load')) %}{% endmacro %}\n"


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        filesystem.configure(server.uri(), server.storage_options())
        try:
            yield server
        finally:
            filesystem.configure(server.uri(), None)


def write_project(folder: str, warehouse: str, options: dict | None) -> None:
    os.makedirs(os.path.join(folder, "models"))
    os.makedirs(os.path.join(folder, "macros"))
    with open(os.path.join(folder, "models", "load.sql"), "w") as f:
        f.write(MODEL)
    with open(os.path.join(folder, "macros", "optimize_load.sql"), "w") as f:
        f.write(OPTIMIZE_MACRO)
    with open(os.path.join(folder, "dbt_project.yml"), "w") as f:
        f.write("name: load\nversion: '1.0'\nprofile: load\nconfig-version: 2\n")
    opts = "".join(f"        {k}: '{v}'\n" for k, v in (options or {}).items())
    with open(os.path.join(folder, "profiles.yml"), "w") as f:
        f.write(textwrap.dedent(f"""\
            load:
              target: dev
              outputs:
                dev:
                  type: deltalog
                  schema: race
                  threads: 1
                  master: local[1]
                  spark_server: false  # each process its own JVM: processes race, not sessions
                  warehouse: {warehouse}
                  spark_conf: {{spark.sql.shuffle.partitions: "1"}}
            """) + ("      storage_options:\n" + opts if options else ""))


def expected_rows(processes: int, commits: int) -> dict[int, int]:
    rows = {-1: processes * sum(kind(s) == "merge" for s in range(commits))}
    for w in range(1, processes + 1):
        for s in range(commits):
            if kind(s) == "append":
                rows.update({i: w for i in append_ids(w, s)})
    return rows


@pytest.mark.parametrize("store,level", CONFIGS)
def test_dbt_processes_under_load(tmp_path, request, store, level):
    if store == "s3":
        server = request.getfixturevalue("s3")
        warehouse, options = server.uri("load", level), server.storage_options()
    else:
        warehouse, options = str(tmp_path / "warehouse"), None
    table = warehouse.rstrip("/") + "/race/load"
    write_deltalake(table, pa.table({"id": pa.array([-1], pa.int64()), "v": pa.array([0], pa.int64())}),
                    configuration={"delta.isolationLevel": level}, storage_options=options)
    projects = [str(tmp_path / f"p{w}") for w in range(1, PROCESSES + 1)]
    for p in projects:
        write_project(p, warehouse, options)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    procs = [subprocess.Popen([sys.executable, CHILD, p, str(w), str(COMMITS)], cwd=p, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w, p in enumerate(projects, start=1)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=3600)
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for r in reports:
        assert not r["failed"], r
    for p in projects:
        shutil.rmtree(os.path.join(p, "target"), ignore_errors=True)

    dt = deltalake.DeltaTable(table, storage_options=options)
    rows = dt.to_pyarrow_table().to_pylist()
    found = {r["id"]: r["v"] for r in rows}
    assert len(found) == len(rows), "a row appears twice"
    assert found == expected_rows(PROCESSES, COMMITS)
    infos = list(reversed(dt.history()))
    assert [i["version"] for i in infos] == list(range(dt.version() + 1)), "versions not contiguous"
    ops = Counter(i["operation"] for i in infos[1:])
    merges = PROCESSES * sum(kind(s) == "merge" for s in range(COMMITS))
    appends = PROCESSES * sum(kind(s) == "append" for s in range(COMMITS))
    assert ops["MERGE"] == merges and ops["OPTIMIZE"] <= PROCESSES * sum(kind(s) == "optimize" for s in range(COMMITS))
    assert sum(n for op, n in ops.items() if op not in ("MERGE", "OPTIMIZE")) == appends, ops
    assert Snapshot.load(table).version == dt.version()
    reruns = {r["writer"]: r["reruns"] for r in reports}
    conflicts = sum((Counter(r["conflicts"]) for r in reports), Counter())
    print(f"{store} {level}: {PROCESSES} processes x {COMMITS} commits, {dt.version()} versions, "
          f"reruns per writer {reruns}, conflicts {dict(conflicts)}, operations {dict(ops)}")
    for name, example in {k: v for r in reports for k, v in r["examples"].items()}.items():
        print(f"  e.g. {example}")
