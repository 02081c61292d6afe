"""Spark's own Parquet writer and reader on S3 (SeaweedFS on 127.0.0.1, started here), in a session that
has Spark's S3A connector (hadoop-aws: tests/support/hadoop_aws.py). Executors write every data file at its final
key through the jar's DirectCommitProtocol (no staging folder, no rename, no listing); the driver reads
the footers of exactly the files the tasks name; reads are Spark's native Parquet scans, with deletion
vectors applied. delta-rs reads every version as we do.

The connector must be on the class path when the JVM starts, and the other tests share one JVM without
it: this file's tests run again in a pytest process of their own (`test_in_a_session_with_s3a`)."""
from __future__ import annotations

import datetime as dt

import pytest

from tests.support.hadoop_aws import WHY_SKIPPED, connector_jars, s3a_spark_conf
from tests.support.own_process import in_own_process, run_file_in_own_process

pytestmark = pytest.mark.spark
OWN_PROCESS = "DELTALOG_TEST_S3A_PROCESS"


if not in_own_process(OWN_PROCESS):

    def test_in_a_session_with_s3a():
        from tests.support.seaweed import WHY_SKIPPED as NO_SEAWEED, weed_binary

        if not connector_jars():
            pytest.skip(WHY_SKIPPED)
        if weed_binary() is None:
            pytest.skip(NO_SEAWEED)
        run_file_in_own_process(__file__, OWN_PROCESS, timeout=1500)

