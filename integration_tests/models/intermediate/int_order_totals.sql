-- Ephemeral: inlined as a CTE into every model that refs it.
select
    order_id,
    count(*) as item_count,
    cast(sum(quantity) as int) as units,
    cast(sum(line_amount) as decimal(12,2)) as items_amount
from {{ ref('stg_order_items') }}
group by order_id
