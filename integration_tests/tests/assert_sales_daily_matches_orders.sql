-- The incrementally maintained daily sales add up to the orders fact, month by month.
with from_sales as (
    select order_month, sum(orders) as orders, sum(revenue) as revenue
    from {{ ref('sales_daily') }}
    group by order_month
),

from_orders as (
    select
        order_month,
        count(*) as orders,
        sum(case when status <> 'cancelled' then order_total else 0 end) as revenue
    from {{ ref('fct_orders') }}
    group by order_month
)

select *
from from_orders as o
full outer join from_sales as s on o.order_month = s.order_month
where s.order_month is null or o.order_month is null or o.orders <> s.orders or o.revenue <> s.revenue
