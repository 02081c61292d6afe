"""A user's second day: a small market project with `threads: 8` taken through `dbt seed`, `dbt run`,
`dbt snapshot` and a second `dbt run` with another var, each command its own process, as a user runs
them, with the long-lived Spark server and without it (a JVM per command). CI's selection runs it without
the server: the soak (tests/integration/test_soak.py) takes threads 8 with the server through the same
commands and more.

The second run used to fail one or two models at random with "cannot import name 'SQLContext' from
partially initialized module 'pyspark.sql'" or "deadlock detected by _ModuleLock('pyspark.sql')": its
first models imported pyspark from several threads at once. Every table is then read with delta-rs and
compared with what the inputs say it must hold, computed here in plain Python."""

from __future__ import annotations

import datetime
import textwrap
from pathlib import Path

import deltalake
import pytest

from tests.support import dbt_process as cli
from tests.support.selection import full_only

pytestmark = [pytest.mark.dbt, pytest.mark.spark]

GROWERS = [(1, "Hollow Farm", "north"), (2, "Beck Orchard", "south"), (3, "Stone Dairy", "north"),
           (4, "Reed Greens", "east")]
# (sale_id, grower_id, day, batch, kilos): batch 2's rows are added by the second run's var
SALES = [(i, 1 + i % 4, f"2026-10-{1 + i % 9:02d}", 1 if i <= 24 else 2, 10 + (i * 7) % 13)
         for i in range(1, 41)]

MODELS = {
    "sales_in_batch.sql": """\
        {{ config(materialized='ephemeral') }}
        select sale_id, grower_id, cast(day as date) as day, batch, kilos
        from {{ ref('sales') }} where batch <= {{ var('batch') }}
        """,
    "growers_by_region.sql": """\
        {{ config(materialized='table', partition_by=['region']) }}
        select grower_id, name, region from {{ ref('growers') }}
        """,
    "north_growers.sql": """\
        {{ config(materialized='view') }}
        select grower_id, name from {{ ref('growers_by_region') }} where region = 'north'
        """,
    "grower_totals.sql": """\
        {{ config(materialized='table', zorder_by=['region', 'kilos']) }}
        select g.grower_id, g.region, sum(s.kilos) as kilos, count(*) as sales
        from {{ ref('sales_in_batch') }} s join {{ ref('growers_by_region') }} g using (grower_id)
        group by g.grower_id, g.region
        """,
    "sales_appended.sql": """\
        {{ config(materialized='incremental', incremental_strategy='append') }}
        select sale_id, kilos from {{ ref('sales_in_batch') }}
        {% if is_incremental() %} where batch = {{ var('batch') }} {% endif %}
        """,
    "sales_merged.sql": """\
        {{ config(materialized='incremental', incremental_strategy='merge', unique_key='sale_id') }}
        select sale_id, grower_id, kilos, batch from {{ ref('sales_in_batch') }}
        """,
    "grower_days.sql": """\
        {{ config(materialized='incremental', incremental_strategy='delete+insert',
                  unique_key='grower_id') }}
        select grower_id, count(distinct day) as days from {{ ref('sales_in_batch') }} group by grower_id
        """,
    "daily_kilos.sql": """\
        {{ config(materialized='incremental', incremental_strategy='insert_overwrite',
                  partition_by=['day']) }}
        select day, sum(kilos) as kilos from {{ ref('sales_in_batch') }}
        {% if is_incremental() %} where batch = {{ var('batch') }} {% endif %}
        group by day
        """,
}

SNAPSHOT = """\
{% snapshot growers_snapshot %}
{{ config(target_schema='analytics', unique_key='grower_id', strategy='check', check_cols='all') }}
select grower_id, name, region from {{ ref('growers') }}
{% endsnapshot %}
"""


