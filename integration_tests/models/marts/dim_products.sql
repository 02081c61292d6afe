-- Contract enforced: column names and types are checked before anything is written.
select
    cast(product_id as int) as product_id,
    sku,
    product_name,
    category,
    cast(price as decimal(10,2)) as price,
    launched_on,
    is_discontinued
from {{ ref('stg_products') }}
