{#- A model whose SQL reads a stream ({{ stream_files(...) }}): `dbt run` takes everything new since the
    last run (trigger available_now), each micro-batch one exactly-once commit, then finishes. -#}
{% materialization streaming_table, adapter='deltalog', supported_languages=['sql', 'python'] %}
  {%- set target_relation = this.incorporate(type='table') -%}

  {{ run_hooks(pre_hooks) }}

  {% set response = adapter.write_streaming_table(target_relation, compiled_code, model, should_full_refresh()) %}
  {% do store_result('main', response=response) %}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{% endmaterialization %}


{#- Files landing in a folder (relative to the project, or a URI), as a stream for a streaming_table's
    SQL: format json, csv, parquet, text or orc; `schema` as Spark DDL (needed but for parquet). -#}
{% macro stream_files(path, format='json', schema=none, options={}) -%}
  {%- if execute -%}
    {{- return(adapter.stream_files(path, format, schema, options)) -}}
  {%- else -%}
    {{- return('deltalog_stream_unresolved') -}}
  {%- endif -%}
{%- endmacro %}


{#- A Kafka topic as a stream for a streaming_table's SQL (Spark's Kafka source: key, value, topic, partition,
    offset, timestamp, timestampType), from the earliest offset unless options say otherwise; the source's
    jar goes in the profile's spark.jars.packages. -#}
{% macro stream_kafka(bootstrap_servers, topic, options={}) -%}
  {%- if execute -%}
    {{- return(adapter.stream_kafka(bootstrap_servers, topic, options)) -}}
  {%- else -%}
    {{- return('deltalog_stream_unresolved') -}}
  {%- endif -%}
{%- endmacro %}


{#- Debezium's JSON change events (a Kafka topic's, or text files' `value`) as rows for apply_changes: the
    row's columns (`schema`, Spark DDL; `after`, or `before` for a delete), `_op`, `_source_ts_ms`, `_lsn`
    (Postgres) and `_binlog_seq` (MySQL); tombstones dropped, truncates too unless truncates=true. -#}
{% macro debezium(relation, schema, truncates=false) -%}
  {%- if execute -%}
    {{- return(adapter.debezium(relation, schema, truncates)) -}}
  {%- else -%}
    {{- return('deltalog_stream_unresolved') -}}
  {%- endif -%}
{%- endmacro %}


{#- One of our tables as a stream for a streaming_table's SQL: the table as it is, then the rows each
    later commit adds; with changes=true its change feed (_change_type, _commit_version, _commit_timestamp).
    Options as Delta names them: startingVersion, skipChangeCommits, maxFilesPerTrigger, maxBytesPerTrigger. -#}
{% macro stream(relation, options={}, changes=false) -%}
  {%- if execute -%}
    {{- return(adapter.stream_of(relation, options, changes)) -}}
  {%- else -%}
    {{- return(relation) -}}
  {%- endif -%}
{%- endmacro %}
