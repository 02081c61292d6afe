"""A generated dbt project of about 40 nodes, taken through a day of commands by tests/integration/test_soak.py.

Three seeds (customers, regions, and events: 20 new events a round for 12 rounds, and from round 2 on five
status changes of earlier events), one source over the events seed, views, an ephemeral model, tables
(partitioned, z-ordered), the four incremental strategies that keep a watermark in their table (so a
round that a `--select` left out is caught up by the next run of the model), a materialized view, two
Python models (one fails while a marker file exists: a failure, then `dbt retry`), a slow model to
Ctrl-C, a snapshot, data tests, and source freshness.

`Oracle` computes, apart from dbt and Spark, what each table must hold once the rows it read were those
of `round: N`: DuckDB over the seeds' CSV files, one query per model written for DuckDB."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

ROUNDS = 12
CUSTOMERS = 30
REGIONS = ["north", "south", "east", "west"]


def _events() -> list:
    rows, originals = [], {}
    first = dt.date(2026, 10, 1)
    loaded = dt.datetime(2026, 11, 1, 8, 0, 0)
    for r in range(1, ROUNDS + 1):
        for j in range(20):
            event = (r - 1) * 20 + j + 1
            originals[event] = (event, (event * 7) % CUSTOMERS + 1, first + dt.timedelta(days=(event * 3) % 14), r,
                                (event * 37) % 500 + 1, "placed", loaded + dt.timedelta(hours=r))
            rows.append(originals[event])
        if r > 1:
            for j in range(5):
                event = (r - 1) * 20 - 3 * j  # an earlier event changes status
                old = originals[event]  # the same customer, day and amount: only the status changes
                rows.append((event, old[1], old[2], r, old[4], "shipped" if r % 2 == 0 else "returned",
                             loaded + dt.timedelta(hours=r)))
    return rows


EVENTS = _events()

MODELS = {
    "staging/stg_events.sql": """\
        {{ config(materialized='ephemeral') }}
        select event_id, customer_id, cast(day as date) as day, round, amount, status
        from {{ source('raw', 'events') }} where round <= {{ var('round') }}
        """,
    "staging/stg_customers.sql": """\
        {{ config(materialized='view') }}
        select customer_id, name, region_id from {{ ref('customers') }}
        """,
    "staging/events_latest.sql": """\
        {{ config(materialized='ephemeral') }}
        select event_id, customer_id, day, round, amount, status from (
          select *, row_number() over (partition by event_id order by round desc) as rn
          from {{ ref('stg_events') }}) where rn = 1
        """,
    "marts/customer_dim.sql": """\
        {{ config(materialized='table', partition_by=['region_name']) }}
        select c.customer_id, c.name, r.region_name
        from {{ ref('stg_customers') }} c join {{ ref('regions') }} r on c.region_id = r.region_id
        """,
    "marts/events_wide.sql": """\
        {{ config(materialized='table', zorder_by=['customer_id', 'day']) }}
        select e.event_id, e.customer_id, d.region_name, e.day, e.amount, e.status
        from {{ ref('events_latest') }} e join {{ ref('customer_dim') }} d on e.customer_id = d.customer_id
        """,
    "marts/customer_days.sql": """\
        {{ config(materialized='table') }}
        select customer_id, count(distinct day) as days from {{ ref('events_wide') }} group by customer_id
        """,
    "marts/daily_status.sql": """\
        {{ config(materialized='table') }}
        select day, status, count(*) as events from {{ ref('events_wide') }} group by day, status
        """,
    "incremental/events_appended.sql": """\
        {{ config(materialized='incremental', incremental_strategy='append') }}
        select event_id, round, amount from {{ ref('stg_events') }}
        {% if is_incremental() %} where round > (select coalesce(max(round), 0) from {{ this }}) {% endif %}
        """,
    "incremental/latest_status.sql": """\
        {{ config(materialized='incremental', incremental_strategy='merge', unique_key='event_id') }}
        select event_id, status, round from {{ ref('events_latest') }}
        {% if is_incremental() %} where round > (select coalesce(max(round), 0) from {{ this }}) {% endif %}
        """,
    "incremental/customer_totals.sql": """\
        {{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key='customer_id') }}
        with touched as (
          select distinct customer_id from {{ ref('stg_events') }}
          {% if is_incremental() %}
          where round > (select coalesce(max(max_round), 0) from {{ this }})
          {% endif %})
        select e.customer_id, count(*) as events, sum(e.amount) as total, max(e.round) as max_round,
               case when sum(e.amount) >= 3000 then 'gold' when sum(e.amount) >= 1500 then 'silver'
                    else 'bronze' end as tier
        from {{ ref('events_latest') }} e join touched t on e.customer_id = t.customer_id
        group by e.customer_id
        """,
    "incremental/daily_totals.sql": """\
        {{ config(materialized='incremental', incremental_strategy='insert_overwrite', partition_by=['day']) }}
        with touched as (
          select distinct day from {{ ref('stg_events') }}
          {% if is_incremental() %}
          where round > (select coalesce(max(max_round), 0) from {{ this }})
          {% endif %})
        select count(*) as events, sum(e.amount) as total, max(e.round) as max_round, e.day
        from {{ ref('events_latest') }} e join touched t on e.day = t.day
        group by e.day
        """,
    "marts/region_totals.sql": """\
        {{ config(materialized='table') }}
        select d.region_name, count(*) as customers, sum(t.total) as total
        from {{ ref('customer_totals') }} t join {{ ref('customer_dim') }} d on t.customer_id = d.customer_id
        group by d.region_name
        """,
    "marts/region_events_mv.sql": """\
        {{ config(materialized='materialized_view') }}
        select region_name, count(*) as events, sum(amount) as total from {{ ref('events_wide') }}
        group by region_name
        """,
    "marts/big_spenders.sql": """\
        {{ config(materialized='view') }}
        select customer_id, total from {{ ref('customer_totals') }} where tier = 'gold'
        """,
    "marts/top_customers.sql": """\
        {{ config(materialized='table') }}
        select b.customer_id, d.name, b.total
        from {{ ref('big_spenders') }} b join {{ ref('customer_dim') }} d on b.customer_id = d.customer_id
        """,
    "marts/customer_scores.py": """\
        def model(dbt, session):
            dbt.config(materialized="table")
            totals = dbt.ref("customer_totals").select("customer_id", "total").toPandas()
            totals["score_rank"] = totals["total"].rank(method="min", ascending=False).astype("int64")
            return totals
        """,
    "marts/flaky.py": """\
        import os


        def model(dbt, session):
            dbt.config(materialized="table")
            if os.path.exists(MARKER):
                raise RuntimeError("flaky: the marker file is there")
            return dbt.ref("region_totals")
        """,
    "marts/slow.sql": """\
        {{ config(materialized='table') }}
        select id, reflect('java.lang.Thread', 'sleep', cast({{ var('sleep_ms', 0) }} as bigint)) as slept
        from range(0, 40, 1, 4)
        """,
    "schema.yml": """\
        version: 2
        sources:
          - name: raw
            schema: "{{ target.schema }}"
            tables:
              - name: events
                loaded_at_field: loaded_at
                freshness:
                  warn_after: {count: 100000, period: day}
        models:
          - name: customer_dim
            columns:
              - name: customer_id
                data_tests: [unique, not_null]
          - name: events_wide
            columns:
              - name: event_id
                data_tests: [unique, not_null]
              - name: customer_id
                data_tests:
                  - relationships: {arguments: {to: "ref('customer_dim')", field: customer_id}}
          - name: latest_status
            columns:
              - name: event_id
                data_tests: [unique]
              - name: status
                data_tests:
                  - accepted_values: {arguments: {values: [placed, shipped, returned]}}
          - name: customer_totals
            columns:
              - name: customer_id
                data_tests: [unique, not_null]
              - name: tier
                data_tests:
                  - accepted_values: {arguments: {values: [gold, silver, bronze]}}
          - name: daily_totals
            columns:
              - name: day
                data_tests: [unique]
          - name: region_totals
            columns:
              - name: region_name
                data_tests: [unique]
          - name: top_customers
            columns:
              - name: customer_id
                data_tests: [not_null]
        """,
}

SINGULAR_TEST = """\
select event_id, round from {{ ref('events_appended') }} group by event_id, round having count(*) > 1
"""

SNAPSHOT = """\
{% snapshot tier_snapshot %}
{{ config(target_schema=target.schema, unique_key='customer_id', strategy='check',
          check_cols=['tier', 'total']) }}
