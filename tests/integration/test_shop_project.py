"""The README's "run" command, end to end: the online-shop project in integration_tests/ is built twice
with dbt (batch 1, then batch 2 with new and changed rows), and every table is read back with
`deltalake` (delta-rs) and compared with what the seeds say it must hold (tests/support/shop_oracle.py, pandas).

All dbt calls run in this process through dbtRunner, so they share one SparkSession; the project is a
copy in a temp dir, which is also the working directory while dbt runs (the warehouse is ./warehouse).
"""

from __future__ import annotations

import json
from decimal import Decimal
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from tests.support.shop_oracle import ShopOracle
from tests.support.shop_project import (
    BATCH_2, INCREMENTALS, PROJECT_SRC, SCHEMA_OF, SEEDS, SNAPSHOTS, SPARK_LITTER, TABLES, VIEWS,
)

deltalake = pytest.importorskip("deltalake")
dbt_main = pytest.importorskip("dbt.cli.main")

pytestmark = [pytest.mark.dbt, pytest.mark.spark]



@dataclass
class Build:
    success: bool
    failures: list[str]
    kinds: dict[str, int]  # node results per resource type
    versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, result, warehouse: Path) -> "Build":
        nodes = list(getattr(result.result, "results", None) or [])
        if result.exception is not None:
            failures = [f"dbt raised: {result.exception!r}"]
        else:
            failures = [f"{r.node.resource_type} {r.node.name}: {r.status}: {r.message}"
                        for r in nodes if str(r.status) not in ("success", "pass")]
        kinds = pd.Series([str(r.node.resource_type) for r in nodes], dtype=object).value_counts().to_dict()
        return cls(bool(result.success), failures, kinds, _versions(warehouse))


@dataclass
class ShopRun:
    project: Path
    warehouse: Path
    first: Build
    second: Build
    rerun_merges: Build
    shown_fct_orders_count: int | None
    litter_in_cwd_before: list[str]


def _dbt(project: Path, *args: str):
    return dbt_main.dbtRunner().invoke([*args, "--profiles-dir", str(project), "--project-dir", str(project)])


def _versions(warehouse: Path) -> dict[str, int]:
    out = {}
    for name, schema in SCHEMA_OF.items():
        path = warehouse / schema / name
        if (path / "_delta_log").is_dir():
            out[name] = deltalake.DeltaTable(str(path)).version()
    return out


def _run_shop(project: Path) -> ShopRun:
    warehouse = project / "warehouse"
    before = [p for p in SPARK_LITTER if (Path.cwd() / p).exists()]
    old_cwd = os.getcwd()
    os.chdir(project)
    try:
        first = Build.of(_dbt(project, "build"), warehouse)
        shown = _dbt(project, "show", "--inline", "select count(*) as n from {{ ref('fct_orders') }}")
        try:
            shown_count = int(shown.result.results[0].agate_table.rows[0][0])
        except Exception:
            shown_count = None
        second = Build.of(_dbt(project, "build", *BATCH_2), warehouse)
        # Nothing new since the second build: the merges find an empty source.
        rerun = Build.of(_dbt(project, "run", "--select", "orders_merge customers_merge", *BATCH_2), warehouse)
    finally:
        os.chdir(old_cwd)
    return ShopRun(project, warehouse, first, second, rerun, shown_count, before)


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> ShopRun:
    # SHOP_WORKDIR=<dir> builds there and keeps it; run again with the same value to re-check the
    # tables of that build (its run.json) without running dbt.
    workdir = os.environ.get("SHOP_WORKDIR")
    base = Path(workdir) if workdir else tmp_path_factory.mktemp("shop")
    project = base / "integration_tests"
    if (project / "run.json").is_file():
        data = json.loads((project / "run.json").read_text())
        builds = {k: Build(**data.pop(k)) for k in ("first", "second", "rerun_merges")}
        return ShopRun(project=Path(data["project"]), warehouse=Path(data["warehouse"]), **builds,
                       shown_fct_orders_count=data["shown_fct_orders_count"],
                       litter_in_cwd_before=data["litter_in_cwd_before"])
    shutil.copytree(PROJECT_SRC, project, ignore=shutil.ignore_patterns(
        "target", "logs", "warehouse", "dbt_packages", *SPARK_LITTER))
    # dbt runs in this test process: its Spark is this process's, as for the other in-process tests
    # (tests/functional/test_spark_server.py builds projects on a server)
    profiles = project / "profiles.yml"
    profiles.write_text(profiles.read_text().rstrip("\n") + "\n      spark_server: false\n")
    run = _run_shop(project)
    (project / "run.json").write_text(json.dumps(asdict(run), default=str, indent=1))
    return run


