select
    p.payment_id,
    p.order_id,
    p.payment_method,
    p.amount,
    p.paid_at,
    cast(p.paid_at as date) as paid_date,
    p.payment_status
from {{ ref('payments') }} as p
-- payments of orders not delivered yet stay out
inner join {{ ref('orders') }} as o
    on p.order_id = o.order_id and o.batch <= {{ var('shop_batch') }}
