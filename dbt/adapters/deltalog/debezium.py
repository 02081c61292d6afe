"""Debezium's change events as rows, for a streaming table that applies changes (`apply_changes`):

    {{ debezium(stream_kafka(var('bootstrap_servers'), 'pg.public.customers'),
                schema='id bigint, name string, city string') }}

is a subquery over the relation's `value` column (a Kafka topic's, or `stream_files(..., format='text')`'s:
one event a line) with the row's columns (`schema`, Spark DDL) and the event's:

- `_op`: `c` (insert), `u` (update), `d` (delete), `r` (a snapshot read); `t` (truncate) only with
  `truncates=true`;
- `_source_ts_ms`: `source.ts_ms`, when the database made the change (milliseconds; not an order);
- `_lsn`: `source.lsn` (Postgres), the WAL position of the change; NULL for other databases;
- `_binlog_seq`: MySQL's (and MariaDB's) position of the change as one decimal(38,0) that sorts as the
  binlog does: binlog file index (the number after the last `.` in `source.file`) * 10^20 +
  `source.pos` * 10^10 + `source.row` (a binlog position fits 32 bits, and so does a row number of one
  event); NULL for other databases.

The row is `after`, or `before` for a delete. Both JSON shapes are read, with Kafka Connect's schema
wrapper (`{"schema": ..., "payload": {...}}`, JsonConverter's `schemas.enable=true`) and without; a
topic may hold both. Kafka tombstones (a NULL value, which Debezium sends after each delete for log
compaction) and empty lines are dropped, and so are truncate events unless `truncates=true`. A value that
is not JSON, or whose fields do not parse as `schema` says, fails the stream (Spark's FAILFAST mode); a
JSON object without `op` (not a change event) fails it naming the message: nothing is dropped silently.
"""
from __future__ import annotations

from typing import Any, List

from deltalog.sql_text import quote_identifier, sql_literal

#: the columns every event adds after the row's
METADATA = ("_op", "_source_ts_ms", "_lsn", "_binlog_seq")

_SOURCE = "struct<ts_ms: bigint, lsn: bigint, file: string, pos: bigint, `row`: bigint>"


def debezium_sql(relation: str, schema: str, columns: List[str], truncates: bool = False) -> str:
    """The subquery: `relation` (SQL of a relation with a `value` column, binary or string), `schema` the
    row's columns as Spark DDL and `columns` their names, in order."""
    envelope = f"before struct<{schema}>, after struct<{schema}>, op string, source {_SOURCE}"
    json_schema = sql_literal(f"payload struct<{envelope}>, {envelope}")
    row = ", ".join(f"r.{quote_identifier(c)}" for c in columns)
    not_an_event = sql_literal("debezium(): a message that is not a Debezium change event (it has no op): ")
    sequence = ("cast(try_cast(substring_index(e.source.file, '.', -1) as decimal(38, 0)) * 100000000000000000000"
                " + cast(e.source.pos as decimal(38, 0)) * 10000000000 + coalesce(e.source.`row`, 0)"
                " as decimal(38, 0))")
    keep = "" if truncates else "\n    where not (e.op <=> 't')"
    return f"""(
  select {row}, _op, _source_ts_ms, _lsn, _binlog_seq from (
    select if(e.op = 'd', e.before, e.after) as r,
           case when e.op is null then raise_error({not_an_event} || left(v, 300)) else e.op end as _op,
           e.source.ts_ms as _source_ts_ms,
           e.source.lsn as _lsn,
           {sequence} as _binlog_seq
    from (
      select coalesce(j.payload, named_struct('before', j.before, 'after', j.after, 'op', j.op,
                                              'source', j.source)) as e, v
      from (select from_json(v, {json_schema}, map('mode', 'FAILFAST')) as j, v
            from (select cast(value as string) as v from {relation}) as messages) as parsed
      where j is not null
    ) as envelopes{keep}
  ) as changes
)"""


def debezium_relation(spark: Any, relation: Any, schema: Any, truncates: Any = False) -> str:
    """`{{ debezium(relation, schema) }}`: the subquery, checked against the relation (its `value`
    column) and analysed by Spark before the stream starts, so that a bad schema or relation is refused
    by name; a `StreamingConfigError` says what is wrong."""
    from dbt.adapters.deltalog.streaming import StreamingConfigError

    if not isinstance(schema, str) or not schema.strip():
        raise StreamingConfigError(
            f"debezium({relation}): schema is the row's columns as Spark DDL, e.g. schema='id bigint, name "
            f"string'; got {schema!r}.")
    if not isinstance(truncates, bool):
        raise StreamingConfigError(f"debezium({relation}): truncates is true or false, got {truncates!r}.")
    try:
        columns = spark.createDataFrame([], schema.strip()).columns
    except Exception as exc:
        raise StreamingConfigError(f"debezium({relation}): schema {schema!r} is not Spark DDL of the row's columns "
                                   f"('name type, ...'): {str(exc).splitlines()[0]}") from None
    taken = [c for c in columns if c.lower() in METADATA]
    if taken:
        raise StreamingConfigError(f"debezium({relation}): the row's column(s) {', '.join(taken)} have the name(s) "
                                   f"of the event's own columns ({', '.join(METADATA)}); rename them in schema.")
    given = spark.sql(f"select * from {relation}").columns
    if "value" not in [c.lower() for c in given]:
        raise StreamingConfigError(
            f"debezium({relation}): the relation has no `value` column (its columns: {', '.join(given)}); give it "
            f"a Kafka topic, {{{{ stream_kafka(...) }}}}, or files of one event a line, "
            f"{{{{ stream_files(..., format='text') }}}}.")
    sql = debezium_sql(str(relation), schema.strip(), columns, truncates)
    try:  # analysed now: an error names this call, not the model's whole query
        spark.sql(f"select * from {sql}").columns
    except Exception as exc:
        raise StreamingConfigError(f"debezium({relation}, schema={schema!r}): Spark cannot read the events with "
                                   f"this schema: {str(exc).splitlines()[0]}") from None
    return sql
