-- event_time lets microbatch models that ref() this view read only their batch's orders.
{{ config(event_time='ordered_at') }}

with orders as (
    select * from {{ ref('orders') }}
    where batch <= {{ var('shop_batch') }}
),

latest_status as (
    select * from (
        select
            *,
            row_number() over (partition by order_id order by updated_at desc) as recency
        from {{ ref('order_status_updates') }}
        where batch <= {{ var('shop_batch') }}
    ) as ranked
    where recency = 1
)

select
    o.order_id,
    o.customer_id,
    o.ordered_at,
    cast(o.ordered_at as date) as order_date,
    cast(date_trunc('MONTH', o.ordered_at) as date) as order_month,
    coalesce(s.status, o.status) as status,
    o.shipping_cost,
    o.coupon_code,
    o.coupon_code is not null as used_coupon,
    greatest(o.updated_at, coalesce(s.updated_at, o.updated_at)) as updated_at,
    o.batch
from orders as o
left join latest_status as s on o.order_id = s.order_id
