{#- The catalog is the warehouse folder; these route dbt's relation macros to the adapter. -#}

{% macro deltalog__create_schema(relation) -%}
  {% do adapter.create_schema(relation) %}
{%- endmacro %}

{% macro deltalog__drop_schema(relation) -%}
  {% do adapter.drop_schema(relation) %}
{%- endmacro %}

{% macro deltalog__drop_relation(relation) -%}
  {% do adapter.drop_relation(relation) %}
{%- endmacro %}

{#- Column objects (with .name, .data_type), not dbt-spark's raw `describe extended` rows: dbt's own
    macros (snapshots' hard_deletes: new_record among them) read their names. -#}
{% macro deltalog__get_columns_in_relation(relation) -%}
  {% do return(adapter.get_columns_in_relation(relation)) %}
{%- endmacro %}

{% macro deltalog__truncate_relation(relation) -%}
  {% do adapter.truncate_relation(relation) %}
{%- endmacro %}

{% macro deltalog__rename_relation(from_relation, to_relation) -%}
  {% do adapter.rename_relation(from_relation, to_relation) %}
{%- endmacro %}

{% macro deltalog__generate_database_name(custom_database_name=none, node=none) -%}
  {#- a model's `database` names a catalog the profile attaches (`catalogs:`); none is the profile's warehouse -#}
  {% do return(custom_database_name | trim if custom_database_name else none) %}
{%- endmacro %}

{% macro deltalog__make_temp_relation(base_relation, suffix) %}
  {#- unique per invocation and thread: parallel models never collide -#}
  {% set tmp_identifier = base_relation.identifier ~ adapter.temp_view_suffix() %}
  {% do return(base_relation.incorporate(path={"identifier": tmp_identifier, "schema": none, "database": none}, type='view')) %}
{% endmacro %}

{% macro deltalog__create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {%- if temporary -%}
    create or replace temporary view {{ relation }} as
      {{ compiled_code }}
  {%- else -%}
    {#- a real table is always one engine commit, never SQL DDL -#}
    {% do adapter.write_table(relation, compiled_code, model) %}
  {%- endif -%}
{%- endmacro %}

{% macro deltalog__create_view_as(relation, sql) -%}
  {%- if relation.schema -%}
    {#- a dbt view: kept in the warehouse now; the returned statement is empty -#}
    {% do adapter.create_view(relation, sql) %}
  {%- else -%}
    create or replace temporary view {{ relation }} as
      {{ sql }}
  {%- endif -%}
{%- endmacro %}

{#- Constraints (not_null, check) and persist_docs are part of the table definition that the model's
    own commit carries (adapter.write_table / write_incremental): no separate DDL runs for them. -#}
{% macro deltalog__persist_constraints(relation, model) %}
{% endmacro %}

{% macro deltalog__alter_column_comment(relation, column_dict) %}
{% endmacro %}

{% macro deltalog__persist_docs(relation, model, for_relation, for_columns) %}
{% endmacro %}

{% macro deltalog__create_columns(relation, columns) %}
  {% do adapter.add_columns(relation, columns, model) %}
{% endmacro %}

{% macro deltalog__alter_relation_add_remove_columns(relation, add_columns, remove_columns) %}
  {% if remove_columns %}
    {{ exceptions.raise_compiler_error('Removing columns is done by on_schema_change: sync_all_columns on an incremental model') }}
  {% endif %}
  {% do adapter.add_columns(relation, add_columns or [], model) %}
{% endmacro %}

{% macro deltalog__alter_column_type(relation, column_name, new_column_type) -%}
  {{ exceptions.raise_compiler_error('Changing the type of ' ~ column_name ~ ' in ' ~ relation ~ ' rewrites the table: use --full-refresh') }}
{%- endmacro %}

{% macro deltalog__get_empty_subquery_sql(select_sql, select_sql_header=none) %}
  {%- if select_sql_header is not none -%}
  {{ select_sql_header }}
  {%- endif -%}
  select * from (
    {{ select_sql }}
  ) as __dbt_sbq
  where false
  limit 0
{% endmacro %}

{#- The model's SQL as written by the user, checked against its enforced contract: column names
    and types must match before anything is committed. -#}
{% macro deltalog_model_sql(compiled_code) %}
  {%- if model.get('language') == 'python' -%}
    {#- the Python model's code runs in adapter.write_table / write_incremental -#}
    {%- do return(compiled_code) -%}
  {%- endif -%}
  {%- set contract_config = config.get('contract') -%}
  {%- if contract_config and contract_config.enforced -%}
    {#- columns filled in for the model (identity, generated, default) may be left out of its SQL -#}
    {%- set declared = adapter.declared_contract_sql(compiled_code, model) -%}
    {%- if declared is not none -%}
      {%- do get_assert_columns_equivalent(declared['check_sql']) -%}
      {%- do return(declared['select_sql']) -%}
    {%- endif -%}
    {%- do get_assert_columns_equivalent(compiled_code) -%}
    {%- do return(get_select_subquery(compiled_code)) -%}
  {%- endif -%}
  {%- do return(compiled_code) -%}
{% endmacro %}


{#- dbt's contract check casts NULL to each contract column's type: a declared column's plain type
    (`bigint`, not `bigint generated always as identity`) -#}
{% macro deltalog__get_empty_schema_sql(columns) %}
  {{ return(default__get_empty_schema_sql(adapter.plain_contract_columns(columns, model))) }}
{% endmacro %}
