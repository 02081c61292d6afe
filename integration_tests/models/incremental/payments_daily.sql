-- Incremental runs replace exactly the rows of the recent window (replace_where).
{% set window_start = "paid_date >= date'" ~ var('payments_window_start') ~ "'" %}
{{ config(incremental_strategy='replace_where', incremental_predicates=[window_start]) }}

select
    paid_date,
    payment_method,
    count(*) as payments,
    cast(sum(amount) as decimal(14,2)) as amount
from {{ ref('stg_payments') }}
where paid_date is not null
{% if is_incremental() %}
    and {{ window_start }}
{% endif %}
group by paid_date, payment_method
