"""Three-part names: the profile attaches more warehouses as catalogs (`catalogs:`), and a model's or a
source's dbt `database` puts it in one. Relations render as `catalog.schema.table`; refs, sources, hand-written
SQL, incremental merges, snapshots, python models, docs and freshness all find them there, and delta-rs reads
each table from its catalog's folder."""
from __future__ import annotations

import json

import deltalake
import pytest

from tests.support.dbt_process import dbt, write_project

pytestmark = pytest.mark.spark

MODELS = {
    # in the attached catalog `raw`
    "raw_orders.sql": "{{ config(materialized='table', database='raw') }}\n"
                      "select id, case when id % 2 = 0 then 'eu' else 'us' end as region, id * 1.5 as amount "
                      "from range(0, {{ var('n', 6) }})\n",
    "raw_latest.sql": "{{ config(materialized='incremental', database='raw', unique_key='id', "
                      "incremental_strategy='merge') }}\nselect id, amount * 2 as amount from {{ ref('raw_orders') }}"
                      "{% if is_incremental() %} where id >= 4{% endif %}\n",
    "raw_regions.py": "def model(dbt, session):\n    dbt.config(materialized='table', database='raw')\n"
                      "    return dbt.ref('raw_orders').groupBy('region').count()\n",
    "raw_view.sql": "{{ config(materialized='view', database='raw') }}\nselect region, n from {{ ref('by_region') }}\n",
    # in the profile's own warehouse, reading the attached catalog
    "by_region.sql": "{{ config(materialized='table') }}\n"
                     "select region, count(*) as n, sum(amount) as total from {{ ref('raw_orders') }} group by region\n",
    "lake_count.sql": "{{ config(materialized='table') }}\nselect count(*) as n from {{ source('lake', 'raw_orders') }}\n",
    "schema.yml": "version: 2\nsources:\n  - name: lake\n    database: raw\n    schema: analytics\n"
                  "    freshness: {warn_after: {count: 1, period: day}}\n    tables:\n      - name: raw_orders\n"
                  "models:\n  - name: raw_latest\n    columns:\n      - name: id\n        data_tests: [unique]\n",
}

SNAPSHOT = """{% snapshot raw_orders_history %}
{{ config(target_database='raw', target_schema='history', unique_key='id', strategy='check', check_cols='all') }}
select * from {{ ref('raw_orders') }}
{% endsnapshot %}
"""


def _rows(path, order_by="id"):
    table = deltalake.DeltaTable(str(path)).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: r[order_by])


@pytest.fixture
def stop_servers():
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

    yield
    stop_servers()


