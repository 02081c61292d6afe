"""A real-time pipeline killed and restarted: files land in a folder while the continuous runner
(`python -m dbt.adapters.deltalog.stream --select tag:realtime`) streams them into bronze (a file stream)
and silver (a stream of bronze, `stream(ref('bronze'))`); the runner's whole process group (its JVM too)
is SIGKILLed at random moments, some during start-up and some mid-batch, and started again. Then
`dbt run` takes what is left and refreshes gold (a materialized view over silver). Every landed row is in
bronze and silver exactly once, gold equals the aggregate recomputed from the landed rows, read by
delta-rs, and a second `dbt run` with no new input commits nothing at any layer. Beside them, changes
(upserts and deletes of keys, some arriving late) land in a second folder and two streaming tables apply
them (`apply_changes`, SCD type 1 and 2): after the kills each equals what the changes make, computed here.

CI kills the runner 3 times (the selection, tests/support/selection.py); DELTALOG_FULL_SUITE=1 kills it 20 times."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog.snapshot import Snapshot
from tests.support.dbt_process import write_project
from tests.support.selection import FULL

pytestmark = pytest.mark.dbt

KILLS = 20 if FULL else 3

MODELS = {
    "bronze.sql": """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '1 second'}) }}
select order_id, region, amount
from {{ stream_files(var('landing'), format='json', schema='order_id bigint, region string, amount bigint') }}
""",
    "silver.sql": """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '1 second'}) }}
select order_id, region, amount * 2 as doubled from {{ stream(ref('bronze')) }}
""",
    "customers.sql": """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '1 second'},
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq']}) }}
select * from {{ stream_files(var('changes'), format='json', schema='id bigint, city string, op string, seq bigint') }}
""",
    "customers_history.sql": """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '1 second'},
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq'], 'stored_as_scd_type': 2}) }}
select * from {{ stream_files(var('changes'), format='json', schema='id bigint, city string, op string, seq bigint') }}
""",
    "gold.sql": """
{{ config(materialized='materialized_view') }}
select region, sum(doubled) as total, count(*) as n from {{ ref('silver') }} group by region
""",
}


def _table(root: Path, name: str) -> list[dict]:
    table = deltalake.DeltaTable(str(root / "warehouse" / "analytics" / name))
    return pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all()).to_pylist()


def _expected(changes: list[dict]) -> tuple[dict, list[tuple]]:
    """What the changes make: SCD 1 (key -> city, deleted keys absent) and SCD 2 (id, city, start, end)."""
    by_key: dict = {}
    for c in changes:
        by_key.setdefault(c["id"], []).append(c)
    latest, versions = {}, []
    for key, events in by_key.items():
        events.sort(key=lambda c: c["seq"])
        if events[-1]["op"] != "d":
            latest[key] = events[-1]["city"]
        open_version = None
        for c in events:
            if c["op"] == "d" or (open_version and open_version[1] != c["city"]):
                if open_version:
                    versions.append((*open_version, c["seq"]))
                open_version = None
            if c["op"] != "d" and open_version is None:
                open_version = (key, c["city"], c["seq"])
        if open_version:
            versions.append((*open_version, None))
    return latest, sorted(versions)


def test_the_runner_killed_at_random_moments_loses_and_doubles_nothing(tmp_path):
    root = write_project(tmp_path / "project", "rt", MODELS)
    landing = tmp_path / "landing"
    landing.mkdir()
    changes_folder = tmp_path / "changes"
    changes_folder.mkdir()
    variables = json.dumps({"landing": str(landing), "changes": str(changes_folder)})
    rng = random.Random(35)
    landed: list[dict] = []
    changes: list[dict] = []
    held: list[dict] = []  # changes that arrive late, in a later file

    def land() -> None:
        rows = [{"order_id": len(landed) + i, "region": rng.choice(["eu", "us", "apac"]), "amount": rng.randint(1, 99)}
                for i in range(rng.randint(1, 6))]
        tmp = landing / f".{len(landed)}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, landing / f"{len(landed):06d}.json")  # a file appears whole
        landed.extend(rows)
        batch = [{"id": rng.randint(1, 30), "city": rng.choice(["Oslo", "Rome", "Lima"]),
                  "op": rng.choice("uuud"), "seq": len(changes) + len(held) + i} for i in range(rng.randint(1, 5))]
        late, held[:] = held[:], [c for c in batch if rng.random() < 0.2]
        batch = [c for c in batch if c not in held] + late
        tmp = changes_folder / f".{len(landed)}.tmp"
        tmp.write_text("".join(json.dumps(c) + "\n" for c in batch))
        os.replace(tmp, changes_folder / f"{len(landed):06d}.json")  # (a name the stream has not seen)
        changes.extend(batch)

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    base = ["--project-dir", str(root), "--profiles-dir", str(root), "--vars", variables]
    logs = []
    for kill in range(KILLS):
        log = open(tmp_path / f"runner-{kill}.log", "w")
        logs.append(log.name)
        runner = subprocess.Popen([sys.executable, "-m", "dbt.adapters.deltalog.stream", "--select", "tag:realtime",
                                   *base], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        until = time.monotonic() + rng.uniform(8, 40)  # start-up takes ~10 s: some kills land before a batch
        while time.monotonic() < until:
            land()
            time.sleep(rng.uniform(0.1, 1.5))
        assert runner.poll() is None, Path(log.name).read_text()[-3000:]
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
        log.close()

    def dbt_run() -> str:
        done = subprocess.run([sys.executable, "-c", "from dbt.cli.main import cli; cli()", "run", *base], cwd=root,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        return done.stdout

    dbt_run()  # what the killed runners left: everything new, then gold
    expected = Counter(r["order_id"] for r in landed)
    for layer in ("bronze", "silver"):
        got = Counter(r["order_id"] for r in _table(root, layer))
        assert got == expected, (layer, sorted((got - expected).items())[:5], sorted((expected - got).items())[:5],
                                 logs)
    totals: dict = {}
    for r in landed:
        total, n = totals.get(r["region"], (0, 0))
        totals[r["region"]] = (total + 2 * r["amount"], n + 1)
    assert {r["region"]: (r["total"], r["n"]) for r in _table(root, "gold")} == totals

    latest, history = _expected(changes)
    assert {r["id"]: r["city"] for r in _table(root, "customers")} == latest, logs
    assert sorted((r["id"], r["city"], r["__START_AT"], r["__END_AT"]) for r in _table(root, "customers_history")) \
        == history, logs

    versions = {m: Snapshot.load(str(root / "warehouse" / "analytics" / m)).version
                for m in ("bronze", "silver", "gold", "customers", "customers_history")}
    out = dbt_run()  # no new input anywhere: no commit at any layer
    assert {m: Snapshot.load(str(root / "warehouse" / "analytics" / m)).version for m in versions} == versions, out

    land()  # one more file: each layer takes it once, gold incrementally
    out = dbt_run()
    assert "refreshed incrementally" in out, out[-3000:]
    assert Counter(r["order_id"] for r in _table(root, "silver")) == Counter(r["order_id"] for r in landed)
    r = landed[-1]
    assert sum(g["n"] for g in _table(root, "gold")) == len(landed), r
