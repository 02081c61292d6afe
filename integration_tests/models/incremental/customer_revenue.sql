-- Delete the rows of customers with new order activity, insert their recomputed totals.
{{ config(incremental_strategy='delete+insert', unique_key='customer_id') }}

select
    customer_id,
    count(*) as orders,
    cast(sum(order_total) as decimal(14,2)) as revenue,
    max(updated_at) as last_order_update
from {{ ref('fct_orders') }}
{% if is_incremental() %}
where customer_id in (
    select customer_id from {{ ref('fct_orders') }}
    where updated_at > (select max(last_order_update) from {{ this }})
)
{% endif %}
group by customer_id
