{% materialization snapshot, adapter='deltalog' %}
  {%- set target_table = model.get('alias', model.get('name')) -%}
  {%- set strategy_name = config.get('strategy') -%}

  {% set target_relation_exists, target_relation = get_or_create_relation(
          database=model.get('database'), schema=model.schema, identifier=target_table, type='table') -%}
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

      {#- the staging query's own columns never enter the table (dbt_unique_key_N for a composite key) -#}
      {% set staging_only = ['dbt_change_type', 'dbt_unique_key'] %}
      {% if strategy.unique_key is not string and strategy.unique_key is iterable %}
        {% for key in strategy.unique_key %}{% do staging_only.append('dbt_unique_key_' ~ loop.index) %}{% endfor %}
      {% endif %}
      {% set missing_columns = [] %}
      {% for column in adapter.get_missing_columns(staging_relation, target_relation) %}
        {% if column.name | lower not in staging_only %}{% do missing_columns.append(column) %}{% endif %}
      {% endfor %}
      {#- new columns are committed with the merge: a failed snapshot changes nothing -#}
      {% set response = adapter.snapshot_merge(target_relation, staging_relation, columns, model, missing_columns) %}
      {% do adapter.drop_relation(staging_relation) %}
  {% endif %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}
  {% do apply_delta_config(target_relation) %}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}
