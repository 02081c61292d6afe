"""Regenerate the shop's seed CSVs (deterministic: same output on every run).

    python integration_tests/scripts/generate_seeds.py

Rows carry a `batch` column: batch 1 is what the first `dbt build` sees, batch 2 arrives when the
project runs with `--vars '{shop_batch: 2}'` (new customers and orders, status changes, customer
changes), so the second build really merges, overwrites and snapshots changed rows.
"""

from __future__ import annotations

import csv
import random
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

SEEDS = Path(__file__).resolve().parent.parent / "seeds"
rng = random.Random(20260101)

FIRST = ["Ada", "Zoë", "José", "Søren", "Ævar", "Łukasz", "美咲", "Liam", "Noor", "Chloé", "Grace",
         "Mateo", "Ingrid", "Kwame", "Aiko", "Renée", "Björn", "Priya", "Tomás", "Olu"]
LAST = ["O'Brien", "Müller", "García", "D'Angelo", "Nguyễn", "Smith-Jones", "van der Berg",
        "Østergaard", "Kowalski", "Dubois", "Tanaka", "Okafor", "Silva", "Johansson", "Patel", "Ng"]
COUNTRIES = ["US", "DE", "FR", "JP", "BR", "DK", "PL", "GB"]
CATEGORIES = ["kitchen", "coffee", "apparel", "stationery", "garden"]
PRODUCT_NAMES = [
    'The "Classic" Mug', "Chef's Knife, 8 inch", "Café Crème Beans 1kg", "Über-Cozy Socks",
    "Tea Set — Jade", "Emoji Stickers 😀", "Notebook A5; dotted", "Garden Gloves (L)",
    "Pour-Over Kettle", "Linen Apron", "Fountain Pen «Noir»", "Seed Starter Kit",
]
METHODS = ["card", "paypal", "gift_card", "bank_transfer"]
COUPONS = ["WELCOME10", "SPRING-26", "VIP", "FREESHIP"]
CENT = Decimal("0.01")


def money(value) -> Decimal:
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)