def _project(root: Path, server: bool) -> Path:
    project = cli.write_project(root, "market", {name: textwrap.dedent(sql) for name, sql in MODELS.items()},
                                spark_server=server)
    profile = (project / "profiles.yml").read_text().replace("threads: 2", "threads: 8")
    (project / "profiles.yml").write_text(profile)
    (project / "seeds").mkdir()
    (project / "seeds" / "growers.csv").write_text(
        "grower_id,name,region\n" + "".join(f"{i},{n},{r}\n" for i, n, r in GROWERS))
    (project / "seeds" / "sales.csv").write_text(
        "sale_id,grower_id,day,batch,kilos\n" + "".join(",".join(map(str, s)) + "\n" for s in SALES))
    (project / "snapshots").mkdir()
    (project / "snapshots" / "growers_snapshot.sql").write_text(SNAPSHOT)
    return project


def _table(project: Path, name: str) -> list:
    rows = deltalake.DeltaTable(str(project / "warehouse" / "analytics" / name)).to_pyarrow_table().to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def _expected(batch: int, appended_batches: list) -> dict:
    sales = [s for s in SALES if s[3] <= batch]
    region = {g: r for g, _, r in GROWERS}
    totals = {}
    for _, grower, _, _, kilos in sales:
        k, n = totals.get(grower, (0, 0))
        totals[grower] = (k + kilos, n + 1)
    days = {}
    for _, grower, day, _, _ in sales:
        days.setdefault(grower, set()).add(day)
    daily = {}  # insert_overwrite: each run's rows replace the days (partitions) they hold
    for b in appended_batches:
        kilos_of = {}
        for _, _, day, sale_batch, kilos in SALES:
            if sale_batch == b:
                kilos_of[day] = kilos_of.get(day, 0) + kilos
        daily.update(kilos_of)
    return {
        "growers_by_region": sorted((g, n, r) for g, n, r in GROWERS),
        "grower_totals": sorted((g, region[g], k, n) for g, (k, n) in totals.items()),
        "sales_appended": sorted((s[0], s[4]) for s in SALES if s[3] in appended_batches),
        "sales_merged": sorted((s[0], s[1], s[4], s[3]) for s in sales),
        "grower_days": sorted((g, len(d)) for g, d in days.items()),
        "daily_kilos": sorted((datetime.date.fromisoformat(d), k) for d, k in daily.items()),
    }


def _ok(result, command: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"dbt {command} failed:\n{out[-6000:]}"
    assert "partially initialized module" not in out and "deadlock detected" not in out, out[-6000:]


@pytest.mark.parametrize("server", [
    pytest.param(True, marks=full_only("the soak (tests/integration/test_soak.py) runs seed, build, five runs, "
                                       "snapshot and 11 more commands with threads 8 on the server")),
    False], ids=["server", "jvm-per-command"])
def test_second_day_with_eight_threads(tmp_path, server):
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

    stop_servers()
    project = _project(tmp_path / "market", server)
    try:
        _ok(cli.dbt(project, "seed"), "seed")
        _ok(cli.dbt(project, "run", "--vars", "{batch: 1}"), "run (batch 1)")
        for name, rows in _expected(1, [1]).items():
            assert _table(project, name) == rows, name
        _ok(cli.dbt(project, "snapshot"), "snapshot")
        _ok(cli.dbt(project, "run", "--vars", "{batch: 2}"), "run (batch 2)")
        for name, rows in _expected(2, [1, 2]).items():
            assert _table(project, name) == rows, name
        snapshot = _table(project, "growers_snapshot")
        assert sorted(r[:3] for r in snapshot) == sorted(GROWERS)
        north = cli.dbt(project, "show", "--inline", "select count(*) as n from {{ ref('north_growers') }}",
                        "--vars", "{batch: 2}")
        _ok(north, "show")
        assert [line.split("|")[1].strip() for line in north.stdout.splitlines()
                if line.startswith("|")][-1] == "2", north.stdout
    finally:
        stop_servers()
