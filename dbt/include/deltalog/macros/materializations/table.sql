{% materialization table, adapter='deltalog', supported_languages=['sql', 'python'] %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set sql = deltalog_model_sql(compiled_code) -%}
  {% do validate_delta_config(target_relation) %}

  {{ run_hooks(pre_hooks) }}

  {#- first build: version 0; a rebuild: one overwrite commit (history kept, schema may change) -#}
  {% set response = adapter.write_table(target_relation, sql, model) %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}
  {% do apply_delta_config(target_relation) %}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
