{% materialization incremental, adapter='deltalog', supported_languages=['sql', 'python'] -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = load_relation(this) -%}
  {%- set strategy = config.get('incremental_strategy') or 'merge' -%}
  {% do adapter.validate_incremental(strategy, model) %}
  {%- set sql = deltalog_model_sql(compiled_code) -%}
  {% do validate_delta_config(target_relation) %}

  {{ run_hooks(pre_hooks) }}

  {%- if existing_relation is none or existing_relation.is_view or should_full_refresh() -%}
    {#- a first build, or --full-refresh: an overwrite commit, never a drop -#}
    {% set response = adapter.write_table(target_relation, sql, model) %}
  {%- else -%}
    {#- exactly one commit for the strategy, holding any schema change too -#}
    {% set response = adapter.write_incremental(target_relation, sql, strategy, model) %}
  {%- endif -%}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}
  {% do apply_delta_config(target_relation) %}

  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}

{#- dbt validates strategies against this list (and finds get_incremental_<name>_sql for each) -#}
{% macro deltalog__get_incremental_default_sql(arg_dict) %}
  {{ exceptions.raise_compiler_error('deltalog runs incremental strategies as engine commits, not SQL') }}
{% endmacro %}
