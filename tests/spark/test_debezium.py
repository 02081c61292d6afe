"""`{{ debezium(...) }}` (dbt/adapters/deltalog/debezium.py) on real Spark, over a batch of messages as a
Kafka topic's `value` holds them: both JSON shapes (with Kafka Connect's schema wrapper and without),
the row from `after` or, for a delete, `before`; Postgres' LSN and MySQL's binlog position as sequences
that sort as the database's log; tombstones and truncates dropped (truncates kept on request); a message
that is not a change event fails the query by name; a bad schema or relation is refused before anything runs."""
from __future__ import annotations

import json

import pytest

from dbt.adapters.deltalog.debezium import debezium_relation
from dbt.adapters.deltalog.streaming import StreamingConfigError

pytestmark = pytest.mark.spark

SCHEMA = "id bigint, name string, city string"


def event(op, before=None, after=None, wrapped=False, **source):
    payload = {"before": before, "after": after, "op": op, "ts_ms": 1700000000999,
               "source": {"version": "3.1.0.Final", "ts_ms": 1700000000000, "db": "shop", **source},
               "transaction": None}
    if wrapped:  # JsonConverter with schemas.enable=true: the value's Connect schema beside it
        return json.dumps({"schema": {"type": "struct", "name": "pg.public.customers.Envelope", "fields": []},
                           "payload": payload})
    return json.dumps(payload)


def row(id, name, city):
    return {"id": id, "name": name, "city": city}


def _view(spark, name, values):
    spark.createDataFrame([(v.encode() if v is not None else None,) for v in values],
                          "value binary").createOrReplaceTempView(name)
    return name


def _rows(spark, sql):
    return [r.asDict() for r in spark.sql(f"select * from {sql}").collect()]


def test_both_shapes_a_delete_from_before_and_postgres_lsn(spark):
    view = _view(spark, "dbz_pg", [
        event("r", after=row(1, "Ann", "Oslo"), lsn=100),
        event("c", after=row(2, "Bo", "Rome"), wrapped=True, lsn=120),
        event("u", before=row(2, "Bo", "Rome"), after=row(2, "Bo", "Nice"), lsn=130),
        event("d", before=row(1, None, None), wrapped=True, lsn=140),
        None,  # the tombstone after the delete
        "",
        event("t", lsn=150),  # a truncate: dropped by default
    ])
    sql = debezium_relation(spark, view, SCHEMA)
    assert spark.sql(f"select * from {sql}").columns == ["id", "name", "city", *("_op", "_source_ts_ms", "_lsn",
                                                                                 "_binlog_seq")]
    assert [(r["id"], r["name"], r["city"], r["_op"], r["_lsn"], r["_source_ts_ms"], r["_binlog_seq"])
            for r in _rows(spark, sql)] == [
        (1, "Ann", "Oslo", "r", 100, 1700000000000, None), (2, "Bo", "Rome", "c", 120, 1700000000000, None),
        (2, "Bo", "Nice", "u", 130, 1700000000000, None), (1, None, None, "d", 140, 1700000000000, None)]
    kept = _rows(spark, debezium_relation(spark, view, SCHEMA, truncates=True))
    assert [(r["id"], r["_op"], r["_lsn"]) for r in kept][-1] == (None, "t", 150)


def test_mysql_binlog_position_sorts_as_the_binlog(spark):
    positions = [("mysql-bin.000009", 4, 0), ("mysql-bin.000010", 4, 0), ("mysql-bin.000010", 120, 0),
                 ("mysql-bin.000010", 120, 1), ("mysql-bin.000010", 4294967000, 3), ("mysql-bin.1000000", 4, 0)]
    view = _view(spark, "dbz_mysql", [event("u", after=row(i, "n", "c"), file=f, pos=p, row=r, server_id=1)
                                      for i, (f, p, r) in enumerate(reversed(positions))])
    rows = _rows(spark, debezium_relation(spark, view, SCHEMA))
    assert all(r["_lsn"] is None for r in rows)
    by_sequence = sorted(rows, key=lambda r: r["_binlog_seq"])
    assert [positions[len(positions) - 1 - r["id"]] for r in by_sequence] == positions
    assert int(by_sequence[3]["_binlog_seq"]) == 10 * 10**20 + 120 * 10**10 + 1
    assert spark.sql(f"select * from {debezium_relation(spark, view, SCHEMA)}").schema["_binlog_seq"] \
        .dataType.simpleString() == "decimal(38,0)"


def test_a_message_that_is_not_a_change_event_fails_by_name(spark):
    for name, value, expected in [("dbz_no_op", json.dumps({"id": 1}), "not a Debezium change event"),
                                  ("dbz_not_json", "id=1", "MALFORMED_RECORD"),
                                  ("dbz_bad_type", event("c", after={"id": "one"}, lsn=1), "MALFORMED_RECORD")]:
        sql = debezium_relation(spark, _view(spark, name, [value]), SCHEMA)
        with pytest.raises(Exception, match=expected):
            spark.sql(f"select * from {sql}").collect()


def test_a_bad_schema_or_relation_is_refused_before_anything_runs(spark):
    view = _view(spark, "dbz_refused", [event("c", after=row(1, "a", "b"), lsn=1)])
    spark.createDataFrame([(1,)], "id bigint").createOrReplaceTempView("dbz_no_value")
    for relation, schema, expected in [
            (view, "", "schema is the row's columns"), (view, "id bigint,,", "is not Spark DDL"),
            (view, "id bigint, _op string", "_op have the name"),
            ("dbz_no_value", SCHEMA, r"no `value` column \(its columns: id\)")]:
        with pytest.raises(StreamingConfigError, match=expected):
            debezium_relation(spark, relation, schema)


def test_a_truncate_kept_applies_as_a_truncate(spark, tmp_path):
    from deltalake import DeltaTable as RsTable, QueryBuilder
    import pyarrow as pa

    from deltalog.spark.apply_changes import ApplyChanges, change_applier

    view = _view(spark, "dbz_truncate", [event("c", after=row(1, "Ann", "Oslo"), lsn=100),
                                         event("t", lsn=200), event("c", after=row(2, "Bo", "Rome"), lsn=300)])
    changes = spark.sql(f"select * from {debezium_relation(spark, view, SCHEMA, truncates=True)}")
    spec = ApplyChanges.of({"keys": ["id"], "sequence_by": "_lsn", "apply_as_deletes": "_op = 'd'",
                            "apply_as_truncates": "_op = 't'",
                            "except_column_list": ["_op", "_source_ts_ms", "_lsn", "_binlog_seq"]}, "t")
    uri = str(tmp_path / "t")
    change_applier(uri, spec, "app", changes.columns)(changes, 0)
    read = QueryBuilder().register("t", RsTable(uri)).execute("select * from t").read_all()
    assert pa.table(read).to_pylist() == [row(2, "Bo", "Rome")]
