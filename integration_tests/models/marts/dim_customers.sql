-- Clustered for lookups by country and signup date; Serializable isolation; a checkpoint every 3 commits.
{{ config(
    zorder_by=['country', 'signup_date'],
    isolation_level='Serializable',
    checkpoint_interval=3,
    tblproperties={'delta.logRetentionDuration': 'interval 60 days', 'shop.owner': 'analytics'}
) }}

with order_stats as (
    select
        customer_id,
        count(*) as order_count,
        min(order_date) as first_order_date,
        max(order_date) as last_order_date,
        cast(sum(case when status in ('completed', 'shipped') then order_total else 0 end) as decimal(14,2))
            as lifetime_value
    from {{ ref('fct_orders') }}
    group by customer_id
)

select
    c.customer_id,
    c.full_name,
    c.email,
    c.country,
    c.signup_date,
    c.is_vip,
    coalesce(s.order_count, 0) as order_count,
    s.first_order_date,
    s.last_order_date,
    coalesce(s.lifetime_value, cast(0 as decimal(14,2))) as lifetime_value
from {{ ref('stg_customers') }} as c
left join order_stats as s on c.customer_id = s.customer_id
