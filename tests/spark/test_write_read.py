"""Spark data path: DataFrames written as Delta tables, read back by Spark (snapshot_dataframe) and by
delta-rs, with partition values, stats and history checked as a user would."""
import datetime as dt
import json
import os
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from deltalog.errors import InvalidTableError, SchemaMismatchError
from deltalog.paths import decode_path, parse_partition_folder
from deltalog.snapshot import Snapshot
from deltalog.spark.operations import delete, write_dataframe
from deltalog.spark.reader import register_view, snapshot_dataframe
from deltalog.spark.writer import write_files

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark

UTC = dt.timezone.utc


def rows_spark(spark, uri, order="id"):
    df = snapshot_dataframe(spark, Snapshot.load(uri))
    return [r.asDict(recursive=True) for r in df.orderBy(order).collect()]


def rows_delta_rs(uri, order="id"):
    t = deltalake.DeltaTable(uri).to_pyarrow_table()
    return sorted(t.to_pylist(), key=lambda r: (r[order] is None, r[order]))


def norm(rows):
    """Spark gives naive UTC datetimes (session and process in UTC), delta-rs aware ones."""
    out = []
    for r in rows:
        out.append({k: (v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v)
                    for k, v in r.items()})
    return out


def sample_df(spark):
    return spark.sql("""
        select id, cast(id * 1.5 as double) as amount, cast(id as decimal(10, 2)) as price,
               concat('name-', id) as name, date_add(date'2024-01-01', cast(id % 3 as int)) as day,
               timestamp_seconds(1700000000 + id) as ts,
               named_struct('a', id, 'b', concat('x', id)) as info, array(id, id + 1) as tags
        from range(20) t(id)""")


def test_create_append_read_back_spark_and_delta_rs(spark, tmp_path):
    uri = str(tmp_path / "t")
    v0 = write_dataframe(sample_df(spark), uri, mode="error")
    assert v0 == 0
    v1 = write_dataframe(sample_df(spark).where("id < 5"), uri, mode="append")
    assert v1 == 1
    ours = rows_spark(spark, uri)
    theirs = rows_delta_rs(uri)
    assert len(ours) == 25
    assert norm(ours) == norm(theirs)
    snap = Snapshot.load(uri)
    assert snap.partition_columns == []
    assert [f["name"] for f in snap.schema_json["fields"]] == ["id", "amount", "price", "name", "day", "ts",
                                                               "info", "tags"]
    assert all(f["nullable"] for f in snap.schema_json["fields"])
    for stats in snap.files.column("stats").to_pylist():
        s = json.loads(stats)
        assert s["numRecords"] > 0 and "id" in s["minValues"] and s["minValues"]["info"]["a"] >= 0
        assert s["nullCount"]["name"] == 0
    history = deltalake.DeltaTable(uri).history()
    assert [h["operation"] for h in history] == ["WRITE", "WRITE"]
    assert history[0]["operationParameters"]["mode"] == "Append"
    assert deltalake.DeltaTable(uri).version() == 1
    # nothing left behind but data files and the log
    assert not (tmp_path / "t" / "_delta_staging").exists()