@pytest.fixture(scope="module")
def oracle() -> ShopOracle:
    return ShopOracle(PROJECT_SRC / "seeds")


# ---- reading tables back with delta-rs ---------------------------------------------------------------

def table_path(shop: ShopRun, name: str) -> Path:
    return shop.warehouse / SCHEMA_OF[name] / name


def delta(shop: ShopRun, name: str, version: int | None = None):
    return deltalake.DeltaTable(str(table_path(shop, name)), version=version)


def frame(shop: ShopRun, name: str, version: int | None = None) -> pd.DataFrame:
    df = delta(shop, name, version).to_pyarrow_table().to_pandas()
    for col in df.columns:  # delta-rs reads Delta timestamps as UTC; the project runs in UTC
        if isinstance(df[col].dtype, pd.DatetimeTZDtype):
            df[col] = df[col].dt.tz_convert("UTC").dt.tz_localize(None)
    return df


def operations(shop: ShopRun, name: str) -> dict[int, str]:
    return {h["version"]: h["operation"] for h in delta(shop, name).history()}


def commit_info(shop: ShopRun, name: str, version: int) -> dict:
    for h in delta(shop, name).history():
        if h["version"] == version:
            return h
    raise AssertionError(f"{name}: no history entry for version {version}")


def new_operations(shop: ShopRun, name: str) -> list[str]:
    """The operations committed by the second build, oldest first."""
    ops = operations(shop, name)
    v1, v2 = shop.first.versions[name], shop.second.versions[name]
    return [ops[v] for v in range(v1 + 1, v2 + 1)]


def add_actions(shop: ShopRun, name: str, version: int | None = None) -> pd.DataFrame:
    return pa.table(delta(shop, name, version).get_add_actions(flatten=True)).to_pandas()


