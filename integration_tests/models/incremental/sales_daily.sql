-- Daily sales, partitioned by month; an incremental run rebuilds only the months that changed.
{{ config(incremental_strategy='insert_overwrite', partition_by=['order_month']) }}

select
    order_date,
    count(*) as orders,
    cast(sum(case when status <> 'cancelled' then order_total else 0 end) as decimal(14,2)) as revenue,
    max(updated_at) as last_updated_at,
    order_month
from {{ ref('fct_orders') }}
{% if is_incremental() %}
where order_month in (
    select distinct order_month from {{ ref('fct_orders') }}
    where updated_at > (select max(last_updated_at) from {{ this }})
)
{% endif %}
group by order_date, order_month
