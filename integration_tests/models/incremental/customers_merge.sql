-- Merge on one key, every column updated except the load bookkeeping.
{{ config(
    incremental_strategy='merge',
    unique_key='customer_id',
    merge_exclude_columns=['loaded_in_batch', 'first_loaded_at']
) }}

select
    customer_id,
    full_name,
    email,
    country,
    is_vip,
    updated_at,
    {{ var('shop_batch') }} as loaded_in_batch,
    current_timestamp() as first_loaded_at
from {{ ref('stg_customers') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
