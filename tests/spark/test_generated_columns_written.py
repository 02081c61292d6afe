"""Generated columns on the Spark data path: every write that adds rows (append, overwrite, replace-where,
MERGE inserts and updates, DELETE's kept rows, streaming batches) computes a generated column the data
leaves out and checks one it gives, row by row, failing by name with nothing committed; a filter on the
source of a generated partition column reads only the matching partitions' files."""
import datetime as dt

import pytest

from deltalog.errors import InvalidTableError
from deltalog.file_selection import files_for
from deltalog.spark.operations import delete, merge, write_dataframe
from deltalog.spark.reader import snapshot_dataframe
from deltalog.table import DeltaTable

pytestmark = pytest.mark.spark

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "event_ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "event_date", "type": "date", "nullable": True,
     "metadata": {"delta.generationExpression": "CAST(event_ts AS DATE)"}},
    {"name": "event_year", "type": "integer", "nullable": True,
     "metadata": {"delta.generationExpression": "year(event_ts)"}}]}


def _ts(day, hour=10):
    return dt.datetime(2024, 1, day, hour)


def _rows(spark, uri):
    return sorted(tuple(r) for r in snapshot_dataframe(spark, DeltaTable(uri).snapshot()).collect())


def _expected(*pairs):
    return sorted((i, ts, ts.date(), ts.year) for i, ts in pairs)


@pytest.fixture
def events(spark, tmp_path):
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    uri = str(tmp_path / "events")
    df = spark.createDataFrame([(i, _ts(i)) for i in range(1, 6)], "id long, event_ts timestamp")
    write_dataframe(df, uri, partition_by=["event_date"], table_schema=SCHEMA)
    return uri


def test_a_new_table_computes_its_generated_columns_and_declares_the_feature(spark, events):
    snap = DeltaTable(events).snapshot()
    assert "generatedColumns" in snap.protocol.writer_features
    assert _rows(spark, events) == _expected(*[(i, _ts(i)) for i in range(1, 6)])
    assert sorted(pv["event_date"] for pv in map(dict, snap.files.column("partition_values").to_pylist())) == [
        f"2024-01-0{i}" for i in range(1, 6)]


def test_given_values_are_checked_row_by_row_and_a_wrong_one_commits_nothing(spark, events):
    before = DeltaTable(events).version()
    good = spark.createDataFrame([(6, _ts(6), _ts(6).date(), 2024)],
                                 "id long, event_ts timestamp, event_date date, event_year int")
    write_dataframe(good, events)
    bad = spark.createDataFrame([(7, _ts(7), _ts(7).date(), 2024), (8, _ts(8), dt.date(2024, 2, 1), 2024)],
                                "id long, event_ts timestamp, event_date date, event_year int")
    for attempt in (lambda: write_dataframe(bad, events),
                    lambda: write_dataframe(bad, events, mode="overwrite", replace_where="id >= 7"),
                    lambda: merge(spark, events, bad, on="s.id = t.id", source_alias="s", target_alias="t",
                                  when_not_matched_insert="*")):
        with pytest.raises(Exception) as e:
            attempt()
        text = str(e.value)
        assert events in text and "event_date" in text and "CAST(event_ts AS DATE)" in text
        assert '"id":8' in text and "Nothing was committed" in text
    assert DeltaTable(events).version() == before + 1
    assert _rows(spark, events) == _expected(*[(i, _ts(i)) for i in range(1, 7)])


def test_merge_inserts_compute_and_updates_recompute(spark, events):
    source = spark.createDataFrame([(2, _ts(20)), (9, _ts(9, 23))], "id long, event_ts timestamp")
    merge(spark, events, source, on="s.id = t.id", source_alias="s", target_alias="t",
          when_matched_update={"event_ts": "s.event_ts"}, when_not_matched_insert={"id": "s.id", "event_ts": "s.event_ts"})
    # update by source: the generated columns follow the column the clause changes
    merge(spark, events, spark.createDataFrame([(1,)], "id long"), on="s.id = t.id", source_alias="s",
          target_alias="t", when_not_matched_by_source_update={"event_ts": "t.event_ts + interval 1 day"},
          when_not_matched_by_source_condition="t.id = 5")
    assert _rows(spark, events) == _expected((1, _ts(1)), (2, _ts(20)), (3, _ts(3)), (4, _ts(4)),
                                             (5, _ts(6)), (9, _ts(9, 23)))


def test_delete_and_overwrite_keep_the_columns_right(spark, events):
    delete(spark, events, "id = 3")
    df = spark.createDataFrame([(10, _ts(4, 1))], "id long, event_ts timestamp")
    write_dataframe(df, events, mode="overwrite", replace_where="event_date = '2024-01-04'")
    assert _rows(spark, events) == _expected((1, _ts(1)), (2, _ts(2)), (5, _ts(5)), (10, _ts(4, 1)))


