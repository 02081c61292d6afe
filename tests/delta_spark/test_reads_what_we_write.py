"""delta-spark reads every table feature deltalog writes, at every version, with the rows deltalog and
delta-rs read: deletion vectors, column mapping (name and id), the change data feed (`table_changes`),
row tracking (`_metadata.row_id` / `row_commit_version`), liquid clustering (`DESCRIBE DETAIL`), CHECK and
NOT NULL constraints (enforced by delta-spark on its own appends), timestamp_ntz, in-commit timestamps,
checkpoints with `_last_checkpoint` and `.crc` (delta-spark's checksum validation on), shallow clones,
and `DESCRIBE HISTORY` shows our operations.
"""
from __future__ import annotations

import datetime as dt
import decimal

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog import Snapshot
from deltalog.checkpoint_read import read_last_checkpoint
from deltalog.checksum import checksum_name
from deltalog.definition import TableDefinition
from deltalog.operations.clone import shallow_clone
from deltalog.scan import read_table
from deltalog.spark import operations as ops
from deltalog.spark.optimize import optimize
from deltalog.storage import log_store_for

pytestmark = pytest.mark.spark


def _plain(value):
    """A value comparable across Spark rows, Arrow's Python values and delta-rs's."""
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if hasattr(value, "asDict"):
        return _plain(value.asDict(recursive=True))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def rows_of(records, columns) -> list[tuple]:
    return sorted((tuple(_plain(r[c]) for c in columns) for r in records), key=repr)


def delta_spark_rows(spark, uri: str, version: int | None = None, columns=None) -> list[tuple]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(uri)
    columns = columns or df.columns
    return rows_of([r.asDict(recursive=True) for r in df.select(*[f"`{c}`" for c in columns]).collect()], columns)


def our_rows(uri: str, version: int | None = None, columns=None) -> list[tuple]:
    table = read_table(Snapshot.load(uri, version=version))
    columns = columns or table.column_names
    return rows_of(table.select(columns).to_pylist(), columns)


def delta_rs_rows(uri: str, version: int | None = None, columns=None, storage_options=None) -> list[tuple]:
    table = deltalake.DeltaTable(uri, version=version, storage_options=storage_options)
    data = pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())
    columns = columns or data.column_names
    return rows_of(data.select(columns).to_pylist(), columns)


def same_at_every_version(spark, uri: str, columns=None, delta_rs: bool = True, storage_options=None,
                          since: int = 0) -> int:
    """Rows equal in delta-spark, deltalog and delta-rs at every version from `since` (each a
    versioned read by delta-spark, seconds apiece); returns the last version."""
    last = Snapshot.load(uri).version
    for v in range(since, last + 1):
        ours = our_rows(uri, v, columns)
        assert delta_spark_rows(spark, uri, v, columns) == ours, f"version {v}"
        if delta_rs:
            assert delta_rs_rows(uri, v, columns, storage_options) == ours, f"version {v} (delta-rs)"
    return last


def source(spark, sql: str):
    return spark.sql(sql)


def test_deletion_vectors_from_delete_update_and_merge(spark, tmp_path):
    uri = str(tmp_path / "dv")
    ops.write_dataframe(source(spark, "select id, id % 7 as k, cast(id as string) as s from range(1000)"), uri,
                        mode="overwrite", configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, uri, "k = 3")
    ops.merge(spark, uri, source(spark, "select id, -1 as k, 'updated' as s from range(0, 2000, 5)"), "s.id = t.id",
              when_matched_update={"k": "s.k", "s": "s.s"}, when_not_matched_insert={"id": "s.id", "k": "s.k", "s": "s.s"},
              source_alias="s", target_alias="t")
    ops.delete(spark, uri, "id between 100 and 120")
    assert any(a.deletion_vector for a in Snapshot.load(uri).add_files())
    assert same_at_every_version(spark, uri) == 3


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping(spark, tmp_path, mode):
    uri = str(tmp_path / f"cm-{mode}")
    df = source(spark, "select id, cast(id % 3 as string) as `part col`, named_struct('a', id, 'b b', 'x') as `s;t` "
                       "from range(50)")
    ops.write_dataframe(df, uri, mode="overwrite", partition_by=["part col"],
                        configuration={"delta.columnMapping.mode": mode})
    ops.write_dataframe(df, uri, mode="append")
    ops.delete(spark, uri, "id < 10")
    assert same_at_every_version(spark, uri) == 2


def test_change_data_feed_in_table_changes(spark, tmp_path):
    uri = str(tmp_path / "cdf")
    ops.write_dataframe(source(spark, "select id, 0 as v from range(20)"), uri, mode="overwrite",
                        configuration={"delta.enableChangeDataFeed": "true"})
    ops.merge(spark, uri, source(spark, "select id, 1 as v from range(10, 30)"), "s.id = t.id",
              when_matched_update={"v": "s.v"}, when_not_matched_insert={"id": "s.id", "v": "s.v"},
              source_alias="s", target_alias="t")
    ops.delete(spark, uri, "id < 5")
    theirs = spark.sql(f"select id, v, _change_type, _commit_version from table_changes_by_path('{uri}', 0)")
    got = rows_of([r.asDict() for r in theirs.collect()], ["id", "v", "_change_type", "_commit_version"])
    from deltalog.spark.change_data import changes_dataframe

    ours = [r.asDict() for r in changes_dataframe(spark, uri, 0).collect()]
    assert got == rows_of(ours, ["id", "v", "_change_type", "_commit_version"])
    kinds = {r[2] for r in got}
    assert kinds == {"insert", "update_preimage", "update_postimage", "delete"}


