-- Every order has exactly one current version in the snapshot.
select order_id, count(*) as current_rows
from {{ ref('orders_snapshot') }}
where dbt_valid_to is null
group by order_id
having count(*) <> 1
