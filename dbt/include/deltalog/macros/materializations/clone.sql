{#- dbt clone: the deferred (state) relation's Delta table as a shallow clone, one commit
    (adapter.clone_table); a deferred view, or no table there, becomes a view as in dbt's default. -#}
{%- materialization clone, adapter='deltalog' -%}
  {%- if not defer_relation -%}
    {{ log("No relation found in state manifest for " ~ model.unique_id, info=True) }}
    {{ return({'relations': []}) }}
  {%- endif -%}

  {%- set existing_relation = load_cached_relation(this) -%}
  {%- if existing_relation and not flags.FULL_REFRESH -%}
    {{ log("Relation " ~ existing_relation ~ " already exists", info=True) }}
    {{ return({'relations': []}) }}
  {%- endif -%}

  {%- set other_existing_relation = load_cached_relation(defer_relation) -%}
  {%- if other_existing_relation and other_existing_relation.type == 'table' -%}
    {%- set target_relation = this.incorporate(type='table') -%}
    {%- if target_relation.schema == defer_relation.schema and target_relation.identifier == defer_relation.identifier -%}
      {{ log("Target relation and defer relation are the same, skipping clone for relation: " ~ target_relation.render()) }}
    {%- else -%}
      {% set response = adapter.clone_table(target_relation, defer_relation) %}
      {% do store_result('main', response=response) %}
    {%- endif -%}
    {{ return({'relations': [target_relation]}) }}
  {%- else -%}
    {{ return(materialization_view_deltalog()) }}
  {%- endif -%}
{%- endmaterialization -%}