def ts(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def write(name: str, header: list[str], rows: list[list]) -> None:
    with open(SEEDS / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(header)
        for row in rows:
            out.writerow(["" if v is None else v for v in row])


def random_time(start: datetime, end: datetime) -> datetime:
    seconds = int((end - start).total_seconds())
    return start + timedelta(seconds=rng.randrange(seconds))


def main() -> None:
    # Customers: 120 known at batch 1, 8 sign up in October (batch 2).
    customers = []
    for cid in range(1, 129):
        batch = 1 if cid <= 120 else 2
        first, last = rng.choice(FIRST), rng.choice(LAST)
        if batch == 1:
            signup = date(2025, 6, 1) + timedelta(days=rng.randrange(300))
        else:
            signup = date(2026, 10, 1) + timedelta(days=rng.randrange(10))
        local = f"{first}.{last}".lower().replace("'", "").replace(" ", "")
        email = None if rng.random() < 0.08 else f"{local}{cid}@example.com"
        country = None if rng.random() < 0.04 else rng.choice(COUNTRIES)
        updated = datetime.combine(signup, datetime.min.time()) + timedelta(hours=rng.randrange(24))
        customers.append([cid, first, last, email, country, signup.isoformat(),
                          rng.random() < 0.15, ts(updated), batch])
    write("customers", ["customer_id", "first_name", "last_name", "email", "country",
                        "signup_date", "is_vip", "updated_at", "batch"], customers)

    # Customer changes arriving with batch 2 (email, country or VIP flag).
    customer_updates = []
    for cid in sorted(rng.sample(range(1, 121), 12)):
        _, _, _, email, country, _, vip, _, _ = customers[cid - 1]
        change = rng.choice(["email", "country", "vip"])
        if change == "email":
            email = f"new.address{cid}@example.org"
        elif change == "country":
            country = rng.choice([c for c in COUNTRIES if c != country])
        else:
            vip = not vip
        when = random_time(datetime(2026, 10, 2), datetime(2026, 10, 20))
        customer_updates.append([cid, email, country, vip, ts(when), 2])
    write("customer_updates", ["customer_id", "email", "country", "is_vip", "updated_at", "batch"],
          customer_updates)

    products = []
    for pid in range(1, 41):
        name = PRODUCT_NAMES[(pid - 1) % len(PRODUCT_NAMES)]
        if pid > len(PRODUCT_NAMES):
            name = f"{name} v{(pid - 1) // len(PRODUCT_NAMES) + 1}"
        price = money(rng.uniform(3, 180))
        launched = date(2024, 1, 1) + timedelta(days=rng.randrange(700))
        products.append([pid, f"SKU-{pid:04d}", name, CATEGORIES[pid % len(CATEGORIES)], price,
                         launched.isoformat(), pid % 13 == 0])
    write("products", ["product_id", "sku", "product_name", "category", "price", "launched_on",
                       "is_discontinued"], products)

    # Orders: 360 from January to September (batch 1), 45 in October (batch 2).
    order_times = sorted(random_time(datetime(2026, 1, 1), datetime(2026, 10, 1)) for _ in range(360))
    order_times += sorted(random_time(datetime(2026, 10, 1), datetime(2026, 10, 21)) for _ in range(45))
    orders, items, payments = [], [], []
    statuses_b1 = ["completed"] * 6 + ["shipped"] * 2 + ["placed", "returned", "cancelled"]
    for oid, ordered_at in enumerate(order_times, start=1):
        batch = 1 if oid <= 360 else 2
        max_customer = 120 if batch == 1 else 128
        customer = rng.randrange(1, max_customer + 1)
        status = rng.choice(statuses_b1) if batch == 1 else rng.choice(["placed", "placed", "shipped"])
        shipping = money(rng.choice([0, 4.95, 9.9]))
        coupon = rng.choice(COUPONS) if rng.random() < 0.2 else None
        updated = ordered_at + timedelta(hours=rng.randrange(1, 96))
        if batch == 1:  # batch 1 is the data as of Sep 30: nothing in it is newer than that
            updated = min(updated, datetime(2026, 9, 30, 23, 59, 59))
        orders.append([oid, customer, ts(ordered_at), status, shipping, coupon, ts(updated), batch])

        total = Decimal(0)
        for _ in range(rng.randrange(1, 5)):
            product = products[rng.randrange(len(products))]
            qty = rng.randrange(1, 4)
            discount = money(rng.choice([5, 10, 25])) if rng.random() < 0.15 else None
            line = money(product[4] * qty * (1 - (discount or Decimal(0)) / 100))  # as the model rounds
            total += line
            items.append([len(items) + 1, oid, product[0], qty, product[4], discount])
        total = money(total + shipping)

        if status == "cancelled":
            continue
        paid_at = None if status == "placed" else ordered_at + timedelta(minutes=rng.randrange(1, 600))
        pay_status = "pending" if paid_at is None else ("refunded" if status == "returned" else "paid")
        if total > 150 and rng.random() < 0.3:  # split over a gift card and a card
            gift = money(25)
            payments.append([len(payments) + 1, oid, "gift_card", gift,
                             None if paid_at is None else ts(paid_at), pay_status])
            total -= gift
        payments.append([len(payments) + 1, oid, rng.choice(METHODS), total,
                         None if paid_at is None else ts(paid_at), pay_status])
    write("orders", ["order_id", "customer_id", "ordered_at", "status", "shipping_cost",
                     "coupon_code", "updated_at", "batch"], orders)
    write("order_items", ["order_item_id", "order_id", "product_id", "quantity", "unit_price",
                          "discount_pct"], items)
    write("payments", ["payment_id", "order_id", "payment_method", "amount", "paid_at",
                       "payment_status"], payments)

    # Status changes of batch-1 orders arriving with batch 2; a few orders move twice.
    next_status = {"placed": "shipped", "shipped": "completed", "completed": "returned"}
    # Only orders of the last quarter still move (older ones are settled), so an incremental
    # rebuild by month leaves January to June alone.
    movable = [o for o in orders if o[7] == 1 and o[3] in next_status and o[2] >= "2026-07-01"]
    status_updates = []
    for order in sorted(rng.sample(movable, 30), key=lambda o: o[0]):
        # After every batch-1 updated_at (at most Oct 4), so `updated_at > max(updated_at)` sees them.
        status, when = order[3], datetime(2026, 10, 8)
        for _ in range(2 if order[0] % 5 == 0 and status == "placed" else 1):
            status = next_status[status]
            when = random_time(when, datetime(2026, 10, 20))
            status_updates.append([order[0], status, ts(when), 2])
    write("order_status_updates", ["order_id", "status", "updated_at", "batch"], status_updates)


if __name__ == "__main__":
    main()
