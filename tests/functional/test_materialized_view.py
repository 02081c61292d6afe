"""`materialized='materialized_view'` through dbt: a grouped aggregate over an append-only table of ours is
refreshed incrementally (only the rows the input's new commits added, merged by group; with avg, the
touched groups recomputed), a run with no new input commits nothing, an input that deleted rows without a
change data feed (or a query that is not a grouped aggregate over one table) is recomputed in full, and the
log says which and why (an input with the feed on: test_materialized_view_changes.py). Values equal the query recomputed over the input as delta-rs reads it."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops

pytestmark = pytest.mark.dbt

EVENTS = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id, case when id % 3 = 0 then 'eu' when id % 3 = 1 then 'us' else null end as region,
       cast(id * 7 % 11 as bigint) as amount
from range({{ var('lo', 0) }}, {{ var('hi', 10) }})
"""

TOTALS = """
{{ config(materialized='materialized_view') }}
select region, sum(amount) as total, count(*) as n, min(amount) as lo, max(amount) as hi
from {{ ref('events') }} where amount > 0 group by region
"""

MEANS = """
{{ config(materialized='materialized_view') }}
select region, avg(amount) as mean, count(amount) as n from {{ ref('events') }} group by region
"""

REGIONS = """
{{ config(materialized='materialized_view') }}
select distinct region from {{ ref('events') }}
"""


def _rows(path: Path) -> list[dict]:
    return deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def _expected_totals(events: list[dict]) -> dict:
    groups: dict = defaultdict(list)
    for e in events:
        if e["amount"] > 0:
            groups[e["region"]].append(e["amount"])
    return {k: (sum(v), len(v), min(v), max(v)) for k, v in groups.items()}


def _expected_means(events: list[dict]) -> dict:
    groups: dict = defaultdict(list)
    for e in events:
        groups[e["region"]].append(e["amount"])
    return {k: (round(sum(v) / len(v), 9), len(v)) for k, v in groups.items()}


class TestMaterializedView:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS, "totals.sql": TOTALS, "means.sql": MEANS, "regions.sql": REGIONS}

    def test_refreshes_incrementally_in_full_or_not_at_all(self, spark, project, deltalog_warehouse):
        root = Path(deltalog_warehouse) / project.test_schema

        def check():
            events = _rows(root / "events")
            assert {r["region"]: (r["total"], r["n"], r["lo"], r["hi"]) for r in _rows(root / "totals")} \
                == _expected_totals(events)
            assert {r["region"]: (round(r["mean"], 9), r["n"]) for r in _rows(root / "means")} == _expected_means(events)
            assert sorted(r["region"] or "" for r in _rows(root / "regions")) \
                == sorted({e["region"] or "" for e in events})

        _, out = run_dbt_and_capture(["run"])
        assert out.count("full recompute: its first build") == 3
        check()
        versions = {m: Snapshot.load(str(root / m)).version for m in ("totals", "means", "regions")}

        _, out = run_dbt_and_capture(["run", "-s", "totals", "means", "regions"])  # no new input commit
        assert out.count("no input committed since its last refresh") == 3
        assert {m: Snapshot.load(str(root / m)).version for m in versions} == versions

        _, out = run_dbt_and_capture(["run", "--vars", json.dumps({"lo": 10, "hi": 25})])  # events gains rows
        assert "totals: materialized view refreshed incrementally" in out and "merged into their groups" in out
        assert "means: materialized view refreshed incrementally" in out and "running sums and counts" in out
        assert "regions: materialized view refreshed by a full recompute: the query has DISTINCT" in out
        check()
        run_dbt(["run", "--vars", json.dumps({"lo": 25, "hi": 40})])
        check()

        ops.delete(spark, str(root / "events"), "id % 4 = 0")
        _, out = run_dbt_and_capture(["run", "-s", "totals", "means"])
        assert out.count("full recompute: version") == 2 and "deleted or updated rows" in out
        assert out.count("has no change data feed (delta.enableChangeDataFeed") >= 2  # the log and the result line
        check()
        history = deltalake.DeltaTable(str(root / "totals")).history()
        assert {h["operation"] for h in history} >= {"MERGE", "CREATE OR REPLACE TABLE AS SELECT"}
