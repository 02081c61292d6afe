"""Debezium change events from a real Kafka broker (tests/support/kafka_broker.py) applied by key through
dbt: `{{ debezium(stream_kafka(...), schema=...) }}` into streaming tables with `apply_changes`, one topic
as Debezium's Postgres connector writes it (sequence `_lsn`) and one as its MySQL connector does
(sequence `_binlog_seq`: binlog file, position, row). The topics mix both JSON shapes (with Kafka
Connect's schema wrapper and without) and hold snapshot reads, inserts, updates, deletes each followed by
its tombstone, a truncate (dropped), a pair of updates out of order, late changes older than what the
table holds, and a re-insert after a delete. Two `dbt run`s with more messages between them; a run in
between with nothing new commits nothing. delta-rs and delta-spark (in this pyspark 4.2 environment, see
conftest.py) read the tables, which have deletion vectors."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, QueryBuilder

from deltalog.snapshot import Snapshot
from tests.support.kafka_broker import kafka_broker

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

PG_TOPIC, MYSQL_TOPIC = "pg.public.customers", "mysql.shop.customers"
SCHEMA = "id bigint, name string, city string"
EVENT_COLUMNS = "['_op', '_source_ts_ms', '_lsn', '_binlog_seq']"

MODEL = """
{{ config(materialized='streaming_table',
          apply_changes={'keys': ['id'], 'sequence_by': '%s', 'apply_as_deletes': "_op = 'd'",
                         'except_column_list': %s}) }}
select * from {{ debezium(stream_kafka(var('bootstrap_servers'), '%s', {'maxOffsetsPerTrigger': 4}),
                          schema='%s') }}
