"""`materialized='materialized_view'` over an input that updates and deletes rows, through dbt: with the
input's change data feed on, each refresh folds the feed of the new commits into the view (inserts and
update post-images in, deletes and update pre-images out) and the log says so; groups whose last row went
out disappear; a group whose min or max went out is recomputed from the input; a refresh stopped between
its state and view commits makes the next one a full recompute. After every run the view holds what the
query recomputed over the input (as delta-rs reads it) holds, and what --full-refresh writes. The inputs:
a streaming table applying changes (merge-on-read MERGEs with deletion vectors), and an incremental merge
model with deletion vectors plus deletes of the engine."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops

pytestmark = pytest.mark.dbt

CHANGES = "id bigint, city string, amount bigint, op string, seq bigint"

CUSTOMERS = """
{{ config(materialized='streaming_table', change_data_feed=true,
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq']}) }}
select * from {{ stream_files(var('landing'), format='json', schema='%s') }}
""" % CHANGES

BY_CITY = """
{{ config(materialized='materialized_view') }}
select city, sum(amount) as total, count(*) as n, count(amount) as priced, avg(amount) as mean
from {{ ref('customers') }} where id < 100 group by city
"""

EXTREMES = """
{{ config(materialized='materialized_view') }}
select city, min(amount) as lo, max(amount) as hi, count(*) as n from {{ ref('customers') }} c group by city
"""


def _rows(path: Path) -> list[dict]:
    """The table's rows as delta-rs reads them (through its deletion vectors)."""
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(path)))
    return pa.table(query.execute("select * from t").read_all()).to_pylist()


def _groups(rows: list[dict], key: str, where=lambda r: True) -> dict:
    out: dict = defaultdict(list)
    for r in rows:
        if where(r):
            out[r[key]].append(r)
    return out


def _by_city(customers: list[dict]) -> dict:
    out = {}
    for city, rows in _groups(customers, "city", lambda r: r["id"] < 100).items():
        values = [r["amount"] for r in rows if r["amount"] is not None]
        out[city] = (sum(values) if values else None, len(rows), len(values),
                     round(sum(values) / len(values), 9) if values else None)
    return out


def _extremes(customers: list[dict]) -> dict:
    out = {}
    for city, rows in _groups(customers, "city").items():
        values = [r["amount"] for r in rows if r["amount"] is not None]
        out[city] = (min(values, default=None), max(values, default=None), len(rows))
    return out


def _land(folder: Path, name: str, changes: list[tuple]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(dict(zip(["id", "city", "amount", "op", "seq"], c))) + "\n"
                           for c in changes))
    os.replace(tmp, folder / name)


