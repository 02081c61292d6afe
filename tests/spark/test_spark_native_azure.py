"""Spark's own Parquet writer and reader on Azure Blob storage through Hadoop's ABFS connector
(hadoop-azure matching pyspark's Hadoop, from Maven: tests/support/maven.py), against Azurite on 127.0.0.1.

Azurite serves the Blob API only, not the Data Lake (dfs) API of accounts with a hierarchical namespace.
Hadoop 3.5's ABFS speaks the Blob API to accounts without one (`fs.azure.fns.account.service.type=BLOB`,
set with the other endpoint settings by deltalog/spark/hadoop.py when the storage options name an
endpoint), so a warehouse `abfs://<container>@<account>.dfs.core.windows.net/…` is written by Spark's
executors and read by Spark's Parquet scans here. (WASB, Hadoop's older Blob driver, is removed in
Hadoop 3.5: its class only raises, saying to use ABFS.)

The connector must be on the class path when the JVM starts: the tests run in a pytest process of
their own (`test_in_a_session_with_abfs`)."""
from __future__ import annotations


import pytest

from tests.support.azurite import azurite_binary
from tests.support.maven import MavenUnavailable, in_ci, jars
from tests.support.own_process import in_own_process, run_file_in_own_process

pytestmark = pytest.mark.spark
OWN_PROCESS = "DELTALOG_TEST_ABFS_PROCESS"


if not in_own_process(OWN_PROCESS):

    def test_in_a_session_with_abfs():
        try:
            jars("hadoop-azure")
        except MavenUnavailable as exc:
            if in_ci():
                pytest.fail(str(exc))
            pytest.skip(str(exc))
        if azurite_binary() is None:
            reason = "Azurite is not installed (npm install --prefix .ci-cache/azurite azurite@3.35.0)"
            if in_ci():
                pytest.fail(reason)
            pytest.skip(reason)
        run_file_in_own_process(__file__, OWN_PROCESS, timeout=1200)

else:
    import deltalake
    import pyarrow as pa
    from deltalake import QueryBuilder

    from deltalog.storage import files as filesystem
    from deltalog.snapshot import Snapshot
    from deltalog.spark import hadoop
    from deltalog.spark import operations as ops
    from deltalog.spark.reader import snapshot_dataframe
    from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, azurite

    @pytest.fixture(scope="module")
    def az():
        with azurite() as server:
            yield server

    @pytest.fixture(scope="module")
    def warehouse(az):
        uri = f"abfs://{az.container}@{ACCOUNT}.dfs.core.windows.net/wh"
        filesystem.configure(uri, az.storage_options())
        try:
            yield uri
        finally:
            filesystem.configure(uri, None)

    @pytest.fixture(scope="module")
    def spark(warehouse):
        from dbt.adapters.deltalog.runtime.session import get_spark

        return get_spark("local[2]", {"spark.jars": ",".join(jars("hadoop-azure")),
                                      "spark.sql.shuffle.partitions": "2"})

    def _spark_ids(spark, uri, version=None):
        df = snapshot_dataframe(spark, Snapshot.load(uri, version=version))
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "FileScan parquet" in plan and "abfs://" in plan and "PythonDataSource" not in plan, plan[:800]
        return sorted(r.id for r in df.select("id").collect())

    def _delta_rs_ids(az, uri, version):
        table = deltalake.DeltaTable(uri, version=version, storage_options=az.storage_options())
        t = pa.table(QueryBuilder().register("t", table).execute("select id from t").read_all())
        return sorted(t.column("id").to_pylist())

    def test_spark_writes_and_reads_through_abfs_as_delta_rs_reads(spark, az, warehouse):
        uri = f"{warehouse}/events"
        served, why = hadoop.native_io(spark, uri)
        assert served, why
        assert "AzureBlobFileSystem" in why
        ops.write_dataframe(spark.sql("select id, id % 3 as k from range(300)"), uri, mode="overwrite",
                            partition_by=["k"], configuration={"delta.enableDeletionVectors": "true"})
        ops.write_dataframe(spark.sql("select id, id % 3 as k from range(300, 330)"), uri, mode="append")
        ops.delete(spark, uri, "id % 7 = 0")  # deletion vectors, written beside the data
        ops.merge(spark, uri, spark.sql("select id, 9 as k from range(0, 400, 50)"), "s.id = t.id",
                  when_matched_update={"k": "s.k"}, when_not_matched_insert="*", source_alias="s", target_alias="t")
        last = Snapshot.load(uri).version
        assert last == 3
        for version in range(last + 1):
            assert _spark_ids(spark, uri, version) == _delta_rs_ids(az, uri, version), version
        assert len(_spark_ids(spark, uri)) == 330 - len([i for i in range(330) if i % 7 == 0]) + len(
            [i for i in range(0, 400, 50) if i >= 330 or i % 7 == 0])
        # the executors wrote each data file at its final key: nothing staged or renamed beside the table
        keys = [i.path for i in filesystem.list_files(uri) if i.is_file]
        assert not [k for k in keys if "_temporary" in k or "_delta_staging" in k or k.endswith("_SUCCESS")]
        assert any(k.endswith(".bin") for k in keys)  # the deletion vectors

    def test_the_account_key_stays_out_of_the_settings_shown(spark, warehouse, az):
        settings = hadoop.hadoop_settings(warehouse, az.storage_options())
        assert settings["fs.azure.fns.account.service.type"] == "BLOB"
        assert settings[f"fs.azure.account.key.{ACCOUNT}.dfs.core.windows.net"] == ACCOUNT_KEY
        served, why = hadoop.native_io(spark, warehouse)
        assert ACCOUNT_KEY not in why
