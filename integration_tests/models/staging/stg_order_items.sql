select
    order_item_id,
    order_id,
    product_id,
    quantity,
    unit_price,
    discount_pct,
    {{ line_amount('quantity', 'unit_price', 'discount_pct') }} as line_amount
from {{ ref('order_items') }}
