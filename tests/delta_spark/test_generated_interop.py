"""Generated columns and column defaults between delta-spark and deltalog: delta-spark reads our tables
and inserts into them (computing our generated column, checking given values), we write after it; tables
delta-spark creates with generated columns and defaults are written here correctly."""
from __future__ import annotations

import datetime as dt

import pytest

from deltalog import Snapshot
from deltalog.spark import operations as ops
from tests.delta_spark.test_reads_what_we_write import delta_spark_rows, our_rows

pytestmark = pytest.mark.spark

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "event_ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "status", "type": "string", "nullable": True, "metadata": {"CURRENT_DEFAULT": "'new'"}},
    {"name": "event_date", "type": "date", "nullable": True,
     "metadata": {"delta.generationExpression": "CAST(event_ts AS DATE)"}}]}


def _check_dates(rows):
    for r in rows:
        ts = dt.datetime.fromisoformat(r[1]) if isinstance(r[1], str) else r[1]
        assert r[3] == (ts.date() if ts is not None else None), r


def test_delta_spark_writes_on_our_generated_table_and_we_after_it(spark, tmp_path):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    uri = str(tmp_path / "ours")
    t = f"delta.`{uri}`"
    df = spark.createDataFrame([(1, dt.datetime(2024, 1, 1, 10)), (2, dt.datetime(2024, 1, 2, 10))],
                               "id long, event_ts timestamp")
    ops.write_dataframe(df, uri, partition_by=["event_date"], table_schema=SCHEMA)
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    # delta-spark computes our generated column and our default, and checks a value it is given
    spark.sql(f"insert into {t} (id, event_ts) values (3, timestamp'2024-01-03 10:00:00')")
    with pytest.raises(Exception, match="(?i)generat|constraint|CHECK"):
        spark.sql(f"insert into {t} values (4, timestamp'2024-01-04 10:00:00', 'x', date'2024-02-01')")
    # we write after it
    ops.write_dataframe(spark.createDataFrame([(5, dt.datetime(2024, 1, 5, 10))], "id long, event_ts timestamp"), uri)
    rows = delta_spark_rows(spark, uri, columns=["id", "event_ts", "status", "event_date"])
    assert rows == our_rows(uri, columns=["id", "event_ts", "status", "event_date"])
    assert [r[0] for r in rows] == [1, 2, 3, 5]
    _check_dates(rows)
    assert {r[2] for r in rows} == {"new"}
    # delta-spark's partition filters from event_ts work on our table
    assert spark.read.format("delta").load(uri).where("event_ts >= '2024-01-03'").count() == 2


def test_we_write_delta_spark_generated_and_default_tables(spark, tmp_path):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    uri = str(tmp_path / "theirs")
    t = f"delta.`{uri}`"
    spark.sql(f"create table {t} (id bigint, event_ts timestamp, status string default 'new', "
              f"event_date date generated always as (cast(event_ts as date))) using delta "
              f"partitioned by (event_date) tblproperties ('delta.feature.allowColumnDefaults' = 'supported')")
    spark.sql(f"insert into {t} (id, event_ts) values (1, timestamp'2024-01-01 10:00:00')")
    ops.write_dataframe(spark.createDataFrame([(2, dt.datetime(2024, 1, 2, 10))], "id long, event_ts timestamp"), uri)
    bad = spark.createDataFrame([(3, dt.datetime(2024, 1, 3, 10), "x", dt.date(2024, 3, 3))],
                                "id long, event_ts timestamp, status string, event_date date")
    before = Snapshot.load(uri).version
    with pytest.raises(Exception, match="event_date"):
        ops.write_dataframe(bad, uri)
    assert Snapshot.load(uri).version == before
    ops.merge(spark, uri, spark.createDataFrame([(1, dt.datetime(2024, 1, 9, 10))], "id long, event_ts timestamp"),
              on="s.id = t.id", source_alias="s", target_alias="t", when_matched_update={"event_ts": "s.event_ts"})
    rows = delta_spark_rows(spark, uri, columns=["id", "event_ts", "status", "event_date"])
    assert rows == our_rows(uri, columns=["id", "event_ts", "status", "event_date"])
    _check_dates(rows)
    assert [(r[0], r[2]) for r in rows] == [(1, "new"), (2, "new")]
    spark.sql(f"insert into {t} (id, event_ts) values (4, timestamp'2024-01-04 10:00:00')")
    assert len(our_rows(uri)) == 3
