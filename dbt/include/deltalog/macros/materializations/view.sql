{% materialization view, adapter='deltalog' %}
  {%- set target_relation = this.incorporate(type='view') -%}
  {%- set sql = deltalog_model_sql(compiled_code) -%}

  {{ run_hooks(pre_hooks) }}

  {#- SQL kept at <warehouse>/<schema>/<name>.view.sql; a session view runs it -#}
  {% set response = adapter.create_view(target_relation, sql, model) %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