def test_partitioned_awkward_values(spark, tmp_path):
    uri = str(tmp_path / "p")
    df = spark.sql("""
        select * from values
          (1, 'a/b=c%d:e', date'2024-01-01', timestamp'2024-01-01 10:00:00.123456', true),
          (2, 'ünï code', date'2024-01-02', timestamp'2024-01-02 00:00:00', false),
          (3, cast(null as string), cast(null as date), cast(null as timestamp), cast(null as boolean)),
          (4, 'sp ace#?', date'2024-01-01', timestamp'2024-01-01 10:00:00.123456', true),
          (5, 'a/b=c%d:e', date'2024-01-01', timestamp'2024-01-01 10:00:00.123456', true)
        as t(id, s, d, ts, flag)""").coalesce(1)
    write_dataframe(df, uri, mode="error", partition_by=["s", "d", "ts", "flag"])
    snap = Snapshot.load(uri)
    assert snap.partition_columns == ["s", "d", "ts", "flag"]
    assert snap.num_files == 4  # rows 1 and 5 share a partition
    by_id = {}
    for path, pv in zip(snap.files.column("path").to_pylist(), snap.files.column("partition_values").to_pylist()):
        pv = dict(pv)
        rel = decode_path(path)
        assert os.path.exists(os.path.join(uri, rel))
        folder = parse_partition_folder(rel)
        assert list(folder) == ["s", "d", "ts", "flag"]
        assert folder == pv  # folders spell the log's partition values
        ids = pq.read_table(os.path.join(uri, rel)).column("id").to_pylist()
        assert pq.read_schema(os.path.join(uri, rel)).names == ["id"]  # partition columns not in files
        for i in ids:
            by_id[i] = pv
    assert by_id[1] == {"s": "a/b=c%d:e", "d": "2024-01-01", "ts": "2024-01-01 10:00:00.123456", "flag": "true"}
    assert by_id[3] == {"s": None, "d": None, "ts": None, "flag": None}
    assert by_id[2]["ts"] == "2024-01-02 00:00:00" and by_id[2]["flag"] == "false"
    ours = rows_spark(spark, uri)
    theirs = rows_delta_rs(uri)
    assert norm(ours) == norm(theirs)
    assert ours[0]["ts"] == dt.datetime(2024, 1, 1, 10, 0, 0, 123456) and ours[0]["s"] == "a/b=c%d:e"
    assert ours[2]["s"] is None and ours[2]["d"] is None
    # Row-level delete in awkward folders: Spark's file paths map back to the log's paths.
    delete(spark, uri, "id in (1, 2)")
    assert sorted(r["id"] for r in rows_spark(spark, uri)) == [3, 4, 5]
    assert sorted(r["id"] for r in rows_delta_rs(uri)) == [3, 4, 5]


def test_reader_falls_back_when_folders_disagree(spark, tmp_path):
    """delta-rs may name folders differently; the reader then takes values from the log."""
    import pyarrow as pa
    uri = str(tmp_path / "rs")
    data = pa.table({"id": [1, 2, 3], "p": ["x y", None, "a%b"], "n": [1.5, 2.5, 3.5]})
    deltalake.write_deltalake(uri, data, partition_by=["p"])
    df = snapshot_dataframe(spark, Snapshot.load(uri))
    assert df.columns == ["id", "p", "n"]
    got = sorted((r.id, r.p, r.n) for r in df.collect())
    assert got == [(1, "x y", 1.5), (2, None, 2.5), (3, "a%b", 3.5)]


def test_empty_string_partition_value_reads_as_null(spark, tmp_path):
    """The protocol: "" in partitionValues is a null partition value, for strings too (delta-rs agrees)."""
    import pyarrow as pa
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, pa.table({"id": [1, 2], "p": ["e", "x"]}), partition_by=["p"])
    log = os.path.join(uri, "_delta_log", "00000000000000000000.json")
    text = open(log).read()
    assert text.count('"p":"e"') == 1
    with open(log, "w") as f:
        f.write(text.replace('"p":"e"', '"p":""'))
    theirs = sorted(((r["id"], r["p"]) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()))
    assert theirs == [(1, None), (2, "x")]
    ours = sorted((r.id, r.p) for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect())
    assert ours == theirs
    assert [r.id for r in snapshot_dataframe(spark, Snapshot.load(uri)).where("p is null").collect()] == [1]


def test_empty_table_and_view(spark, tmp_path):
    uri = str(tmp_path / "e")
    write_dataframe(sample_df(spark).where("false"), uri, mode="error", partition_by=["day"])
    snap = Snapshot.load(uri)
    assert snap.version == 0 and snap.num_files == 0
    df = snapshot_dataframe(spark, snap)
    assert df.count() == 0 and df.columns[0] == "id"
    write_dataframe(sample_df(spark), uri, mode="append")
    register_view(spark, "analytics.orders", uri)
    assert spark.sql("select count(*) c from `analytics.orders` where day = date'2024-01-02'").collect()[0].c == 7
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 20


def test_overwrite_changes_schema_keeps_history(spark, tmp_path):
    uri = str(tmp_path / "o")
    write_dataframe(sample_df(spark), uri, mode="error", partition_by=["day"])
    v = write_dataframe(spark.sql("select 'x' as id, 1 as other"), uri, mode="overwrite", schema_mode="overwrite",
                        partition_by=[])
    assert v == 1
    snap = Snapshot.load(uri)
    assert snap.partition_columns == [] and [f["name"] for f in snap.schema_json["fields"]] == ["id", "other"]
    assert rows_spark(spark, uri) == [{"id": "x", "other": 1}]
    assert deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist() == [{"id": "x", "other": 1}]
    old = snapshot_dataframe(spark, Snapshot.load(uri, version=0))
    assert old.count() == 20