select customer_id, tier, total from {{ ref('customer_totals') }}
{% endsnapshot %}
"""

# A model's rows follow the round of the table it reads (None: the round it ran with itself, through the
# ephemeral stg_events; a view or table keeps the round it was built with until it is built again)
READS_ROUND_OF = {
    "customer_dim": None, "events_wide": None, "events_appended": None, "latest_status": None,
    "customer_totals": None, "daily_totals": None, "slow": None,
    "customer_days": "events_wide", "daily_status": "events_wide", "region_events_mv": "events_wide",
    "region_totals": "customer_totals", "top_customers": "customer_totals", "customer_scores": "customer_totals",
    "flaky": "region_totals",
}

# the tables the day checks, each with the columns compared (in this order)
TABLES = {
    "customer_dim": ["customer_id", "name", "region_name"],
    "events_wide": ["event_id", "customer_id", "region_name", "day", "amount", "status"],
    "customer_days": ["customer_id", "days"],
    "daily_status": ["day", "status", "events"],
    "events_appended": ["event_id", "round", "amount"],
    "latest_status": ["event_id", "status", "round"],
    "customer_totals": ["customer_id", "events", "total", "max_round", "tier"],
    "daily_totals": ["day", "events", "total", "max_round"],
    "region_totals": ["region_name", "customers", "total"],
    "region_events_mv": ["region_name", "events", "total"],
    "top_customers": ["customer_id", "name", "total"],
    "customer_scores": ["customer_id", "total", "score_rank"],
    "flaky": ["region_name", "customers", "total"],
    "slow": ["id"],
}


def write(root: Path, threads: int, server: bool) -> Path:
    """The project in `root` (its warehouse in root/warehouse), with `threads` and the server on or off."""
    root.mkdir(parents=True)
    (root / "dbt_project.yml").write_text(textwrap.dedent("""\
        name: soak
        version: '1.0'
        profile: soak
        config-version: 2
        vars: {round: 1}
        """))
    (root / "profiles.yml").write_text(textwrap.dedent(f"""\
        soak:
          target: dev
          outputs:
            dev:
              type: deltalog
              schema: analytics
              threads: {threads}
              master: local[2]
              warehouse: {root / 'warehouse'}
              spark_server: {str(server).lower()}
              spark_server_idle_timeout: 600
              spark_conf: {{spark.sql.shuffle.partitions: "2"}}
        """))
    for name, text in MODELS.items():
        path = root / "models" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = textwrap.dedent(text).replace("MARKER", repr(str(marker(root))))
        path.write_text(text)
    (root / "tests").mkdir()
    (root / "tests" / "no_event_appended_twice.sql").write_text(SINGULAR_TEST)
    (root / "snapshots").mkdir()
    (root / "snapshots" / "tier_snapshot.sql").write_text(SNAPSHOT)
    seeds = root / "seeds"
    seeds.mkdir()
    (seeds / "regions.csv").write_text("region_id,region_name\n"
                                       + "".join(f"{i + 1},{r}\n" for i, r in enumerate(REGIONS)))
    (seeds / "customers.csv").write_text("customer_id,name,region_id\n" + "".join(
        f"{c},customer {c:02d},{c % len(REGIONS) + 1}\n" for c in range(1, CUSTOMERS + 1)))
    (seeds / "events.csv").write_text("event_id,customer_id,day,round,amount,status,loaded_at\n" + "".join(
        f"{e},{c},{d.isoformat()},{r},{a},{s},{t.isoformat(sep=' ')}\n" for e, c, d, r, a, s, t in EVENTS))
    return root


def marker(root: Path) -> Path:
    return root / "FAIL_FLAKY"


class Oracle:
    """What each table holds once its model last ran with `round: N`, computed by DuckDB from the seeds."""

    def __init__(self, root: Path):
        import duckdb

        self.db = duckdb.connect()
        seeds = root / "seeds"
        self.db.execute(f"create table regions as select * from read_csv('{seeds / 'regions.csv'}', header=true)")
        self.db.execute(f"create table customers as select * from read_csv('{seeds / 'customers.csv'}', header=true)")
        self.db.execute(f"""create table events as select * from read_csv('{seeds / 'events.csv'}', header=true,
                            columns={{'event_id': 'BIGINT', 'customer_id': 'BIGINT', 'day': 'DATE', 'round': 'BIGINT',
                                     'amount': 'BIGINT', 'status': 'VARCHAR', 'loaded_at': 'TIMESTAMP'}})""")
        self.db.execute("""create table dim as select c.customer_id, c.name, r.region_name
                           from customers c join regions r using (region_id)""")

    def _latest(self, n: int) -> str:
        return f"""(select * from events where round <= {n}
                    qualify row_number() over (partition by event_id order by round desc) = 1)"""

    def _totals(self, n: int) -> str:
        return f"""(select customer_id, count(*) as events, sum(amount) as total, max(round) as max_round,
                           case when sum(amount) >= 3000 then 'gold' when sum(amount) >= 1500 then 'silver'
                                else 'bronze' end as tier
                    from {self._latest(n)} group by customer_id)"""

    def _wide(self, n: int) -> str:
        return f"""(select e.event_id, e.customer_id, d.region_name, e.day, e.amount, e.status
                    from {self._latest(n)} e join dim d using (customer_id))"""

    def query(self, table: str, n: int) -> str:
        region_totals = f"""select d.region_name, count(*), sum(t.total) from {self._totals(n)} t
                            join dim d using (customer_id) group by d.region_name"""
        return {
            "customer_dim": "select customer_id, name, region_name from dim",
            "events_wide": f"select * from {self._wide(n)}",
            "customer_days": f"select customer_id, count(distinct day) from {self._wide(n)} group by 1",
            "daily_status": f"select day, status, count(*) from {self._wide(n)} group by 1, 2",
            "events_appended": f"select event_id, round, amount from events where round <= {n}",
            "latest_status": f"select event_id, status, round from {self._latest(n)}",
            "customer_totals": f"select * from {self._totals(n)}",
            "daily_totals": f"select day, count(*), sum(amount), max(round) from {self._latest(n)} group by day",
            "region_totals": region_totals,
            "region_events_mv": f"select region_name, count(*), sum(amount) from {self._wide(n)} group by 1",
            "top_customers": f"""select t.customer_id, d.name, t.total from {self._totals(n)} t
                                 join dim d using (customer_id) where t.tier = 'gold'""",
            "customer_scores": f"""select customer_id, total, rank() over (order by total desc)
                                   from {self._totals(n)}""",
            "flaky": region_totals,
            "slow": "select * from range(0, 40)",
        }[table]

    def rows(self, table: str, n: int) -> list:
        return sorted(tuple(r) for r in self.db.execute(self.query(table, n)).fetchall())

    def snapshot_current(self, n: int) -> list:
        """The snapshot's current rows (dbt_valid_to null) when customer_totals was at round n."""
        return sorted(tuple(r) for r in self.db.execute(
            f"select customer_id, tier, total from {self._totals(n)}").fetchall())
