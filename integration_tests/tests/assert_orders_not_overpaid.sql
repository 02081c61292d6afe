-- Payments never exceed what an order costs.
select order_id, order_total, paid_amount
from {{ ref('fct_orders') }}
where paid_amount > order_total
