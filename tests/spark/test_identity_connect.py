"""Identity columns over Spark Connect (no RDD API, no JVM in this process): the same numbering, the
mark committed with the rows, and the rebase when another writer won the race."""
import pyarrow as pa
import pytest

from deltalog import identity
from deltalog.snapshot import Snapshot
from deltalog.spark.operations import merge, write_dataframe
from deltalog.write import write_deltalake
from tests.support.spark_connect import require_client, spark_connect_server

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def connect():
    require_client()
    from pyspark.sql import SparkSession

    with spark_connect_server("local[2]", {"spark.sql.shuffle.partitions": "2"}) as url:
        session = SparkSession.builder.remote(url).create()
        yield session
        session.stop()


def test_identity_values_over_spark_connect(connect, tmp_path):
    uri = str(tmp_path / "t")
    declared = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {
            identity.START: 1, identity.STEP: 1, identity.ALLOW_EXPLICIT_INSERT: False}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}}]}
    write_dataframe(connect.range(3).selectExpr("cast(id as string) as v"), uri, mode="error",
                    table_schema=declared)
    write_deltalake(uri, pa.table({"v": ["arrow"]}), mode="append")
    merge(connect, uri, connect.createDataFrame([("9",)], "v string"),
          "DBT_INTERNAL_SOURCE.v = DBT_INTERNAL_DEST.v", when_not_matched_insert="*")
    rows = {r.v: r.id for r in connect.read.parquet(*Snapshot.load(uri).file_uris()).collect()}
    ids = list(rows.values())
    assert set(rows) == {"0", "1", "2", "arrow", "9"} and len(set(ids)) == 5
    assert rows["arrow"] > max(rows[v] for v in "012") and rows["9"] > rows["arrow"]
    assert identity.marks(Snapshot.load(uri).schema_json)["id"] == max(ids)
