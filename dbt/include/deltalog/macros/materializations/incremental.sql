{% materialization incremental, adapter='deltalog', supported_languages=['sql', 'python'] -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = load_relation(this) -%}
  {%- set strategy = config.get('incremental_strategy') or 'merge' -%}
  {#- a project's own strategy, or its override of a built-in one's SQL (dbt lets it): run as its SQL says -#}
  {%- set custom = not adapter.is_builtin_strategy(strategy) or adapter.overriding_strategy_macro(context, strategy) -%}
  {%- set custom_macro = 'get_incremental_' ~ (strategy | replace('+', '_')) ~ '_sql' -%}
  {% do adapter.validate_incremental(strategy, model, custom and custom_macro in context) %}
  {%- set sql = deltalog_model_sql(compiled_code) -%}
  {% do validate_delta_config(target_relation) %}

  {{ run_hooks(pre_hooks) }}

  {%- if existing_relation is none or existing_relation.is_view or should_full_refresh() -%}
    {#- a first build, or --full-refresh: an overwrite commit, never a drop -#}
    {% set response = adapter.write_table(target_relation, sql, model) %}
  {%- elif custom -%}
    {#- the project's own strategy, as dbt documents it: its SQL's statements on the target, one commit -#}
    {%- set temp_relation = make_temp_relation(target_relation) -%}
    {% do adapter.create_temp_view(temp_relation, sql) %}
    {%- set arg_dict = {'target_relation': target_relation, 'temp_relation': temp_relation,
                        'unique_key': config.get('unique_key'),
                        'dest_columns': adapter.get_columns_in_relation(target_relation),
                        'incremental_predicates': config.get('incremental_predicates')} -%}
    {%- set script = adapter.get_incremental_strategy_macro(context, strategy)(arg_dict) -%}
    {% set response = adapter.run_custom_strategy(target_relation, script, strategy, model) %}
    {% do adapter.drop_relation(temp_relation) %}
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