def test_row_tracking_ids_and_commit_versions(spark, tmp_path):
    uri = str(tmp_path / "rt")
    ops.write_dataframe(source(spark, "select id, 0 as v from range(30)"), uri, mode="overwrite",
                        configuration={"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"})
    ops.write_dataframe(source(spark, "select id, 0 as v from range(30, 40)"), uri, mode="append")
    ops.merge(spark, uri, source(spark, "select id, 1 as v from range(0, 40, 4)"), "s.id = t.id",
              when_matched_update={"v": "s.v"}, source_alias="s", target_alias="t")
    optimize(spark, uri)
    theirs = spark.read.format("delta").load(uri).select("id", "v", "_metadata.row_id", "_metadata.row_commit_version")
    got = {r["id"]: (r["row_id"], r["row_commit_version"]) for r in theirs.collect()}
    from tests.support.row_ids import row_ids  # IDs and commit versions as the protocol says a reader finds them

    version = Snapshot.load(uri).version
    ids, versions = row_ids(uri, version), row_ids(uri, version, commit_versions=True)
    assert got == {k: (ids[k], versions[k]) for k in ids}
    assert len({g[0] for g in got.values()}) == 40  # unique


def test_liquid_clustering_in_describe_detail(spark, tmp_path):
    uri = str(tmp_path / "lc")
    ops.write_dataframe(source(spark, "select id, id % 10 as a, id % 3 as b from range(100)"), uri,
                        mode="overwrite", definition=TableDefinition(clustering=("a", "b")))
    optimize(spark, uri)
    detail = spark.sql(f"describe detail delta.`{uri}`").collect()[0].asDict()
    assert list(detail["clusteringColumns"]) == ["a", "b"]
    same_at_every_version(spark, uri)


def test_constraints_are_enforced_by_delta_spark(spark, tmp_path):
    uri = str(tmp_path / "ck")
    ops.write_dataframe(source(spark, "select id, id as amount from range(10)"), uri, mode="overwrite",
                        definition=TableDefinition(properties={"delta.constraints.positive": "amount >= 0"},
                                                   owned_prefixes=("delta.constraints.",), not_null=("id",)))
    with pytest.raises(Exception, match="DELTA_VIOLATE_CONSTRAINT_WITH_VALUES|CHECK constraint positive"):
        spark.sql("select 11L as id, -5L as amount").write.format("delta").mode("append").save(uri)
    with pytest.raises(Exception, match="DELTA_NOT_NULL_CONSTRAINT_VIOLATED"):
        spark.sql("select cast(null as bigint) as id, 5L as amount").write.format("delta").mode("append").save(uri)
    spark.sql("select 12L as id, 5L as amount").write.format("delta").mode("append").save(uri)
    assert Snapshot.load(uri).version == 1
    assert same_at_every_version(spark, uri) == 1


