"""A project of dbt's jaffle_shop shape, written here for bench/dev_loop.py (not copied from dbt-labs).

The same nodes as the project users know from dbt's tutorials: three seeds (raw_customers, 100 rows;
raw_orders, 99; raw_payments, 113), three staging views that rename columns in `source` / `renamed`
CTEs (payments' cents made dollars), the `customers` and `orders` tables (orders pivots the payment
methods into one amount column each and a total), two schema files with descriptions, doc blocks and
20 data tests (unique, not_null, accepted_values, relationships), written the way jaffle_shop writes
them (`tests:`, `values:` without `arguments:`): 28 nodes. Seeds' rows come from a seeded generator
with jaffle's distributions (most orders completed, a few orders paid twice, coupons and gift cards).
"""
from __future__ import annotations

import csv
import random
from datetime import date, timedelta
from pathlib import Path

NODES = 28
PAYMENT_METHODS = ["credit_card", "coupon", "bank_transfer", "gift_card"]
ORDER_STATUSES = ["placed", "shipped", "completed", "return_pending", "returned"]
STORED_TABLES = ("raw_customers", "raw_orders", "raw_payments", "customers", "orders")  # views are not stored

FILES = {
    "models/staging/stg_customers.sql": """\
with source as (

    select * from {{ ref('raw_customers') }}

),

renamed as (

    select
        id as customer_id,
        first_name,
        last_name

    from source

)

select * from renamed
""",
    "models/staging/stg_orders.sql": """\
with source as (

    select * from {{ ref('raw_orders') }}

),

renamed as (

    select
        id as order_id,
        user_id as customer_id,
        order_date,
        status

    from source

)

select * from renamed
""",
    "models/staging/stg_payments.sql": """\
with source as (

    select * from {{ ref('raw_payments') }}

),

renamed as (

    select
        id as payment_id,
        order_id,
        payment_method,
        -- the raw amounts are cents
        amount / 100 as amount

    from source

)

select * from renamed
""",
    "models/customers.sql": """\
with customers as (

    select * from {{ ref('stg_customers') }}

),

orders as (

    select * from {{ ref('stg_orders') }}

),

payments as (

    select * from {{ ref('stg_payments') }}

),

customer_orders as (

    select
        customer_id,
        min(order_date) as first_order,
        max(order_date) as most_recent_order,
        count(order_id) as number_of_orders
    from orders
    group by customer_id

),

customer_payments as (

    select
        orders.customer_id,
        sum(payments.amount) as total_amount
    from payments
    left join orders on payments.order_id = orders.order_id
    group by orders.customer_id

),

final as (

    select
        customers.customer_id,
        customers.first_name,
        customers.last_name,
        customer_orders.first_order,
        customer_orders.most_recent_order,
        customer_orders.number_of_orders,
        customer_payments.total_amount as customer_lifetime_value
    from customers
    left join customer_orders on customers.customer_id = customer_orders.customer_id
    left join customer_payments on customers.customer_id = customer_payments.customer_id

)

select * from final
""",
    "models/orders.sql": """\
{% set payment_methods = ['credit_card', 'coupon', 'bank_transfer', 'gift_card'] %}

with orders as (

    select * from {{ ref('stg_orders') }}

),

payments as (

    select * from {{ ref('stg_payments') }}

),

order_payments as (

    select
        order_id,
        {% for payment_method in payment_methods -%}
        sum(case when payment_method = '{{ payment_method }}' then amount else 0 end) as {{ payment_method }}_amount,
        {% endfor -%}
        sum(amount) as total_amount
    from payments
    group by order_id

),

final as (

    select
        orders.order_id,
        orders.customer_id,
        orders.order_date,
        orders.status,
        {% for payment_method in payment_methods -%}
        order_payments.{{ payment_method }}_amount,
        {% endfor -%}
        order_payments.total_amount as amount
    from orders
    left join order_payments on orders.order_id = order_payments.order_id

)

select * from final
""",
    "models/docs.md": """\
{% docs orders_status %}

Where an order is in its life:

| status         | meaning                                                   |
|----------------|-----------------------------------------------------------|
| placed         | ordered, not yet on its way                               |
| shipped        | handed to the carrier                                     |
| completed      | received by the customer                                  |
| return_pending | the customer asked to return it; not back yet             |
| returned       | back with us                                              |

{% enddocs %}
""",
    "models/overview.md": """\
{% docs __overview__ %}

## A small shop's data

Customers, their orders and the payments for them, staged from three seeds and joined into a
`customers` and an `orders` table.

{% enddocs %}
""",
    "models/schema.yml": """\
version: 2

models:
  - name: customers
    description: One row per customer, with what they ordered and paid.
    columns:
      - name: customer_id
        description: The customer's key.
        tests:
          - unique
          - not_null
      - name: first_name
        description: First name.
      - name: last_name
        description: Initial of the last name.
      - name: first_order
        description: Date of the customer's first order.
      - name: most_recent_order
        description: Date of the customer's latest order.
      - name: number_of_orders
        description: How many orders the customer placed.
      - name: customer_lifetime_value
        description: Everything the customer paid, in dollars.

  - name: orders
    description: One row per order, with its payments by method.
    columns:
      - name: order_id
        description: The order's key.
        tests:
          - unique
          - not_null
      - name: customer_id
        description: The customer who ordered.
        tests:
          - not_null
          - relationships:
              to: ref('customers')
              field: customer_id
      - name: order_date
        description: When the order was placed.
      - name: status
        description: '{{ doc("orders_status") }}'
        tests:
          - accepted_values:
              values: ['placed', 'shipped', 'completed', 'return_pending', 'returned']
      - name: amount
        description: The order's total, in dollars.
        tests:
          - not_null
      - name: credit_card_amount
        description: Paid by credit card.
        tests:
          - not_null
      - name: coupon_amount
        description: Paid with coupons.
        tests:
          - not_null
      - name: bank_transfer_amount
        description: Paid by bank transfer.
        tests:
          - not_null
      - name: gift_card_amount
        description: Paid with gift cards.
        tests:
          - not_null
""",
    "models/staging/schema.yml": """\
version: 2

models:
  - name: stg_customers
    columns:
      - name: customer_id
        tests:
          - unique
          - not_null

  - name: stg_orders
    columns:
      - name: order_id
        tests:
          - unique
          - not_null
      - name: status
        tests:
          - accepted_values:
              values: ['placed', 'shipped', 'completed', 'return_pending', 'returned']

  - name: stg_payments
    columns:
      - name: payment_id
        tests:
          - unique
          - not_null
      - name: payment_method
        tests:
          - accepted_values:
              values: ['credit_card', 'coupon', 'bank_transfer', 'gift_card']
""",
}