class TestMaterializedViewOverAppliedChanges:
    @pytest.fixture(scope="class")
    def models(self):
        return {"customers.sql": CUSTOMERS, "by_city.sql": BY_CITY, "extremes.sql": EXTREMES}

    def test_folds_the_change_feed_of_updates_and_deletes(self, project, deltalog_warehouse, tmp_path_factory,
                                                          monkeypatch):
        root = Path(deltalog_warehouse) / project.test_schema
        landing = tmp_path_factory.mktemp("cdc")
        variables = ["--vars", json.dumps({"landing": str(landing)})]

        def run(expected: int = 2) -> str:
            _, out = run_dbt_and_capture(["run", *variables])
            customers = _rows(root / "customers")
            assert {r["city"]: (r["total"], r["n"], r["priced"], None if r["mean"] is None else round(r["mean"], 9))
                    for r in _rows(root / "by_city")} == _by_city(customers), out[-3000:]
            assert {r["city"]: (r["lo"], r["hi"], r["n"]) for r in _rows(root / "extremes")} \
                == _extremes(customers), out[-3000:]
            assert out.count("materialized view refreshed incrementally: the change data feed") == expected, \
                out[-3000:]
            return out

        _land(landing, "1.json", [(1, "Oslo", 10, "c", 1), (2, "Oslo", 30, "c", 1), (3, "Oslo", None, "c", 1),
                                  (4, "Rome", 5, "c", 1), (5, "Rome", 50, "c", 1), (6, "Lima", 7, "c", 1),
                                  (7, None, 8, "c", 1), (8, "Lima", 9, "c", 1), (100, "Oslo", 1, "c", 1)])
        out = run(expected=0)
        assert out.count("full recompute: its first build") == 2
        assert Snapshot.load(str(root / "customers")).configuration.get("delta.enableChangeDataFeed") == "true"

        # updates (one moves a row from Rome to Oslo, one sets an amount to NULL), a delete, an insert
        _land(landing, "2.json", [(4, "Oslo", 5, "u", 2), (1, "Oslo", 12, "u", 2), (2, "Oslo", None, "u", 2),
                                  (7, None, None, "d", 2), (9, "Rome", 60, "c", 2)])
        out = run()
        assert "deleted or updated" not in out

        # every row of Lima goes: Lima disappears from both views
        _land(landing, "3.json", [(6, None, None, "d", 3), (8, None, None, "d", 3), (3, "Oslo", 4, "u", 3)])
        out = run()
        assert "1 gone" in out
        assert all("Lima" not in {r["city"] for r in _rows(root / m)} for m in ("by_city", "extremes"))

        # the rows holding Oslo's min (id 100: 1) and Rome's max (id 9: 60) go out or change: those groups
        # are recomputed from the input; an update that keeps the amount (id 5 keeps 50) recomputes nothing
        # by_city's refresh stops after its state commit, before its view commit (as a kill there would)
        _land(landing, "4.json", [(100, "Oslo", 3, "u", 4), (9, None, None, "d", 4), (5, "Rome", 50, "u", 4)])
        merge = ops.merge

        def stopped_before_the_view(spark, table, *args, **kwargs):
            if str(getattr(table, "uri", table)).rstrip("/").endswith("/by_city"):
                raise RuntimeError("stopped between the state commit and the view commit")
            return merge(spark, table, *args, **kwargs)

        stale = _rows(root / "by_city")
        monkeypatch.setattr(ops, "merge", stopped_before_the_view)
        _, out = run_dbt_and_capture(["run", *variables], expect_pass=False)
        monkeypatch.setattr(ops, "merge", merge)
        assert "extremes: materialized view refreshed incrementally" in out and "2 recomputed from the input" in out
        assert {r["city"]: (r["lo"], r["hi"], r["n"]) for r in _rows(root / "extremes")} \
            == _extremes(_rows(root / "customers"))
        assert _rows(root / "by_city") == stale
        # the next refresh sees the state ahead of the view: a full recompute, and the view is right
        out = run(expected=0)
        assert "by_city: materialized view refreshed by a full recompute: the running state of its groups is " \
               "not at the view's version" in out

        # Lima comes back (id 6 re-inserted after its delete); both views incremental again
        _land(landing, "5.json", [(6, "Lima", 70, "u", 5)])
        run()

        # nothing new: no commit
        versions = {m: Snapshot.load(str(root / m)).version for m in ("by_city", "extremes")}
        _, out = run_dbt_and_capture(["run", *variables])
        assert out.count("no input committed since its last refresh") == 2
        assert {m: Snapshot.load(str(root / m)).version for m in versions} == versions

        # what a full recompute writes is what the refreshes made
        before = {m: sorted(map(json.dumps, _rows(root / m))) for m in versions}
        run_dbt(["run", "-s", "by_city", "extremes", "--full-refresh", *variables])
        assert {m: sorted(map(json.dumps, _rows(root / m))) for m in versions} == before


EVENTS = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          change_data_feed=true, deletion_vectors=true) }}
select id, case when id % 3 = 0 then 'eu' when id % 3 = 1 then 'us' else null end as region,
       cast(id * {{ var('factor', 7) }} % 11 as bigint) as amount
from range({{ var('lo', 0) }}, {{ var('hi', 30) }})
"""

SPREAD = """
{{ config(materialized='materialized_view') }}
select region, min(amount) as lo, max(amount) as hi, sum(amount) as total from {{ ref('events') }}
where amount > 0 group by region
"""

OVERALL = """
{{ config(materialized='materialized_view') }}
select min(amount) as lo, max(amount) as hi, count(*) as n, sum(amount) as total from {{ ref('events') }}
"""

PLAIN = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id, cast(id % 4 as bigint) as amount from range({{ var('lo', 0) }}, {{ var('hi', 30) }})
"""

