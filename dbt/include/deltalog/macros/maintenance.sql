{# Delta model configs and table maintenance. Filled in by the maintenance work. #}

{% macro validate_delta_config(relation) %}
  {#- Fails the model before anything is written when zorder_by / isolation_level /
      checkpoint_interval / tblproperties hold bad values. -#}
{% endmacro %}

{% macro apply_delta_config(relation) %}
  {#- Post-hook work after the model's data commit: table properties, then OPTIMIZE ZORDER BY. -#}
{% endmacro %}