def test_a_filter_on_the_source_timestamp_reads_only_the_matching_partitions(spark, tmp_path):
    # no column statistics: only the partition values can tell files apart
    events = str(tmp_path / "nostats")
    df = spark.createDataFrame([(i, _ts(i)) for i in range(1, 6)], "id long, event_ts timestamp")
    write_dataframe(df, events, partition_by=["event_date"], table_schema=SCHEMA,
                    configuration={"delta.dataSkippingNumIndexedCols": "0"})
    table = DeltaTable(events)
    snap = table.snapshot()
    assert all('"minValues"' not in (s or "") or '"event_ts"' not in s for s in snap.files.column("stats").to_pylist())
    assert snap.num_files == 5
    txn = table.transaction()
    read = files_for(txn, "event_ts >= '2024-01-04 12:00:00'")
    # the 14-hour margin for the writer's time zone reaches back into 2024-01-03's partition, no further
    assert sorted(dict(pv)["event_date"] for pv in read.column("partition_values").to_pylist()) == [
        "2024-01-03", "2024-01-04", "2024-01-05"]
    read = files_for(table.transaction(), "event_ts = '2024-01-02 10:00:00'")
    assert sorted(dict(pv)["event_date"] for pv in read.column("partition_values").to_pylist()) == [
        "2024-01-01", "2024-01-02", "2024-01-03"]
    # a Spark read with the filter opens only those partitions' files
    from deltalog.spark.reader import matching_dataframe

    df = matching_dataframe(spark, snap, "event_ts >= '2024-01-04 12:00:00'")
    assert sorted(r.id for r in df.collect()) == [5]
    assert sorted(f.split("event_date=")[1][:10] for f in df.inputFiles()) == ["2024-01-03", "2024-01-04", "2024-01-05"]
    ntz = str(tmp_path / "ntz")
    ntz_schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
        {"name": "month", "type": "timestamp_ntz", "nullable": True,
         "metadata": {"delta.generationExpression": "date_trunc('MONTH', ts)"}}]}
    write_dataframe(spark.createDataFrame([(m, dt.datetime(2024, m, 15)) for m in range(1, 7)], "id long, ts timestamp_ntz"),
                    ntz, partition_by=["month"], table_schema=ntz_schema,
                    configuration={"delta.dataSkippingNumIndexedCols": "0"})
    df = matching_dataframe(spark, DeltaTable(ntz).snapshot(), "ts >= '2024-04-20' and ts < '2024-05-31'")
    assert sorted(r.id for r in df.collect()) == [5]
    assert len(df.inputFiles()) == 2  # April's and May's partitions, exactly: no time zone to allow for
    # a DELETE by the source column rewrites nothing outside those partitions
    delete(spark, events, "event_ts < '2024-01-02 00:00:00'")
    commit = DeltaTable(events).history(1)[0]
    assert int(commit["operationMetrics"]["numRemovedFiles"]) <= 2
    assert _rows(spark, events) == _expected(*[(i, _ts(i)) for i in range(2, 6)])


def test_an_expression_spark_cannot_evaluate_is_refused_by_name(spark, tmp_path):
    schema = {"type": "struct", "fields": [
        {"name": "a", "type": "string", "nullable": True, "metadata": {}},
        {"name": "b", "type": "long", "nullable": True,
         "metadata": {"delta.generationExpression": "no_such_function(a)"}}]}
    uri = str(tmp_path / "bad")
    with pytest.raises(InvalidTableError) as e:
        write_dataframe(spark.createDataFrame([("x",)], "a string"), uri, table_schema=schema)
    assert "generated column b" in str(e.value) and "no_such_function" in str(e.value)
    assert not DeltaTable(uri).exists()


def test_streaming_batches_compute_them(spark, events, tmp_path):
    from deltalog.spark.streaming import batch_writer

    source = tmp_path / "in"
    source.mkdir()
    spark.createDataFrame([(11, _ts(11))], "id long, event_ts timestamp").write.parquet(str(source / "b1"))
    stream = (spark.readStream.schema("id long, event_ts timestamp").parquet(str(source / "b1"))
              .writeStream.foreachBatch(batch_writer(events, "gen-test"))
              .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    stream.awaitTermination()
    assert (11, _ts(11), _ts(11).date(), 2024) in _rows(spark, events)


def test_delta_rs_reads_our_generated_and_default_columns(spark, events):
    deltalake = pytest.importorskip("deltalake")
    merge(spark, events, spark.createDataFrame([(7, _ts(7))], "id long, event_ts timestamp"), on="s.id = t.id",
          source_alias="s", target_alias="t", when_not_matched_insert="*")
    theirs = deltalake.DeltaTable(events).to_pyarrow_table().to_pylist()
    got = sorted((r["id"], r["event_ts"].replace(tzinfo=None), r["event_date"], r["event_year"]) for r in theirs)
    assert got == _rows(spark, events)
