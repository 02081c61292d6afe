{% materialization seed, adapter='deltalog' %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set agate_table = load_agate_table() -%}
  {%- do store_result('agate_table', response='OK', agate_table=agate_table) -%}
  {% do validate_delta_config(target_relation) %}

  {{ run_hooks(pre_hooks) }}

  {#- typed columns (inferred, or column_types), one commit: version 0, then overwrites (none when the
      rows, types and config are those of its last load, unless --full-refresh) -#}
  {% set response = adapter.write_seed(target_relation, agate_table, model, full_refresh=should_full_refresh()) %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}
  {% do apply_delta_config(target_relation) %}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
