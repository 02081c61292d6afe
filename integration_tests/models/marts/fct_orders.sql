-- One row per order, partitioned by month: <table>/order_month=2026-01-01/...
{{ config(partition_by=['order_month']) }}

select
    o.order_id,
    o.customer_id,
    o.ordered_at,
    o.order_date,
    o.status,
    o.coupon_code,
    t.item_count,
    t.units,
    t.items_amount,
    o.shipping_cost,
    cast(t.items_amount + o.shipping_cost as decimal(12,2)) as order_total,
    coalesce(p.paid_amount, cast(0 as decimal(12,2))) as paid_amount,
    p.last_paid_at,
    o.updated_at,
    o.order_month
from {{ ref('stg_orders') }} as o
inner join {{ ref('int_order_totals') }} as t on o.order_id = t.order_id
left join {{ ref('int_order_payments') }} as p on o.order_id = p.order_id