else:
    import deltalake
    import pyarrow as pa
    from deltalake import QueryBuilder

    from deltalog.storage import files as filesystem
    from deltalog.errors import DeltaError
    from deltalog.operations.vacuum import vacuum
    from deltalog.snapshot import Snapshot
    from deltalog.spark import operations as ops
    from deltalog.spark.optimize import optimize
    from deltalog.spark.reader import snapshot_dataframe
    from tests.support.seaweed import seaweedfs

    DVS = {"delta.enableDeletionVectors": "true"}

    @pytest.fixture(scope="module")
    def s3():
        with seaweedfs() as server:
            filesystem.configure(server.uri(), server.storage_options())
            try:
                yield server
            finally:
                filesystem.configure(server.uri(), None)

    @pytest.fixture(scope="module")
    def spark(s3):
        from dbt.adapters.deltalog.runtime.session import get_spark

        return get_spark("local[2]", {"spark.sql.shuffle.partitions": "2",
                                      "spark.sql.execution.arrow.pyspark.enabled": "true", **s3a_spark_conf()})

    def _plan(df) -> str:
        return df._jdf.queryExecution().executedPlan().toString()

    def _utc(value):
        """Timestamps as naive UTC (Spark gives them naive in this process's zone, UTC here)."""
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value

    def _spark_rows(spark, uri, columns, version=None):
        df = snapshot_dataframe(spark, Snapshot.load(uri, version=version))
        assert "FileScan parquet" in _plan(df) and "PythonDataSource" not in _plan(df)
        return sorted((tuple(_utc(r[c]) for c in columns) for r in df.collect()), key=repr)

    def _delta_rs_rows(s3, uri, columns, version=None):
        table = deltalake.DeltaTable(uri, version=version, storage_options=s3.storage_options())
        t = pa.table(QueryBuilder().register("t", table).execute(f"select {', '.join(columns)} from t").read_all())
        return sorted((tuple(_utc(v) for v in row) for row in zip(*(t.column(c).to_pylist() for c in columns))),
                      key=repr)

    def _keys(uri):
        return {i.path for i in filesystem.list_files(uri) if i.is_file}

    def test_files_land_at_their_final_keys_and_are_read_by_spark(spark, s3):
        uri = s3.uri("native", "events")
        names = ["plain", "with space", "a/b", "k=v", "50%", None]
        df = spark.range(600).selectExpr(
            "id", f"element_at(array({', '.join(repr(n) if n else 'NULL' for n in names)}), "
                  f"cast(id % {len(names)} AS int) + 1) AS tag",
            "timestamp'2024-03-01 10:00:00' + make_interval(0, 0, 0, 0, cast(id % 2 AS int)) AS at").repartition(3)
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        try:
            ops.write_dataframe(df, uri, partition_by=["tag", "at"])
        finally:
            spark.conf.set("spark.sql.session.timeZone", "UTC")
        snap = Snapshot.load(uri)
        adds = snap.add_files()
        # exactly the log and the files the commit names: nothing staged, renamed or left beside them
        data_keys = {k for k in _keys(uri) if not k.startswith("_delta_log/")}
        assert data_keys == {_decoded(a.path) for a in adds}
        sizes = {i.path: i.size for i in filesystem.list_files(uri) if i.is_file}
        assert all(sizes[_decoded(a.path)] == a.size for a in adds)
        assert sum(a.num_records for a in adds) == 600
        by_partition = {(dict(a.partition_values)["tag"], dict(a.partition_values)["at"]) for a in adds}
        assert {t for t, _ in by_partition} == set(names)
        # Spark spelled the folders in New York time (05:00); the log holds UTC
        assert {at for _, at in by_partition} == {"2024-03-01 10:00:00", "2024-03-01 11:00:00"}
        columns = ["id", "tag", "at"]
        got = _spark_rows(spark, uri, columns)
        assert len(got) == 600 and got == _delta_rs_rows(s3, uri, columns)
        assert {r[2] for r in got} == {dt.datetime(2024, 3, 1, 10), dt.datetime(2024, 3, 1, 11)}

    def _decoded(path: str) -> str:
        from deltalog.paths import decode_path

        return decode_path(path)

    def test_dml_with_deletion_vectors_optimize_and_vacuum_read_as_delta_rs_reads_them(spark, s3):
        uri = s3.uri("native", "orders")
        columns = ["id", "k", "s"]
        ops.write_dataframe(spark.range(3000).selectExpr("id", "id % 5 AS k", "'a' AS s").repartition(3), uri,
                            partition_by=["k"], configuration=DVS)
        written = {a.path for a in Snapshot.load(uri).add_files()}
        ops.delete(spark, uri, "id % 100 = 7")  # marks rows, rewrites nothing
        assert {a.path for a in Snapshot.load(uri).add_files()} == written
        source = spark.range(0, 6000, 40).selectExpr("id", "id % 5 AS k", "'b' AS s")
        ops.merge(spark, uri, source, "t.id = s.id", when_matched_update="*", when_not_matched_insert="*",
                  source_alias="s", target_alias="t")
        expected = sorted([(i, i % 5, "b" if i % 40 == 0 else "a") for i in range(3000) if i % 100 != 7]
                          + [(i, i % 5, "b") for i in range(3000, 6000, 40)], key=repr)
        assert _spark_rows(spark, uri, columns) == expected
        optimize(spark, uri)
        snap = Snapshot.load(uri)
        assert snap.num_files == 5 and _spark_rows(spark, uri, columns) == expected
        for v in range(snap.version + 1):
            assert _spark_rows(spark, uri, columns, v) == _delta_rs_rows(s3, uri, columns, v), f"version {v}"
        vacuum(uri, retain_hours=0, force=True)
        live = {_decoded(a.path) for a in Snapshot.load(uri).add_files()}
        assert {k for k in _keys(uri) if not k.startswith("_delta_log/")} == live
        assert _delta_rs_rows(s3, uri, columns) == expected

    def test_a_failed_write_commits_nothing_and_leaves_only_files_vacuum_removes(spark, s3):
        uri = s3.uri("native", "strict")
        ops.write_dataframe(spark.range(100), uri, configuration={"delta.constraints.positive": "id >= 0"})
        # one task of three meets a row the CHECK constraint refuses; the others have written their files
        bad = spark.range(300).selectExpr("IF(id = 250, -1, id) AS id").repartition(3)
        with pytest.raises(Exception, match="positive"):
            ops.write_dataframe(bad, uri)
        assert Snapshot.load(uri).version == 0
        assert _delta_rs_rows(s3, uri, ["id"]) == sorted([(i,) for i in range(100)], key=repr)
        vacuum(uri, retain_hours=0, force=True)
        live = {_decoded(a.path) for a in Snapshot.load(uri).add_files()}
        assert {k for k in _keys(uri) if not k.startswith("_delta_log/")} == live

    def test_other_writes_of_the_session_keep_spark_default_commit(spark, s3, tmp_path):
        # after a direct write the session's protocol is the jar's: plain writes must be Spark's own
        ops.write_dataframe(spark.range(10), s3.uri("native", "first"))
        spark.range(10).write.parquet(s3.uri("native", "plain").replace("s3://", "s3a://"))
        assert "_SUCCESS" in _keys(s3.uri("native", "plain"))
        assert spark.read.parquet(s3.uri("native", "plain")).count() == 10
        local = str(tmp_path / "local_table")
        ops.write_dataframe(spark.range(50).selectExpr("id", "id % 2 AS k"), local, partition_by=["k"])
        assert snapshot_dataframe(spark, Snapshot.load(local)).count() == 50
        with pytest.raises(DeltaError):
            Snapshot.load(s3.uri("native", "plain"))
