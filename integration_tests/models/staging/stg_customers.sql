-- Customers as of the current delivery, with the latest change from customer_updates applied.
with customers as (
    select * from {{ ref('customers') }}
    where batch <= {{ var('shop_batch') }}
),

latest_update as (
    select * from (
        select
            *,
            row_number() over (partition by customer_id order by updated_at desc) as recency
        from {{ ref('customer_updates') }}
        where batch <= {{ var('shop_batch') }}
    ) as ranked
    where recency = 1
)

select
    c.customer_id,
    c.first_name,
    c.last_name,
    {{ full_name('c.first_name', 'c.last_name') }} as full_name,
    case when u.customer_id is null then c.email else u.email end as email,
    case when u.customer_id is null then c.country else u.country end as country,
    c.signup_date,
    coalesce(u.is_vip, c.is_vip) as is_vip,
    coalesce(u.updated_at, c.updated_at) as updated_at
from customers as c
left join latest_update as u on c.customer_id = u.customer_id
