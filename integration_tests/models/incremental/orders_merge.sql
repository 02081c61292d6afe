-- Merge on a composite key; only status, money and updated_at change on a match, so loaded_in_batch
-- keeps the batch that first inserted the row. The predicate lets the merge skip older files.
-- change_data_feed records the rows each merge changes (order_status_changes reads them).
{{ config(
    incremental_strategy='merge',
    unique_key=['order_id', 'customer_id'],
    merge_update_columns=['status', 'paid_amount', 'last_paid_at', 'updated_at'],
    incremental_predicates=["DBT_INTERNAL_DEST.order_date >= date'2026-01-01'"],
    change_data_feed=true
) }}

select
    order_id,
    customer_id,
    order_date,
    status,
    order_total,
    paid_amount,
    last_paid_at,
    updated_at,
    {{ var('shop_batch') }} as loaded_in_batch
from {{ ref('fct_orders') }}
{% if is_incremental() %}
where updated_at > (select max(updated_at) from {{ this }})
{% endif %}