def test_schema_errors(spark, tmp_path):
    uri = str(tmp_path / "s")
    write_dataframe(sample_df(spark), uri, mode="error")
    with pytest.raises(InvalidTableError, match="already exists"):
        write_dataframe(sample_df(spark), uri, mode="error")
    with pytest.raises(SchemaMismatchError, match="extra_col"):
        write_dataframe(sample_df(spark).selectExpr("*", "id as extra_col"), uri, mode="append")
    with pytest.raises(SchemaMismatchError, match="unique ignoring case"):
        write_dataframe(spark.sql("select 1 as a, 2 as A"), str(tmp_path / "s2"), mode="error")
    with pytest.raises(SchemaMismatchError, match="'x'.*cast"):
        write_dataframe(spark.sql("select 1 as id, null as x"), str(tmp_path / "s3"), mode="error")
    with pytest.raises(InvalidTableError, match="partitioned by"):
        write_dataframe(sample_df(spark), uri, mode="append", partition_by=["day"])
    assert Snapshot.load(uri).version == 0  # nothing committed by the failures
    assert not os.path.exists(tmp_path / "s2" / "_delta_log")
    # merge schema adds a column; missing columns read as null
    write_dataframe(spark.sql("select 100L as id, 'new' as note"), uri, mode="append", schema_mode="merge")
    rows = rows_spark(spark, uri)
    assert rows[-1]["note"] == "new" and rows[-1]["amount"] is None and rows[0]["note"] is None
    assert len(rows_delta_rs(uri)) == 21


def test_replace_where_rewrites_partly_matching_files(spark, tmp_path):
    uri = str(tmp_path / "rw")
    write_dataframe(spark.sql("select id, id % 10 as k from range(100) t(id)").repartition(4), uri, mode="error")
    before = Snapshot.load(uri)
    v = write_dataframe(spark.sql("select id + 1000 as id, 3 as k from range(5) t(id)"), uri, mode="overwrite",
                        replace_where="k = 3")
    snap = Snapshot.load(uri)
    rows = rows_spark(spark, uri)
    assert sum(1 for r in rows if r["k"] == 3) == 5 and len(rows) == 95
    assert all(r["id"] >= 1000 for r in rows if r["k"] == 3)
    ci = deltalake.DeltaTable(uri).history(1)[0]
    assert ci["operationParameters"]["predicate"] == '["k = 3"]'
    assert int(ci["operationMetrics"]["numDeletedRows"]) == 10
    assert len(rows_delta_rs(uri)) == 95
    assert snap.version == v == before.version + 1


def test_replace_where_on_partition_drops_whole_files(spark, tmp_path):
    uri = str(tmp_path / "rwp")
    write_dataframe(sample_df(spark), uri, mode="error", partition_by=["day"])
    before = Snapshot.load(uri)
    other = [p for p, pv in zip(before.files.column("path").to_pylist(),
                                before.files.column("partition_values").to_pylist())
             if dict(pv)["day"] != "2024-01-02"]
    write_dataframe(sample_df(spark).where("day = date'2024-01-02'").selectExpr("id + 100 as id", "amount", "price",
                                                                                  "name", "day", "ts", "info", "tags"),
                    uri, mode="overwrite", replace_where="day = '2024-01-02'")
    snap = Snapshot.load(uri)
    live = set(snap.files.column("path").to_pylist())
    assert set(other) <= live  # untouched partitions keep their files
    ci = deltalake.DeltaTable(uri).history(1)[0]
    assert "numCopiedRows" not in ci["operationMetrics"]  # no file was rewritten
    rows = rows_spark(spark, uri)
    assert len(rows) == 20 and sorted(r["id"] for r in rows if str(r["day"]) == "2024-01-02")[0] >= 100


def test_dynamic_partition_overwrite(spark, tmp_path):
    uri = str(tmp_path / "dpo")
    write_dataframe(spark.sql("select id, id % 3 as p from range(30) t(id)"), uri, mode="error", partition_by=["p"])
    write_dataframe(spark.sql("select 999 as id, 1 as p"), uri, mode="overwrite", overwrite_partitions=True)
    rows = rows_spark(spark, uri)
    assert [r["id"] for r in rows if r["p"] == 1] == [999]
    assert len([r for r in rows if r["p"] != 1]) == 20
    assert len(rows_delta_rs(uri)) == 21