def test_timestamp_ntz_and_in_commit_timestamps(spark, tmp_path):
    uri = str(tmp_path / "ts")
    df = source(spark, "select id, timestamp_ntz'2024-01-02 03:04:05' + make_interval(0, 0, 0, id) as ntz, "
                       "timestamp'2024-01-02 03:04:05' as ts from range(5)")
    ops.write_dataframe(df, uri, mode="overwrite", configuration={"delta.enableInCommitTimestamps": "true"})
    ops.write_dataframe(df, uri, mode="append")
    same_at_every_version(spark, uri)
    history = spark.sql(f"describe history delta.`{uri}`").select("version", "timestamp").collect()
    ours = {h["version"]: h["timestamp"] for h in deltalake.DeltaTable(uri).history()}
    for h in history:  # the history's timestamps are the in-commit timestamps we wrote
        assert int(h["timestamp"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000) == ours[h["version"]]


def test_checkpoints_last_checkpoint_and_checksums(spark, tmp_path):
    uri = str(tmp_path / "cp")
    ops.write_dataframe(source(spark, "select id from range(10)"), uri, mode="overwrite",
                        configuration={"delta.checkpointInterval": "3"})
    for i in range(7):
        ops.write_dataframe(source(spark, f"select id + {10 * (i + 1)} as id from range(10)"), uri, mode="append")
    ops.delete(spark, uri, "id % 9 = 0")
    store = log_store_for(uri)
    assert read_last_checkpoint(store)["version"] == 6
    assert all(store.read(checksum_name(v)) for v in range(9))
    # a fresh reader of delta-spark's own (no cached snapshot) starts from our checkpoint and checks the .crc
    spark.catalog.clearCache()
    assert same_at_every_version(spark, uri) == 8
    assert spark.read.format("delta").load(uri).count() == len(our_rows(uri))


def test_shallow_clone(spark, tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "clone")
    ops.write_dataframe(source(spark, "select id, id % 2 as k from range(20)"), src, mode="overwrite",
                        configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, src, "id < 4")
    shallow_clone(src, dst)
    assert delta_spark_rows(spark, dst) == our_rows(src)
    ops.write_dataframe(source(spark, "select 100L as id, 0L as k"), dst, mode="append")
    assert delta_spark_rows(spark, dst) == our_rows(dst)


def test_describe_history_shows_our_operations(spark, tmp_path):
    uri = str(tmp_path / "h")
    ops.write_dataframe(source(spark, "select id from range(10)"), uri, mode="overwrite")
    ops.write_dataframe(source(spark, "select id from range(10, 20)"), uri, mode="append")
    ops.delete(spark, uri, "id < 3")
    optimize(spark, uri)
    history = spark.sql(f"describe history delta.`{uri}`").orderBy("version").collect()
    assert [h["operation"] for h in history] == ["CREATE OR REPLACE TABLE AS SELECT", "WRITE", "DELETE", "OPTIMIZE"] \
        or [h["operation"] for h in history][1:] == ["WRITE", "DELETE", "OPTIMIZE"]
    assert history[1]["operationMetrics"]["numOutputRows"] == "10"


@pytest.mark.parametrize("scd", [1, 2])
def test_a_table_applying_changes_and_its_change_feed(spark, tmp_path, scd):
    """A stream of changes applied by key (merge-on-read, deletion vectors): delta-spark reads every
    version and the change feed carries the applied updates and deletes, as ours reads them."""
    from deltalog.spark.apply_changes import ApplyChanges, change_applier
    from deltalog.spark.change_data import changes_dataframe

    uri = str(tmp_path / f"scd{scd}")
    spec = ApplyChanges.of({"keys": ["id"], "sequence_by": "seq", "apply_as_deletes": "op = 'd'",
                            "except_column_list": ["op", "seq"], "stored_as_scd_type": scd}, "t")
    apply = change_applier(uri, spec, "app", ["id", "city", "op", "seq"],
                           definition=TableDefinition(properties={"delta.enableChangeDataFeed": "true"}))
    batches = [[(i, "Oslo", "c", 1) for i in range(200)],
               [(3, "Rome", "u", 2), (4, None, "d", 2), (500, "Lima", "c", 2), (3, "Nice", "u", 3)],
               [(5, "Pune", "u", 4), (3, "Kyiv", "u", 1), (6, None, "d", 5)]]
    for batch_id, rows in enumerate(batches):
        apply(spark.createDataFrame(rows, "id bigint, city string, op string, seq bigint"), batch_id)
    assert same_at_every_version(spark, uri) == 2
    columns = ["id", "city", "_change_type", "_commit_version"]
    theirs = spark.sql(f"select * from table_changes_by_path('{uri}', 1)")
    got = rows_of([r.asDict() for r in theirs.collect()], columns)
    assert got == rows_of([r.asDict() for r in changes_dataframe(spark, uri, 1).collect()], columns)
    kinds = {r[2] for r in got}
    assert kinds == ({"insert", "update_preimage", "update_postimage", "delete"} if scd == 1 else
                     {"insert", "delete"} | ({"update_preimage", "update_postimage"} & kinds))


def test_a_type_widened_table_and_delta_spark_writing_on(spark, tmp_path):
    """Columns widened by a schema change (int -> bigint, float -> double, date -> timestamp_ntz, decimal
    precision up; the older files keep the narrow types): delta-spark reads every version and appends on
    with values only the wide types hold, which we read. (delta-rs 1.x does not read typeWidening yet.)"""
    from deltalog.schema_evolution import schema_change

    uri = str(tmp_path / "widened")
    ops.write_dataframe(source(spark, "select cast(id as int) as id, cast(id as float) as f, "
                                      "date'2024-01-01' as d, cast(1.5 as decimal(5,2)) as m from range(3)"), uri)
    wide = source(spark, "select id, cast(id as double) as f, timestamp_ntz'2024-02-01 10:00:00' as d, "
                         "cast(2.125 as decimal(8,3)) as m from range(3, 5)")
    change = schema_change("t", Snapshot.load(uri).schema_json, wide.schema.jsonValue(), "append_new_columns")
    ops.write_dataframe(wide, uri, mode="append", table_schema=change.schema)
    assert same_at_every_version(spark, uri, delta_rs=False) == 1
    spark.sql(f"insert into delta.`{uri}` values (3000000000, 1e300, timestamp_ntz'2030-01-01 00:00:00', 12345.678)")
    got = {r["id"]: r for r in read_table(Snapshot.load(uri)).to_pylist()}
    assert got[3000000000]["f"] == 1e300 and str(got[4]["m"]) == "2.125" and str(got[0]["m"]) == "1.500"
    assert our_rows(uri) == delta_spark_rows(spark, uri)
