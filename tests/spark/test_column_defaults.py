"""Column defaults on the Spark data path: a write or a MERGE insert that leaves a column with a default
out stores the default; one that gives the column stores what it gives."""
import pytest

from deltalog.errors import InvalidTableError
from deltalog.spark.operations import merge, write_dataframe
from deltalog.spark.reader import snapshot_dataframe
from deltalog.table import DeltaTable

pytestmark = pytest.mark.spark

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "status", "type": "string", "nullable": True, "metadata": {"CURRENT_DEFAULT": "'new'"}},
    {"name": "qty", "type": "integer", "nullable": False, "metadata": {"CURRENT_DEFAULT": "1 + 1"}}]}


def _rows(spark, uri):
    return sorted(tuple(r) for r in snapshot_dataframe(spark, DeltaTable(uri).snapshot()).collect())


def test_left_out_columns_take_their_defaults(spark, tmp_path):
    uri = str(tmp_path / "d")
    write_dataframe(spark.createDataFrame([(1,)], "id long"), uri, table_schema=SCHEMA)
    assert "allowColumnDefaults" in DeltaTable(uri).snapshot().protocol.writer_features
    write_dataframe(spark.createDataFrame([(2, "old")], "id long, status string"), uri)
    merge(spark, uri, spark.createDataFrame([(3,), (1,)], "id long"), on="s.id = t.id", source_alias="s",
          target_alias="t", when_not_matched_insert="*")
    merge(spark, uri, spark.createDataFrame([(4, 9)], "id long, q int"), on="s.id = t.id", source_alias="s",
          target_alias="t", when_not_matched_insert={"id": "s.id", "qty": "s.q"})
    assert _rows(spark, uri) == [(1, "new", 2), (2, "old", 2), (3, "new", 2), (4, "new", 9)]
    deltalake = pytest.importorskip("deltalake")  # delta-rs reads the table as we do
    assert sorted(tuple(r.values()) for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()) == \
        _rows(spark, uri)


def test_a_default_that_reads_a_column_is_refused_by_name(spark, tmp_path):
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "n", "type": "long", "nullable": True, "metadata": {"CURRENT_DEFAULT": "id * 2"}}]}
    uri = str(tmp_path / "bad")
    with pytest.raises(InvalidTableError) as e:
        write_dataframe(spark.createDataFrame([(1,)], "id long"), uri, table_schema=schema)
    assert "column n" in str(e.value) and "id * 2" in str(e.value)
    assert not DeltaTable(uri).exists()
