{% macro line_amount(quantity, unit_price, discount_pct) -%}
    cast(round({{ quantity }} * {{ unit_price }} * (1 - coalesce({{ discount_pct }}, 0) / 100), 2) as decimal(12,2))
{%- endmacro %}

{% macro full_name(first_name, last_name) -%}
    concat_ws(' ', {{ first_name }}, {{ last_name }})
{%- endmacro %}