PLAIN_TOTALS = """
{{ config(materialized='materialized_view') }}
select amount, count(*) as n from {{ ref('plain') }} group by amount
"""


def _line(out: str, model: str) -> str:
    """The log line of the refresh of `model`."""
    return next(line for line in out.splitlines() if f"{model}: materialized view refreshed" in line)


def _spread(events: list[dict]) -> dict:
    out = {}
    for region, rows in _groups(events, "region", lambda r: r["amount"] > 0).items():
        values = [r["amount"] for r in rows]
        out[region] = (min(values), max(values), sum(values))
    return out


def _overall(events: list[dict]) -> tuple:
    values = [r["amount"] for r in events]
    return (min(values, default=None), max(values, default=None), len(values), sum(values) if values else None)


class TestMinMaxRetraction:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS, "spread.sql": SPREAD, "overall.sql": OVERALL, "plain.sql": PLAIN,
                "plain_totals.sql": PLAIN_TOTALS}

    def test_min_and_max_stay_right_when_their_rows_go(self, spark, project, deltalog_warehouse):
        root = Path(deltalog_warehouse) / project.test_schema

        def check(out: str = "") -> None:
            events = _rows(root / "events")
            assert {r["region"]: (r["lo"], r["hi"], r["total"]) for r in _rows(root / "spread")} \
                == _spread(events), out[-3000:]
            assert [(r["lo"], r["hi"], r["n"], r["total"]) for r in _rows(root / "overall")] \
                == [_overall(events)], out[-3000:]

        run_dbt(["run"])
        check()

        # the merge updates every amount of ids 10..19 (some groups' min and max among them) and inserts more
        _, out = run_dbt_and_capture(["run", "-s", "events", "spread", "overall",
                                      "--vars", json.dumps({"lo": 10, "hi": 40, "factor": 5})])
        assert out.count("refreshed incrementally: the change data feed") == 2, out[-3000:]
        check(out)

        # every row holding a min or a max goes: each group's extremes are recomputed
        events = _rows(root / "events")
        low, high = min(r["amount"] for r in events), max(r["amount"] for r in events)
        ops.delete(spark, str(root / "events"), f"amount in ({low}, {high})")
        _, out = run_dbt_and_capture(["run", "-s", "spread", "overall"])
        assert out.count("refreshed incrementally: the change data feed") == 2, out[-3000:]
        assert "1 recomputed from the input" in _line(out, "overall"), out[-3000:]
        assert "0 recomputed" not in _line(out, "spread"), out[-3000:]
        check(out)

        # a row that held neither the min nor the max goes: the whole-table aggregate recomputes nothing
        events = _rows(root / "events")
        extremes = {min(r["amount"] for r in events), max(r["amount"] for r in events)}
        middle = next(r["id"] for r in events if r["amount"] not in extremes)
        ops.delete(spark, str(root / "events"), f"id = {middle}")
        _, out = run_dbt_and_capture(["run", "-s", "spread", "overall"])
        assert "0 recomputed from the input" in _line(out, "overall"), out[-3000:]
        check(out)

        # every row goes: the groups disappear, the whole-table aggregate stays one row (n 0, NULLs)
        ops.delete(spark, str(root / "events"), "true")
        _, out = run_dbt_and_capture(["run", "-s", "spread", "overall"])
        assert out.count("refreshed incrementally: the change data feed") == 2, out[-3000:]
        check(out)
        assert _rows(root / "spread") == [] and [r["n"] for r in _rows(root / "overall")] == [0]

    def test_without_the_feed_a_delete_is_a_full_recompute_that_says_why(self, spark, project,
                                                                         deltalog_warehouse):
        root = Path(deltalog_warehouse) / project.test_schema
        run_dbt(["run", "-s", "plain", "plain_totals"])
        ops.delete(spark, str(root / "plain"), "id % 5 = 0")
        _, out = run_dbt_and_capture(["run", "-s", "plain_totals"])
        assert "plain_totals: materialized view refreshed by a full recompute: version" in out
        assert "deleted or updated rows and" in out and "has no change data feed" in out
        counts: dict = defaultdict(int)
        for r in _rows(root / "plain"):
            counts[r["amount"]] += 1
        assert {r["amount"]: r["n"] for r in _rows(root / "plain_totals")} == counts