FIRST_NAMES = ["Ana", "Bruno", "Chloe", "Dmitri", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Keiko",
               "Liam", "Maya", "Nico", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tess", "Uma", "Victor"]


def write_seeds(folder: Path, seed: int = 57) -> None:
    """raw_customers (100), raw_orders (99, dated day by day from 2018-01-01, ~60 customers ordering),
    raw_payments (113: one per order, 14 orders paid a second time with a coupon or a gift card)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "raw_customers.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "first_name", "last_name"])
        for i in range(1, 101):
            w.writerow([i, rng.choice(FIRST_NAMES), chr(65 + rng.randrange(26)) + "."])
    ordering = rng.sample(range(1, 101), 62)
    with open(folder / "raw_orders.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "user_id", "order_date", "status"])
        for i in range(1, 100):
            if i > 93:  # the latest orders are still on their way
                status = rng.choice(["placed", "shipped"])
            else:
                status = rng.choices(ORDER_STATUSES, weights=[2, 3, 85, 4, 6])[0]
            w.writerow([i, rng.choice(ordering), (date(2018, 1, 1) + timedelta(days=i - 1)).isoformat(), status])
    paid_twice = set(rng.sample(range(1, 100), 14))
    with open(folder / "raw_payments.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "order_id", "payment_method", "amount"])
        payment = 0
        for order in range(1, 100):
            methods = [rng.choices(PAYMENT_METHODS, weights=[55, 10, 25, 10])[0]]
            if order in paid_twice:
                methods.append(rng.choice(["coupon", "gift_card"]))
            for method in methods:
                payment += 1
                w.writerow([payment, order, method, rng.randrange(0, 31) * 100])


def write_project(root: Path) -> None:
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    write_seeds(root / "seeds")