def test_delete(spark, tmp_path):
    uri = str(tmp_path / "d")
    write_dataframe(spark.sql("select id, id % 3 as p, id % 2 as odd from range(30) t(id)").repartition(2), uri,
                    mode="error", partition_by=["p"])
    before = Snapshot.load(uri)
    assert delete(spark, uri, "id > 1000") is None  # nothing matched, nothing committed
    v = delete(spark, uri, "p = 0")  # whole partition: files removed, none rewritten
    h = deltalake.DeltaTable(uri).history(1)[0]
    assert h["operation"] == "DELETE" and int(h["operationMetrics"]["numAddedFiles"]) == 0
    v = delete(spark, uri, "odd = 1 and p = 1")
    rows = rows_spark(spark, uri)
    assert all(r["p"] != 0 for r in rows) and not any(r["odd"] == 1 and r["p"] == 1 for r in rows)
    assert len(rows) == 20 - 5
    assert len(rows_delta_rs(uri)) == 15
    delete(spark, uri, None)
    assert Snapshot.load(uri).num_files == 0
    assert before.version + 3 == Snapshot.load(uri).version


def test_arrow_method_same_result(spark, tmp_path):
    uri = str(tmp_path / "arrow")
    df = spark.sql("select id, cast(id % 3 as string) as p, timestamp_seconds(1700000000 + id) as ts, "
                   "cast(id as decimal(20, 3)) as dec from range(50) t(id)").coalesce(1)
    write_dataframe(df, uri, mode="error", partition_by=["p"], method="arrow")
    snap = Snapshot.load(uri)
    assert snap.num_files == 3
    assert norm(rows_spark(spark, uri)) == norm(rows_delta_rs(uri))
    uri2 = str(tmp_path / "native")
    write_dataframe(df, uri2, mode="error", partition_by=["p"])
    stats_a = sorted(json.loads(s)["maxValues"]["ts"] for s in snap.files.column("stats").to_pylist())
    stats_n = sorted(json.loads(s)["maxValues"]["ts"] for s in Snapshot.load(uri2).files.column("stats").to_pylist())
    assert stats_a == stats_n
    assert sorted(json.loads(s)["minValues"]["dec"] for s in snap.files.column("stats").to_pylist()) == [0, 1, 2]


