-- Append-only event log. From batch 2 on the feed carries a source_system column: a schema change
-- applied as a metadata commit (on_schema_change='append_new_columns').
{{ config(incremental_strategy='append', on_schema_change='append_new_columns') }}

with placed as (
    select order_id, 'placed' as event_type, ordered_at as event_at, batch
    from {{ ref('orders') }}
    where batch <= {{ var('shop_batch') }}
),

status_changes as (
    select order_id, concat('status:', status) as event_type, updated_at as event_at, batch
    from {{ ref('order_status_updates') }}
    where batch <= {{ var('shop_batch') }}
),

events as (
    select * from placed
    union all
    select * from status_changes
)

select
    order_id,
    event_type,
    event_at,
    batch
    {%- if var('shop_batch') | int >= 2 %},
    'webshop' as source_system
    {%- endif %}
from events
{% if is_incremental() %}
where batch > (select max(batch) from {{ this }})
{% endif %}