def log_actions(shop: ShopRun, name: str, version: int) -> list[dict]:
    text = (table_path(shop, name) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ---- the builds -------------------------------------------------------------------------------------

def test_first_build_passes(shop):
    assert shop.first.success, "\n".join(shop.first.failures)
    kinds = shop.first.kinds
    assert kinds.get("seed") == len(SEEDS)
    assert kinds.get("snapshot") == len(SNAPSHOTS)
    assert kinds.get("model") == len(VIEWS + TABLES + INCREMENTALS)
    assert kinds.get("unit_test") == 1
    assert kinds.get("test", 0) >= 30


def test_second_build_passes(shop):
    assert shop.second.success, "\n".join(shop.second.failures)


def test_no_spark_litter_in_the_project_or_working_dir(shop):
    assert [p for p in SPARK_LITTER if (shop.project / p).exists()] == []
    assert {p for p in SPARK_LITTER if (Path.cwd() / p).exists()} <= set(shop.litter_in_cwd_before)


def test_every_table_is_a_delta_table_and_views_are_kept_as_sql(shop):
    missing = [n for n in SCHEMA_OF if n not in shop.second.versions]
    assert missing == [], f"no _delta_log for {missing} under {shop.warehouse}"
    for name in VIEWS:
        assert not (shop.warehouse / "shop_staging" / name / "_delta_log").exists(), f"{name} is a view"
        assert (shop.warehouse / "shop_staging" / f"{name}.view.sql").is_file(), f"{name}'s SQL not kept"


def test_dbt_show_agrees_with_deltalake(shop):
    assert shop.shown_fct_orders_count == len(frame(shop, "fct_orders", shop.first.versions["fct_orders"]))


# ---- seeds ------------------------------------------------------------------------------------------

def test_seeds_round_trip_with_types_nulls_and_unicode(shop, oracle):
    for name in SEEDS:
        assert len(frame(shop, name)) == oracle.seed_rows(name), name

    products = frame(shop, "products")
    assert sorted(products["product_name"]) == sorted(oracle.raw["products"]["product_name"])
    assert 'The "Classic" Mug' in set(products["product_name"])
    assert "Chef's Knife, 8 inch" in set(products["product_name"])
    assert "Emoji Stickers 😀" in set(products["product_name"])
    schema = delta(shop, "products").schema().to_arrow()
    assert pa.schema(schema).field("price").type == pa.decimal128(10, 2)
    assert pa.schema(schema).field("launched_on").type == pa.date32()

    customers = frame(shop, "customers")
    # an empty CSV cell is a real null, not the string 'None'
    assert customers["email"].isna().sum() == oracle.null_count("customers", "email") > 0
    assert "None" not in set(customers["email"].dropna())
    assert {"O'Brien", "Müller", "Nguyễn"} <= set(customers["last_name"])
    cschema = pa.schema(delta(shop, "customers").schema().to_arrow())
    assert cschema.field("signup_date").type == pa.date32()
    assert pa.types.is_timestamp(cschema.field("updated_at").type)
    assert cschema.field("is_vip").type == pa.bool_()

    items = frame(shop, "order_items")
    assert items["discount_pct"].isna().sum() == oracle.null_count("order_items", "discount_pct")


# ---- tables -----------------------------------------------------------------------------------------

def test_fct_orders_is_partitioned_by_month_with_correct_values(shop, oracle):
    dt = delta(shop, "fct_orders")
    assert dt.metadata().partition_columns == ["order_month"]
    adds = add_actions(shop, "fct_orders")
    assert all(p.startswith("order_month=") for p in adds["path"])
    expected = oracle.fct_orders(2)
    months = {str(m) for m in expected["order_month"]}
    assert {str(v) for v in adds["partition.order_month"]} == months

    got = frame(shop, "fct_orders").set_index("order_id").sort_index()
    assert len(got) == len(expected) == 405
    # partition values read back as the column; rows per month as the seeds say
    assert got.groupby(got["order_month"].astype(str)).size().to_dict() == \
        expected.groupby(expected["order_month"].astype(str)).size().to_dict()
    exp = expected.sort_index()
    assert list(got["status"]) == list(exp["status"])
    assert list(got["order_total"]) == list(exp["order_total"])
    assert list(got["paid_amount"]) == list(exp["paid_amount"])
    assert list(got["item_count"]) == list(exp["item_count"])


def test_dim_customers_configs_zorder_checkpoint_isolation(shop, oracle):
    dt = delta(shop, "dim_customers")
    conf = dt.metadata().configuration
    assert conf.get("delta.checkpointInterval") == "3"
    assert conf.get("delta.isolationLevel") == "Serializable"
    assert conf.get("shop.owner") == "analytics"

    ops = operations(shop, "dim_customers")
    v1 = shop.first.versions["dim_customers"]
    assert ops[v1] == "OPTIMIZE", ops  # the zorder post-hook ran after the data commit
    params = commit_info(shop, "dim_customers", v1).get("operationParameters", {})
    assert "country" in str(params.get("zOrderBy")) and "signup_date" in str(params.get("zOrderBy"))
    optimize_actions = log_actions(shop, "dim_customers", v1)
    adds = [a["add"] for a in optimize_actions if "add" in a]
    removes = [a["remove"] for a in optimize_actions if "remove" in a]
    assert adds and removes
    assert all(a["dataChange"] is False for a in adds + removes)

    log = table_path(shop, "dim_customers") / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet")), f"no checkpoint after {dt.version() + 1} commits"
    assert (log / "_last_checkpoint").is_file()

    got = frame(shop, "dim_customers").set_index("customer_id").sort_index()
    assert len(got) == 128 and got.index.is_unique
    f = oracle.fct_orders(2)
    f = f[f["status"].isin(["completed", "shipped"])]
    ltv = f.groupby("customer_id")["order_total"].apply(lambda s: sum(s, Decimal(0)))
    for cid, value in ltv.items():
        assert got.loc[cid, "lifetime_value"] == value, cid


def test_documented_constrained_and_liquid_clustered_marts(shop, oracle):
    """persist_docs, a check constraint and not_null from the contract, and a liquid clustered Python
    model, as any Delta reader sees them after both builds."""
    products = delta(shop, "dim_products")
    md = products.metadata()
    assert md.description.startswith("The product catalogue")
    assert md.configuration["delta.constraints.price_not_negative"] == "price >= 0"
    product_id = products.schema().fields[0]
    assert (product_id.name, product_id.nullable) == ("product_id", False)
    assert product_id.metadata == {"comment": "The product's id in the shop system."}
    assert "checkConstraints" in (products.protocol().writer_features or [])

    sales = delta(shop, "product_sales")
    assert {"clustering", "domainMetadata"} <= set(sales.protocol().writer_features or [])
    ops = [op for _, op in sorted(operations(shop, "product_sales").items())]
    assert ops[:2] == ["CREATE TABLE AS SELECT", "OPTIMIZE"]  # clustered after the first build
    got = frame(shop, "product_sales").set_index("product_id").sort_index()
    items = oracle.raw["order_items"]
    known = set(oracle.raw["products"]["product_id"])
    items = items[items["product_id"].isin(known)]
    expected = items.assign(q=items["quantity"].astype(int)).groupby(items["product_id"].astype(int))["q"].sum()
    assert got.index.is_unique
    assert {int(k): int(v) for k, v in got["units"].items()} == {int(k): int(v) for k, v in expected.items()}


def test_contract_model_has_the_declared_types(shop):
    schema = pa.schema(delta(shop, "dim_products").schema().to_arrow())
    assert [(f.name, f.type) for f in schema] == [
        ("product_id", pa.int32()), ("sku", pa.string()), ("product_name", pa.string()),
        ("category", pa.string()), ("price", pa.decimal128(10, 2)), ("launched_on", pa.date32()),
        ("is_discontinued", pa.bool_()),
    ]


# ---- incremental strategies ---------------------------------------------------------------------------

def test_merge_on_composite_key_updates_only_listed_columns(shop, oracle):
    assert new_operations(shop, "orders_merge") == ["MERGE"]
    got = frame(shop, "orders_merge")
    assert not got.duplicated(["order_id", "customer_id"]).any()
    expected = oracle.stg_orders(2)
    assert len(got) == len(expected) == 405
    got = got.set_index("order_id").sort_index()
    assert list(got["status"]) == list(expected.sort_index()["status"])
    changed, new = oracle.changed_order_ids(2), oracle.new_order_ids(2)
    # loaded_in_batch is not in merge_update_columns: updated rows keep the batch that inserted them
    assert set(got.loc[sorted(changed), "loaded_in_batch"]) == {1}
    assert set(got.loc[sorted(new), "loaded_in_batch"]) == {2}
    before = frame(shop, "orders_merge", shop.first.versions["orders_merge"]).set_index("order_id")
    assert len(before) == 360
    assert (before.loc[sorted(changed), "status"] != got.loc[sorted(changed), "status"]).all()


def test_changes_of_the_merge_are_consumed_once(shop, oracle):
    """order_status_changes: the first build reads orders_merge whole; the second appends exactly the
    rows its merge inserted or updated, as delta-rs's change data feed reads them."""
    first, second = shop.first.versions["orders_merge"], shop.second.versions["orders_merge"]
    got = frame(shop, "order_status_changes")
    initial = got[got["orders_version"] == first]
    assert sorted(initial["order_id"]) == sorted(frame(shop, "orders_merge", first)["order_id"])
    feed = pa.table(delta(shop, "orders_merge").load_cdf(starting_version=first + 1,
                                                         ending_version=second).read_all()).to_pandas()
    feed = feed[feed["_change_type"].isin(["insert", "update_postimage"])]
    later = got[got["orders_version"] > first]
    assert sorted(zip(later["order_id"], later["status"], later["change_type"], later["orders_version"])) == \
        sorted(zip(feed["order_id"], feed["status"], feed["_change_type"], feed["_commit_version"]))
    changed, new = oracle.changed_order_ids(2), oracle.new_order_ids(2)
    assert sorted(later["order_id"]) == sorted(changed | new)


def test_merge_exclude_columns_keeps_first_load_bookkeeping(shop, oracle):
    assert new_operations(shop, "customers_merge") == ["MERGE"]
    before = frame(shop, "customers_merge", shop.first.versions["customers_merge"]).set_index("customer_id")
    got = frame(shop, "customers_merge").set_index("customer_id").sort_index()
    expected = oracle.stg_customers(2).sort_index()
    assert len(before) == 120 and len(got) == 128 and got.index.is_unique
    for col in ("email", "country", "is_vip"):
        assert got[col].tolist() == expected[col].tolist(), col
    changed = sorted(oracle.changed_customer_ids(2))
    assert set(got.loc[changed, "loaded_in_batch"]) == {1}
    assert (got.loc[changed, "first_loaded_at"] == before.loc[changed, "first_loaded_at"]).all()
    assert set(got.loc[range(121, 129), "loaded_in_batch"]) == {2}


def test_append_with_a_new_column(shop, oracle):
    ops = new_operations(shop, "order_events")
    assert ops == ["WRITE"], ops  # the schema change commits with the append
    got = frame(shop, "order_events")
    assert len(frame(shop, "order_events", shop.first.versions["order_events"])) == oracle.order_events(1)
    assert len(got) == oracle.order_events(2)
    assert got[got["batch"] == 1]["source_system"].isna().all()
    assert set(got[got["batch"] == 2]["source_system"]) == {"webshop"}
    last = log_actions(shop, "order_events", shop.second.versions["order_events"])
    assert not any("remove" in a for a in last), "an append removes no file"


def test_insert_overwrite_replaces_only_changed_months(shop, oracle):
    assert len(new_operations(shop, "sales_daily")) == 1
    got = frame(shop, "sales_daily").set_index("order_date").sort_index()
    expected = oracle.sales_daily(2).sort_index()
    assert list(got.index) == list(expected.index)
    assert list(got["orders"]) == list(expected["orders"])
    assert list(got["revenue"]) == list(expected["revenue"])

    touched = {str(oracle.stg_orders(2).loc[oid, "order_month"])
               for oid in oracle.changed_order_ids(2) | oracle.new_order_ids(2)}
    v1 = add_actions(shop, "sales_daily", shop.first.versions["sales_daily"])
    v2 = add_actions(shop, "sales_daily", shop.second.versions["sales_daily"])
    by_month = lambda df: {m: set(g["path"]) for m, g in df.groupby(df["partition.order_month"].astype(str))}  # noqa: E731
    m1, m2 = by_month(v1), by_month(v2)
    assert set(m2) - touched and touched <= set(m2), (sorted(m2), sorted(touched))
    for month in m2:
        if month in touched:
            assert not (m1.get(month, set()) & m2[month]), f"{month} changed but its files were kept"
        else:
            assert m1[month] == m2[month], f"{month} did not change but its files were rewritten"


def test_delete_insert_recomputes_changed_customers(shop, oracle):
    assert len(new_operations(shop, "customer_revenue")) == 1
    got = frame(shop, "customer_revenue").set_index("customer_id").sort_index()
    expected = oracle.customer_revenue(2).sort_index()
    assert got.index.is_unique
    assert list(got.index) == list(expected.index)
    assert list(got["orders"]) == list(expected["orders"])
    assert list(got["revenue"]) == list(expected["revenue"])


def test_replace_where_replaces_the_window(shop, oracle):
    assert len(new_operations(shop, "payments_daily")) == 1
    got = frame(shop, "payments_daily").set_index(["paid_date", "payment_method"]).sort_index()
    expected = oracle.payments_daily(2).sort_index()
    assert list(got.index) == list(expected.index)
    assert list(got["payments"]) == list(expected["payments"])
    assert list(got["amount"]) == list(expected["amount"])
    params = commit_info(shop, "payments_daily", shop.second.versions["payments_daily"]).get("operationParameters", {})
    assert "2026-09-01" in json.dumps(params), params


def test_microbatch_one_commit_per_batch(shop, oracle):
    first_commits = shop.first.versions["orders_microbatch"] + 1
    assert first_commits >= 9, "January to September at least, one commit per monthly batch"
    assert len(new_operations(shop, "orders_microbatch")) == 1  # only October was rebuilt
    got = frame(shop, "orders_microbatch")
    assert not got["order_id"].duplicated().any()
    assert sorted(got["order_id"]) == sorted(oracle.stg_orders(2)["order_id"])
    before = frame(shop, "orders_microbatch", shop.first.versions["orders_microbatch"])
    assert sorted(before["order_id"]) == sorted(oracle.stg_orders(1)["order_id"])


def test_snapshots_record_changes(shop, oracle):
    orders = frame(shop, "orders_snapshot")
    changed = oracle.changed_order_ids(2)
    assert len(orders) == 405 + len(changed)
    current = orders[orders["dbt_valid_to"].isna()].set_index("order_id").sort_index()
    assert len(current) == 405
    assert list(current["status"]) == list(oracle.stg_orders(2).sort_index()["status"])
    closed = orders[orders["dbt_valid_to"].notna()]
    assert set(closed["order_id"]) == changed

    customers = frame(shop, "customers_snapshot")
    changed_c = oracle.changed_customer_ids(2)
    assert len(customers) == 128 + len(changed_c)
    assert customers["dbt_valid_to"].isna().sum() == 128
    assert set(customers[customers["dbt_valid_to"].notna()]["customer_id"]) == changed_c
    for name in SNAPSHOTS:
        assert new_operations(shop, name) == ["MERGE"], name


# ---- versions and history -------------------------------------------------------------------------------

def test_second_build_adds_one_commit_per_model(shop):
    grew = {n: shop.second.versions[n] - shop.first.versions[n] for n in shop.second.versions}
    expected = {n: 1 for n in TABLES + INCREMENTALS + SNAPSHOTS}
    expected.update({n: 0 for n in SEEDS})  # unchanged seeds are not loaded again
    expected["dim_customers"] = 2  # the rebuild, then its OPTIMIZE ZORDER BY post-hook
    expected["product_sales"] = 2  # the rebuild, then OPTIMIZE of its liquid clustering
    assert grew == expected
    assert new_operations(shop, "dim_customers")[-1] == "OPTIMIZE"
    for name in TABLES:
        first_op = operations(shop, name)[0]
        assert first_op in ("CREATE TABLE AS SELECT", "WRITE", "CREATE TABLE"), (name, first_op)


def test_commits_name_the_dbt_model(shop):
    info = commit_info(shop, "orders_merge", shop.second.versions["orders_merge"])
    assert "model.shop.orders_merge" in json.dumps(info, default=str), info


def test_merge_with_an_empty_source_commits_nothing(shop):
    assert shop.rerun_merges.success, "\n".join(shop.rerun_merges.failures)
    for name in ("orders_merge", "customers_merge"):
        assert shop.rerun_merges.versions[name] == shop.second.versions[name], name
