{% materialization snapshot, adapter='deltalog' %}
  {%- set target_table = model.get('alias', model.get('name')) -%}
  {%- set strategy_name = config.get('strategy') -%}

  {% set target_relation_exists, target_relation = get_or_create_relation(
          database=none, schema=model.schema, identifier=target_table, type='table') -%}
  {%- if not target_relation.is_table -%}
    {% do exceptions.relation_wrong_type(target_relation, 'table') %}
  {%- endif -%}
  {% do validate_delta_config(target_relation) %}

  {{ run_hooks(pre_hooks) }}

  {% set strategy_macro = strategy_dispatch(strategy_name) %}
  {% set strategy = strategy_macro(model, "snapshotted_data", "source_data", model['config'], target_relation_exists) %}

  {% if not target_relation_exists %}
      {% set build_sql = build_snapshot_table(strategy, model['compiled_code']) %}
      {% set response = adapter.write_table(target_relation, build_sql, model) %}
  {% else %}
      {% set columns = config.get("snapshot_table_column_names") or get_snapshot_table_column_names() %}
      {{ adapter.valid_snapshot_target(target_relation, columns) }}

      {#- dbt's own staging query (changes, deletes per hard_deletes) as a temporary view -#}
      {%- set staging_relation = api.Relation.create(
              identifier=target_relation.identifier ~ adapter.temp_view_suffix(), schema=none, type='view') -%}
      {% do adapter.create_temp_view(staging_relation, snapshot_staging_table(strategy, sql, target_relation)) %}

      {% set missing_columns = adapter.get_missing_columns(staging_relation, target_relation)
                                   | rejectattr('name', 'equalto', 'dbt_change_type')
                                   | rejectattr('name', 'equalto', 'DBT_CHANGE_TYPE')
                                   | rejectattr('name', 'equalto', 'dbt_unique_key')
                                   | rejectattr('name', 'equalto', 'DBT_UNIQUE_KEY')
                                   | list %}
      {#- new columns are committed with the merge: a failed snapshot changes nothing -#}
      {% set response = adapter.snapshot_merge(target_relation, staging_relation, columns, model, missing_columns) %}
      {% do adapter.drop_relation(staging_relation) %}
  {% endif %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}
  {% do apply_delta_config(target_relation) %}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
