{#- A table refreshed by each `dbt run`: incrementally where the query is a grouped aggregate over one
    table of ours that only gained rows, else recomputed; nothing when no input committed. -#}
{% materialization materialized_view, adapter='deltalog' %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set sql = deltalog_model_sql(compiled_code) -%}
  {% do validate_delta_config(target_relation) %}

  {{ run_hooks(pre_hooks) }}

  {% set response = adapter.refresh_materialized_view(target_relation, sql, model, should_full_refresh()) %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}
  {% do apply_delta_config(target_relation) %}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
