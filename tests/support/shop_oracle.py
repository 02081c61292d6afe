"""What the shop project's models must contain, recomputed from the seed CSVs with pandas alone.

An independent oracle: nothing here touches Spark, dbt or the Delta log, so a test comparing a table
read back with `deltalake` against these frames checks the whole path (seed load, SQL, commit, read).
Money stays `Decimal` end to end, rounded half up to cents like Spark's `round`.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pandas as pd

CENT = Decimal("0.01")
STATUSES_WITH_REVENUE = ("completed", "shipped")


def dec(value) -> Decimal | None:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value == "":
        return None
    return Decimal(str(value))


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


class ShopOracle:
    def __init__(self, seeds_dir: Path):
        read = lambda name: pd.read_csv(seeds_dir / f"{name}.csv", dtype=str, keep_default_na=False)  # noqa: E731
        self.raw = {name: read(name) for name in (
            "customers", "customer_updates", "products", "orders", "order_items",
            "order_status_updates", "payments")}

    # ---- seeds as typed frames -------------------------------------------------------------------
    def seed_rows(self, name: str) -> int:
        return len(self.raw[name])

    def null_count(self, seed: str, column: str) -> int:
        return int((self.raw[seed][column] == "").sum())

    def _orders(self) -> pd.DataFrame:
        o = self.raw["orders"].copy()
        o["order_id"] = o["order_id"].astype(int)
        o["customer_id"] = o["customer_id"].astype(int)
        o["batch"] = o["batch"].astype(int)
        o["ordered_at"] = pd.to_datetime(o["ordered_at"])
        o["updated_at"] = pd.to_datetime(o["updated_at"])
        o["shipping_cost"] = o["shipping_cost"].map(dec)
        return o

    # ---- staging -----------------------------------------------------------------------------------
    def stg_orders(self, batch: int) -> pd.DataFrame:
        o = self._orders()
        o = o[o["batch"] <= batch].copy()
        u = self.raw["order_status_updates"].copy()
        u["order_id"] = u["order_id"].astype(int)
        u["batch"] = u["batch"].astype(int)
        u["updated_at"] = pd.to_datetime(u["updated_at"])
        u = u[u["batch"] <= batch].sort_values("updated_at").groupby("order_id").tail(1)
        o = o.merge(u[["order_id", "status", "updated_at"]], on="order_id", how="left", suffixes=("", "_u"))
        changed = o["status_u"].notna()
        o.loc[changed, "status"] = o.loc[changed, "status_u"]
        o["updated_at"] = o[["updated_at", "updated_at_u"]].max(axis=1)
        o["order_date"] = o["ordered_at"].dt.date
        o["order_month"] = o["ordered_at"].dt.to_period("M").dt.start_time.dt.date
        return o.drop(columns=["status_u", "updated_at_u"]).set_index("order_id", drop=False)

    def stg_customers(self, batch: int) -> pd.DataFrame:
        c = self.raw["customers"].copy()
        c["customer_id"] = c["customer_id"].astype(int)
        c = c[c["batch"].astype(int) <= batch].copy()
        u = self.raw["customer_updates"].copy()
        u["customer_id"] = u["customer_id"].astype(int)
        u = u[u["batch"].astype(int) <= batch].sort_values("updated_at").groupby("customer_id").tail(1)
        c = c.set_index("customer_id", drop=False)
        for _, row in u.iterrows():
            for col in ("email", "country", "is_vip", "updated_at"):
                c.loc[row["customer_id"], col] = row[col]
        c["email"] = c["email"].replace("", None)
        c["country"] = c["country"].replace("", None)
        c["is_vip"] = c["is_vip"] == "True"
        c["updated_at"] = pd.to_datetime(c["updated_at"])
        return c

    def order_totals(self) -> pd.DataFrame:
        items = self.raw["order_items"]
        rows = {}
        for _, it in items.iterrows():
            discount = dec(it["discount_pct"]) or Decimal(0)
            line = cents(int(it["quantity"]) * dec(it["unit_price"]) * (1 - discount / 100))
            oid = int(it["order_id"])
            count, units, amount = rows.get(oid, (0, 0, Decimal(0)))
            rows[oid] = (count + 1, units + int(it["quantity"]), amount + line)
        return pd.DataFrame.from_dict(rows, orient="index", columns=["item_count", "units", "items_amount"])

    def stg_payments(self, batch: int) -> pd.DataFrame:
        p = self.raw["payments"].copy()
        p["order_id"] = p["order_id"].astype(int)
        p["amount"] = p["amount"].map(dec)
        p["paid_at"] = pd.to_datetime(p["paid_at"].replace("", None))
        known = set(self.stg_orders(batch)["order_id"])
        return p[p["order_id"].isin(known)]

    # ---- marts and incrementals -----------------------------------------------------------------
    def fct_orders(self, batch: int) -> pd.DataFrame:
        o = self.stg_orders(batch).join(self.order_totals(), how="inner")
        p = self.stg_payments(batch)
        paid = p[p["payment_status"] == "paid"].groupby("order_id")["amount"].apply(lambda s: sum(s, Decimal(0)))
        o["paid_amount"] = [paid.get(oid, Decimal(0)) for oid in o.index]
        o["order_total"] = [a + s for a, s in zip(o["items_amount"], o["shipping_cost"])]
        return o

    def sales_daily(self, batch: int) -> pd.DataFrame:
        f = self.fct_orders(batch)
        f["revenue_part"] = [t if s != "cancelled" else Decimal(0) for t, s in zip(f["order_total"], f["status"])]
        g = f.groupby("order_date")
        return pd.DataFrame({
            "orders": g.size(),
            "revenue": g["revenue_part"].apply(lambda s: sum(s, Decimal(0))),
            "order_month": g["order_month"].first(),
        })

    def customer_revenue(self, batch: int) -> pd.DataFrame:
        f = self.fct_orders(batch)
        g = f.groupby("customer_id")
        return pd.DataFrame({"orders": g.size(), "revenue": g["order_total"].apply(lambda s: sum(s, Decimal(0)))})

    def payments_daily(self, batch: int) -> pd.DataFrame:
        p = self.stg_payments(batch)
        p = p[p["paid_at"].notna()].copy()
        p["paid_date"] = p["paid_at"].dt.date
        g = p.groupby(["paid_date", "payment_method"])
        return pd.DataFrame({"payments": g.size(), "amount": g["amount"].apply(lambda s: sum(s, Decimal(0)))})

    def order_events(self, batch: int) -> int:
        orders = (self.raw["orders"]["batch"].astype(int) <= batch).sum()
        updates = (self.raw["order_status_updates"]["batch"].astype(int) <= batch).sum()
        return int(orders + updates)

    def changed_order_ids(self, batch: int) -> set[int]:
        u = self.raw["order_status_updates"]
        return set(u[u["batch"].astype(int) == batch]["order_id"].astype(int))

    def changed_customer_ids(self, batch: int) -> set[int]:
        u = self.raw["customer_updates"]
        return set(u[u["batch"].astype(int) == batch]["customer_id"].astype(int))

    def new_order_ids(self, batch: int) -> set[int]:
        o = self.raw["orders"]
        return set(o[o["batch"].astype(int) == batch]["order_id"].astype(int))
