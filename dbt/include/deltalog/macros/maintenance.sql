{# Delta model configs and table maintenance. Jinja only picks the call; the adapter does the work. #}

{% macro _deltalog_delta_config() %}
  {{ return({
      'tblproperties': config.get('tblproperties'),
      'isolation_level': config.get('isolation_level'),
      'checkpoint_interval': config.get('checkpoint_interval'),
      'zorder_by': config.get('zorder_by'),
      'zorder': config.get('zorder'),
      'cluster_curve': config.get('cluster_curve'),
      'skip_optimize': config.get('skip_optimize'),
      'partition_by': config.get('partition_by'),
      'location_root': config.get('location_root'),
      'persist_docs': config.get('persist_docs'),
      'liquid_clustered_by': config.get('liquid_clustered_by'),
      'cluster_by': config.get('cluster_by'),
      'file_format': config.get('file_format'),
      'clustered_by': config.get('clustered_by'),
      'buckets': config.get('buckets'),
      'grants': config.get('grants'),
  }) }}
{% endmacro %}

{% macro validate_delta_config(relation) %}
  {#- Fails the model before anything is written when zorder_by / isolation_level /
      checkpoint_interval / tblproperties / cluster_curve / skip_optimize hold bad values. -#}
  {%- if execute -%}
    {%- set sql = model.get('compiled_code') if model.get('resource_type') in ('model',) and model.get('language', 'sql') == 'sql' else none -%}
    {%- do adapter.deltalog_validate_config(relation, _deltalog_delta_config(), model.get('name'), sql) -%}
  {%- endif -%}
{% endmacro %}

{% macro apply_delta_config(relation) %}
  {#- After the model's data commit and post-hooks: table properties (one commit, only on a change),
      then OPTIMIZE ZORDER BY when zorder_by is set (off with skip_optimize or var deltalog_skip_optimize). -#}
  {%- if execute -%}
    {%- set done = adapter.deltalog_apply_config(relation, _deltalog_delta_config(), model.get('name'),
                                                 var('deltalog_skip_optimize', false)) -%}
    {%- if done -%}{{ log(relation ~ ': ' ~ done) }}{%- endif -%}
  {%- endif -%}
{% endmacro %}

{% macro optimize(relation, zorder_by=none, where=none, curve=none) %}
  {%- if execute -%}
    {%- set version = adapter.deltalog_optimize(relation, zorder_by, where, curve) -%}
    {{ log(relation ~ ': OPTIMIZE ' ~ ('committed version ' ~ version if version is not none else 'had nothing to do'), info=true) }}
    {{ return(version) }}
  {%- endif -%}
{% endmacro %}

{% macro purge_deletion_vectors(relation) %}
  {%- if execute -%}
    {%- set version = adapter.deltalog_purge_deletion_vectors(relation) -%}
    {{ log(relation ~ ': REORG APPLY (PURGE) ' ~ ('committed version ' ~ version if version is not none else 'found no deleted rows to purge'), info=true) }}
    {{ return(version) }}
  {%- endif -%}
{% endmacro %}

{% macro convert_to_iceberg(relation) %}
  {#- Iceberg metadata for the Delta versions of a table_format: iceberg table that have none yet. -#}
  {%- if execute -%}
    {{ log(relation ~ ': ' ~ adapter.deltalog_convert_to_iceberg(relation), info=true) }}
  {%- endif -%}
{% endmacro %}

{% macro vacuum(relation, retain_hours=none, dry_run=false, force=false) %}
  {%- if execute -%}
    {%- set files = adapter.deltalog_vacuum(relation, retain_hours, dry_run, force) -%}
    {{ log(relation ~ ': VACUUM ' ~ ('would delete ' if dry_run else 'deleted ') ~ files | length ~ ' file(s)', info=true) }}
    {%- for f in files -%}{{ log('  ' ~ f, info=dry_run) }}{%- endfor -%}
    {{ return(files) }}
  {%- endif -%}
{% endmacro %}

{% macro history(relation, limit=none) %}
  {%- if execute -%}
    {%- set rows = adapter.deltalog_history(relation, limit) -%}
    {%- for r in rows -%}
      {{ log(relation ~ ' v' ~ r['version'] ~ ' ' ~ r.get('operation') ~ ' ' ~ tojson(r.get('operationParameters') or {}) ~ ' ' ~ tojson(r.get('operationMetrics') or {}), info=true) }}
    {%- endfor -%}
    {{ return(rows) }}
  {%- endif -%}
{% endmacro %}

{% macro restore(relation, version=none, timestamp=none) %}
  {%- if execute -%}
    {%- set new_version = adapter.deltalog_restore(relation, version, timestamp) -%}
    {{ log(relation ~ ': RESTORE ' ~ ('committed version ' ~ new_version if new_version is not none else 'had nothing to do'), info=true) }}
    {{ return(new_version) }}
  {%- endif -%}
{% endmacro %}

{% macro as_of(relation, version=none, timestamp=none) %}
  {#- The relation's rows as of a version or a timestamp: `select * from {{ as_of(ref('x'), version=3) }}` -#}
  {%- if execute -%}
    {{ return(adapter.deltalog_as_of(relation, version, timestamp)) }}
  {%- else -%}
    {{ return(relation) }}
  {%- endif -%}
{% endmacro %}

{% macro table_changes(relation, start_version, end_version=none) %}
  {#- The change data feed: the rows each commit from start_version to end_version (default the latest,
      both included) inserted, updated or deleted, with _change_type, _commit_version and
      _commit_timestamp: `select * from {{ table_changes(ref('orders'), 12) }}` -#}
  {%- if execute -%}
    {{ return(adapter.deltalog_table_changes(relation, start_version, end_version)) }}
  {%- else -%}
    {{ return(relation) }}
  {%- endif -%}
{% endmacro %}

{% macro table_version(relation) %}
  {#- The relation's latest Delta version (none when it is not a table yet). -#}
  {%- if execute -%}
    {{ return(adapter.deltalog_table_version(relation)) }}
  {%- endif -%}
{% endmacro %}

{% macro changes_since_last_run(relation) %}
  {#- In an incremental model: the changes to `relation` (a Delta table with change_data_feed) since the
      version this model last consumed, recorded with its output in one commit (exactly once, across
      crashes and reruns). A first build or --full-refresh reads every row as an insert:
      `select * from {{ changes_since_last_run(ref('orders')) }} where _change_type != 'update_preimage'` -#}
  {%- if execute -%}
    {{ return(adapter.deltalog_changes_since_last_run(relation, this, is_incremental())) }}
  {%- else -%}
    {{ return(relation) }}
  {%- endif -%}
{% endmacro %}
