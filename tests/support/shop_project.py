"""The online-shop project in integration_tests/ as the tests that build it name its parts: its nodes by
kind, their schemas, the second batch's flags and the selection that covers every kind of node."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/support/ -> the repository
PROJECT_SRC = ROOT / "integration_tests"
# The second build rebuilds October's microbatch, so the result does not depend on today's date.
BATCH_2 = ["--vars", "{shop_batch: 2}", "--event-time-start", "2026-10-01", "--event-time-end", "2026-11-01"]

SEEDS = ["customers", "customer_updates", "products", "orders", "order_items", "order_status_updates", "payments"]
VIEWS = ["stg_customers", "stg_products", "stg_orders", "stg_order_items", "stg_payments"]
TABLES = ["fct_orders", "dim_customers", "dim_products", "product_sales"]
INCREMENTALS = ["orders_merge", "customers_merge", "order_events", "sales_daily", "customer_revenue",
                "payments_daily", "orders_microbatch", "order_status_changes"]
SNAPSHOTS = ["orders_snapshot", "customers_snapshot"]
SCHEMA_OF = {**{s: "shop_raw" for s in SEEDS}, **{t: "shop" for t in TABLES + INCREMENTALS},
             **{s: "shop_snapshots" for s in SNAPSHOTS}}
SPARK_LITTER = ["metastore_db", "derby.log", "spark-warehouse"]
# The models that cover every kind of node (seeds, views, tables, the incremental strategies, a python
# model, a snapshot): what CI's selection builds where the project is built again elsewhere (on S3);
# tests/integration/test_shop_project.py builds the whole project, and DELTALOG_FULL_SUITE=1 the whole project there too.
EVERY_KIND = ["--select", "+orders_merge +dim_customers +product_sales +orders_snapshot +payments_daily "
              "+orders_microbatch", "--indirect-selection", "cautious"]
