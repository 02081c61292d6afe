select
    product_id,
    sku,
    trim(product_name) as product_name,
    category,
    price,
    launched_on,
    is_discontinued
from {{ ref('products') }}