def test_models_sources_and_snapshots_in_an_attached_catalog(tmp_path, stop_servers):
    # one local Spark server serves the test's seven dbt commands, as it serves a user's
    project = write_project(tmp_path, "cats", MODELS, spark_server=True,
                            profile_extra=f"catalogs:\n  raw: {{warehouse: {tmp_path / 'raw_wh'}}}\n")
    (project / "snapshots").mkdir()
    (project / "snapshots" / "raw_orders_history.sql").write_text(SNAPSHOT)
    # the source reads what the run builds: build it after the first run
    first = dbt(project, "build", "--exclude", "lake_count")
    assert first.returncode == 0, first.stdout[-3000:]
    assert "`raw.analytics.raw_orders`" in first.stdout and "`analytics.by_region`" in first.stdout
    raw, own = tmp_path / "raw_wh" / "analytics", tmp_path / "warehouse" / "analytics"
    assert sorted(p.name for p in raw.iterdir()) == ["raw_latest", "raw_orders", "raw_regions", "raw_view.view.check.json",
                                                      "raw_view.view.sql"]
    assert sorted(p.name for p in own.iterdir()) == ["by_region"]
    assert [r["n"] for r in _rows(own / "by_region", "region")] == [3, 3]
    assert len(_rows(tmp_path / "raw_wh" / "history" / "raw_orders_history")) == 6

    second = dbt(project, "build", "--vars", "{n: 8}", "--exclude", "lake_count")
    assert second.returncode == 0, second.stdout[-3000:]
    assert "MERGE version 1" in second.stdout  # the incremental model found its table in `raw`
    assert [(r["id"], r["amount"]) for r in _rows(raw / "raw_latest")] == [(i, i * 3.0) for i in range(8)]
    source = dbt(project, "run", "--select", "lake_count")
    assert source.returncode == 0, source.stdout[-3000:]
    assert _rows(own / "lake_count", "n") == [{"n": 8}]
    assert len(_rows(tmp_path / "raw_wh" / "history" / "raw_orders_history")) == 8

    shown = dbt(project, "show", "--inline",
                "select o.id, v.n from raw.analytics.raw_view v join `raw`.analytics.`raw_orders` o "
                "on o.region = v.region where o.id = 7")
    assert shown.returncode == 0, shown.stdout[-3000:]
    assert "|  7 | 4 |" in shown.stdout

    docs = dbt(project, "docs", "generate")
    assert docs.returncode == 0, docs.stdout[-3000:]
    catalog = json.loads((project / "target" / "catalog.json").read_text())
    placed = {k: (v["metadata"]["database"], v["metadata"]["schema"]) for k, v in catalog["nodes"].items()}
    assert placed["model.cats.raw_orders"] == ("raw", "analytics")
    assert placed["model.cats.raw_view"] == ("raw", "analytics")
    assert placed["model.cats.by_region"] == (None, "analytics")
    assert sorted(catalog["sources"]["source.cats.lake.raw_orders"]["columns"]) == ["amount", "id", "region"]

    fresh = dbt(project, "source", "freshness")
    assert fresh.returncode == 0, fresh.stdout[-3000:]


def test_a_database_that_is_not_attached_is_refused_by_name(tmp_path):
    project = write_project(tmp_path, "nocat", {
        "orders.sql": "{{ config(materialized='table', database='finance') }}\nselect 1 as id\n",
    }, profile_extra=f"catalogs:\n  raw: {{warehouse: {tmp_path / 'raw_wh'}}}\n")
    result = dbt(project, "run")
    assert result.returncode != 0
    assert "database 'finance' is not a catalog of this profile (attached: raw)" in result.stdout
    assert not (tmp_path / "raw_wh").exists() or not any((tmp_path / "raw_wh").rglob("_delta_log"))
    assert not any((tmp_path / "warehouse").rglob("_delta_log"))


def test_an_attached_catalog_on_an_object_store_uses_its_own_storage_options(tmp_path):
    """The profile's warehouse on local disk, `lake` on S3 (SeaweedFS) with its own keys: each table is
    written where its catalog is, and the keys never show in the log."""
    from tests.support.seaweed import seaweedfs_or_skip

    with seaweedfs_or_skip() as s3:
        options = "".join(f"\n      {k}: '{v}'" for k, v in s3.storage_options().items())
        project = write_project(tmp_path, "s3cat", {
            "events.sql": "{{ config(materialized='table', database='lake') }}\nselect id from range(0, 5)\n",
            "event_count.sql": "{{ config(materialized='table') }}\nselect count(*) as n from {{ ref('events') }}\n",
        }, profile_extra=f"catalogs:\n  lake:\n    warehouse: {s3.uri('lake_wh')}\n    storage_options:{options}\n")
        result = dbt(project, "run")
        assert result.returncode == 0, result.stdout[-3000:]
        events = deltalake.DeltaTable(s3.uri("lake_wh", "analytics", "events"), storage_options=s3.storage_options())
        assert sorted(events.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3, 4]
        assert _rows(tmp_path / "warehouse" / "analytics" / "event_count", "n") == [{"n": 5}]
        log = (project / "logs" / "dbt.log").read_text(errors="replace")
        assert s3.storage_options()["AWS_SECRET_ACCESS_KEY"] not in log + result.stdout