"""
PG_MODEL = MODEL % ("_lsn", EVENT_COLUMNS, PG_TOPIC, SCHEMA)
MYSQL_MODEL = MODEL % ("_binlog_seq", EVENT_COLUMNS, MYSQL_TOPIC, SCHEMA)


def _row(id: int, name: str | None = None, city: str | None = None) -> dict:
    return {"id": id, "name": name, "city": city}


def _message(op: str, id: int, before: dict | None, after: dict | None, source: dict, wrapped: bool) -> tuple:
    """(key, value) as Debezium's JsonConverter writes them; `wrapped`: with `schemas.enable=true`, the
    Connect schema beside the payload in both key and value."""
    key = {"id": id}
    payload = {"before": before, "after": after, "op": op, "ts_ms": 1700000000500,
               "source": {"version": "3.1.0.Final", "name": "shop", "ts_ms": 1700000000000, **source},
               "transaction": None}
    if wrapped:
        key = {"schema": {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "id"}],
                          "optional": False, "name": "shop.customers.Key"}, "payload": key}
        payload = {"schema": {"type": "struct", "fields": [], "optional": False, "name": "shop.customers.Envelope"},
                   "payload": payload}
    return json.dumps(key), json.dumps(payload)


def pg(op: str, id: int, lsn: int, name: str | None = None, city: str | None = None,
       wrapped: bool = False) -> list[tuple]:
    """A Postgres change event (REPLICA IDENTITY DEFAULT: a delete's `before` has the key only); a delete
    is followed by its tombstone, as Debezium sends it."""
    source = {"connector": "postgresql", "db": "shop", "schema": "public", "table": "customers", "lsn": lsn,
              "txId": lsn // 10, "snapshot": "true" if op == "r" else "false"}
    before = _row(id) if op == "d" else None
    after = None if op == "d" else _row(id, name, city)
    messages = [_message(op, id, before, after, source, wrapped)]
    return messages + [(json.dumps({"id": id}), None)] if op == "d" else messages


def mysql(op: str, id: int, at: tuple[int, int, int], name: str | None = None, city: str | None = None,
          wrapped: bool = False) -> list[tuple]:
    """A MySQL change event at binlog (file index, position, row in the event); deletes as `pg`'s."""
    file, pos, row = at
    source = {"connector": "mysql", "db": "shop", "table": "customers", "server_id": 1, "file": f"mysql-bin.{file:06d}",
              "pos": pos, "row": row, "gtid": None, "thread": 7, "snapshot": "false"}
    before = _row(id, "x", "x") if op == "d" else None  # binlog_row_image=full: the whole row
    after = None if op == "d" else _row(id, name, city)
    messages = [_message(op, id, before, after, source, wrapped)]
    return messages + [(json.dumps({"id": id}), None)] if op == "d" else messages


def _truncate(lsn: int) -> tuple:
    return (None, json.dumps({"before": None, "after": None, "op": "t", "ts_ms": 1700000000500,
                              "source": {"connector": "postgresql", "ts_ms": 1700000000000, "lsn": lsn}}))


def _rows(table: Path) -> list[dict]:
    read = pa.table(QueryBuilder().register("t", DeltaTable(str(table))).execute("select * from t").read_all())
    return sorted(read.to_pylist(), key=lambda r: r["id"])


def _versions(*tables: Path) -> list[tuple[int, int]]:
    """Each table's version and its apply_changes state table's (`_apply_changes/` inside it)."""
    return [(Snapshot.load(str(t)).version, Snapshot.load(str(t / "_apply_changes")).version) for t in tables]


@pytest.fixture(scope="module")
def broker():
    with kafka_broker() as server:
        yield server


class TestDebeziumFromKafka:
    @pytest.fixture(scope="class")
    def models(self):
        return {"customers_pg.sql": PG_MODEL, "customers_mysql.sql": MYSQL_MODEL}

    def test_changes_apply_by_key_run_after_run(self, spark, broker, project, deltalog_warehouse):
        folder = Path(deltalog_warehouse) / project.test_schema
        pg_table, mysql_table = folder / "customers_pg", folder / "customers_mysql"
        variables = ["--vars", json.dumps({"bootstrap_servers": broker.bootstrap_servers})]

        broker.produce(PG_TOPIC, [
            *pg("r", 1, 100, "Ann", "Oslo", wrapped=True), *pg("r", 2, 100, "Bo", "Rome"),  # the snapshot
            *pg("c", 3, 200, "Cy", "Lima", wrapped=True),
            *pg("u", 2, 300, "Bo", "Nice"),
            *pg("d", 3, 400, wrapped=True),  # + its tombstone
            _truncate(450),  # dropped: were it applied, the rows above would go
            *pg("u", 1, 600, "Ann", "Bern"), *pg("u", 1, 500, "Ann", "Paris", wrapped=True),  # out of order
        ])
        broker.produce(MYSQL_TOPIC, [
            *mysql("c", 1, (1, 1000, 0), "Ann", "Oslo", wrapped=True), *mysql("c", 2, (1, 1000, 1), "Bo", "Rome"),
            # out of order: the next binlog file comes first; a position later in the older file loses
            *mysql("u", 1, (2, 200, 0), "Ann", "Bern"), *mysql("u", 1, (1, 9000, 0), "Ann", "Paris", wrapped=True),
            *mysql("d", 2, (2, 300, 0)),
        ])
        _, out = run_dbt_and_capture(["run", *variables])
        assert _rows(pg_table) == [_row(1, "Ann", "Bern"), _row(2, "Bo", "Nice")], out[-3000:]
        assert _rows(mysql_table) == [_row(1, "Ann", "Bern")]
        for table in (pg_table, mysql_table):  # the event's columns stay out of the table
            assert [f.name for f in DeltaTable(str(table)).schema().fields] == ["id", "name", "city"]
            assert Snapshot.load(str(table)).configuration.get("delta.enableDeletionVectors") == "true"

        versions = _versions(pg_table, mysql_table)
        _, out = run_dbt_and_capture(["run", *variables])  # nothing new in the topics: nothing committed
        assert _versions(pg_table, mysql_table) == versions, out[-3000:]
        assert "STREAMED 0 batch(es), 0 row(s)" in out

        broker.produce(PG_TOPIC, [
            *pg("c", 3, 700, "Cy", "Quito"),  # re-inserted after its delete
            *pg("u", 2, 250, "Bo", "Turin", wrapped=True),  # late: older than what key 2 holds (300)
            *pg("u", 3, 350, "Cy", "Late"),  # late: older than key 3's delete (400)
            *pg("d", 2, 800),
            *pg("c", 4, 900, "Di", "Kyiv", wrapped=True),
        ])
        broker.produce(MYSQL_TOPIC, [
            *mysql("u", 2, (2, 250, 0), "Bo", "Late"),  # older than key 2's delete
            *mysql("c", 2, (2, 500, 0), "Bo", "Nice", wrapped=True),  # re-inserted
            *mysql("u", 1, (3, 4, 0), "Ann", "Kyiv"), *mysql("u", 1, (3, 4, 1), "Ann", "Lviv"),  # rows of one event
        ])
        run_dbt(["run", *variables])
        expected_pg = [_row(1, "Ann", "Bern"), _row(3, "Cy", "Quito"), _row(4, "Di", "Kyiv")]
        expected_mysql = [_row(1, "Ann", "Lviv"), _row(2, "Bo", "Nice")]
        assert _rows(pg_table) == expected_pg
        assert _rows(mysql_table) == expected_mysql
        assert all(v > before for v, before in zip(_versions(pg_table, mysql_table)[0], versions[0]))

        # delta-spark reads the same rows (its deletion vectors applied)
        for table, expected in ((pg_table, expected_pg), (mysql_table, expected_mysql)):
            read = [r.asDict() for r in spark.read.format("delta").load(str(table)).collect()]
            assert sorted(read, key=lambda r: r["id"]) == expected
