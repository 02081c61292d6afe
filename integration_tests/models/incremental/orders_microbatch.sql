-- One batch per month of ordered_at; dbt filters stg_orders (event_time) to each batch's window.
{{ config(
    incremental_strategy='microbatch',
    event_time='ordered_at',
    begin='2026-01-01',
    batch_size='month',
    lookback=1
) }}

select
    o.order_id,
    o.customer_id,
    o.ordered_at,
    o.shipping_cost,
    t.item_count,
    t.items_amount
from {{ ref('stg_orders') }} as o
inner join {{ ref('int_order_totals') }} as t on o.order_id = t.order_id
