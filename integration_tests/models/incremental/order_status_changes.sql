-- Exactly-once consumption of another model's changes: each run appends the orders_merge rows
-- inserted or updated since the version this table last consumed. That version is recorded in the
-- same commit as the rows (a Delta `txn`), so a run that fails or is killed before committing is
-- read again by the next one, and a committed one never is. The first build reads every row.
{{ config(incremental_strategy='append') }}

select
    order_id,
    status,
    _change_type as change_type,
    _commit_version as orders_version
from {{ changes_since_last_run(ref('orders_merge')) }}
where _change_type in ('insert', 'update_postimage')