def test_write_files_stats_match_delta_rs(spark, tmp_path):
    """The stats our Spark writer records equal those delta-rs records for the same rows."""
    df = spark.sql("select id, cast(id * 0.5 as double) as x, concat('s', id) as s, date_add(date'2020-01-01', "
                   "cast(id as int)) as d, cast(id as decimal(8,2)) as m from range(10) t(id)").coalesce(1)
    from deltalog.spark.operations import dataframe_schema
    schema_json = dataframe_schema(df, "t")
    adds = write_files(df, str(tmp_path / "ours"), [], schema_json)
    ours = json.loads(adds[0].stats)
    deltalake.write_deltalake(str(tmp_path / "theirs"), df.toArrow())
    theirs = json.loads(deltalake.DeltaTable(str(tmp_path / "theirs")).get_add_actions(flatten=False)
                        .column("stats")[0].as_py()) if False else None
    log = (tmp_path / "theirs" / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    theirs = json.loads(next(json.loads(line)["add"]["stats"] for line in log if line.startswith('{"add"')))
    assert ours == theirs


def test_not_null_column_is_enforced(spark, tmp_path):
    import pyarrow as pa
    uri = str(tmp_path / "nn")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    deltalake.write_deltalake(uri, pa.table({"id": [1], "v": ["a"]}, schema=schema))
    write_dataframe(spark.sql("select 2L as id, 'b' as v"), uri, mode="append")
    with pytest.raises(Exception, match="NOT NULL"):
        write_dataframe(spark.sql("select cast(null as bigint) as id, 'c' as v"), uri, mode="append")
    assert deltalake.DeltaTable(uri).version() == 1
    assert sorted(r["id"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()) == [1, 2]


def test_timestamp_partitions_in_another_session_time_zone(spark, tmp_path):
    uri = str(tmp_path / "tz")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.sql("select 1 as id, timestamp'2024-03-01 12:00:00' as ts")  # 17:00 UTC
        write_dataframe(df, uri, mode="error", partition_by=["ts"])
        pv = dict(Snapshot.load(uri).files.column("partition_values").to_pylist()[0])
        assert pv == {"ts": "2024-03-01 17:00:00"}
        got = snapshot_dataframe(spark, Snapshot.load(uri)).selectExpr("cast(ts as string) s").collect()[0].s
        assert got == "2024-03-01 12:00:00"  # shown in the session's zone, same instant
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    rs = deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()[0]["ts"]
    assert rs.astimezone(UTC) == dt.datetime(2024, 3, 1, 17, tzinfo=UTC)


def test_materialize_partition_columns_feature_keeps_them_in_files(spark, tmp_path):
    from deltalog.actions import Protocol
    from deltalog.table import DeltaTable
    uri = str(tmp_path / "mat")
    write_dataframe(spark.sql("select 1L as id, 'a' as p"), uri, mode="error", partition_by=["p"])
    txn = DeltaTable(uri).transaction()
    txn.update_protocol(Protocol(1, 7, None, ["appendOnly", "invariants", "materializePartitionColumns"]))
    txn.commit(operation="UPGRADE PROTOCOL")
    write_dataframe(spark.sql("select 2L as id, 'b' as p"), uri, mode="append")
    snap = Snapshot.load(uri)
    newest = [p for p in snap.files.column("path").to_pylist() if "p=b" in p][0]
    assert pq.read_schema(os.path.join(uri, decode_path(newest))).names == ["id", "p"]
    assert sorted((r["id"], r["p"]) for r in rows_spark(spark, uri)) == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_a_write_missing_rows_is_never_committed(spark, tmp_path, monkeypatch, method):
    """Spark counts the rows it writes; when the files found hold fewer (here one file vanishes as an
    executor's file on another machine's disk would), the write fails and the table is unchanged."""
    from deltalog.errors import IncompleteWriteError
    from deltalog.spark import writer

    uri = str(tmp_path / "t")
    write_dataframe(spark.range(10).selectExpr("id"), uri)
    lost = []

    def losing_one_file(real, keep_its_add):
        def write(*args, **kwargs):
            adds = real(*args, **kwargs)
            lost.append(adds[0].path)
            os.unlink(os.path.join(uri, decode_path(adds[0].path)))
            return adds if keep_its_add else adds[1:]
        return write

    # native: the driver does not find the file; arrow: an executor reports a file the driver cannot see
    name = "_write_native" if method == "native" else "_write_arrow"
    monkeypatch.setattr(writer, name, losing_one_file(getattr(writer, name), keep_its_add=method == "arrow"))
    df = spark.range(100, 400, 1, 3).selectExpr("id")
    with pytest.raises(IncompleteWriteError, match=r"Spark wrote 300 row\(s\) but the data files the driver found hold"):
        write_dataframe(df, uri, method=method)
    monkeypatch.undo()
    assert lost
    assert Snapshot.load(uri).version == 0
    assert rows_delta_rs(uri) == [{"id": i} for i in range(10)]
    # the other files of the failed write are gone too
    live = {decode_path(p) for p in Snapshot.load(uri).files.column("path").to_pylist()}
    on_disk = {os.path.relpath(os.path.join(d, n), uri) for d, _, ns in os.walk(uri) for n in ns
               if n.endswith(".parquet") and "_delta_log" not in d}
    assert on_disk == live


def test_int96_timestamps_read_as_microseconds_by_spark_and_by_arrow(spark):
    """delta-rs's table_with_edge_timestamps (Spark 3.1 wrote INT96): 9999-12-31 is 9999-12-31 through
    Spark's native reader and through the pure-Arrow reader (which the object-store data source uses)."""
    from deltalog.scan import read_table
    from deltalog.spark.reader import snapshot_dataframe
    from tests.engine.test_wild_conformance import DELTA_RS_WRAPS_INT96, edge_timestamps
    from tests.support.shared_data import WILD, require

    case = "deltars/table_with_edge_timestamps"
    snap = Snapshot.load(str(require(WILD / case)))
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        assert edge_timestamps(snapshot_dataframe(spark, snap).toArrow()) == DELTA_RS_WRAPS_INT96[case]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert edge_timestamps(read_table(snap)) == DELTA_RS_WRAPS_INT96[case]
