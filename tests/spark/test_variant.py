"""Variant columns (features `variantType`, `variantType-preview`): tables other engines wrote read in
Spark as VARIANT and in pyarrow as the (metadata, value) binaries delta-rs gives; a model that selects a
variant writes a table every reader takes (unshredded, the feature in the protocol, no stats for it)."""
from __future__ import annotations

import json

import deltalake
import pyarrow.parquet as pq
import pytest

from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.spark.operations import write_dataframe
from deltalog.spark.reader import snapshot_dataframe
from tests.support.shared_data import WILD, require

pytestmark = pytest.mark.spark


def _json_of(df, column: str) -> dict:
    return {r["id"]: r["j"] for r in df.selectExpr("id", f"to_json({column}) AS j").collect()}


def test_variant_tables_of_other_writers_read_in_spark(spark):
    uri = str(require(WILD / "deltars/spark-variant-checkpoint"))
    snap = Snapshot.load(uri)
    df = snapshot_dataframe(spark, snap)
    assert df.schema["v"].dataType.typeName() == "variant"
    assert df.count() == deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 102
    values = _json_of(df, "v")
    assert all(values[i] == json.dumps({"key": i}, separators=(",", ":")) for i in range(100)), values
    assert _json_of(df, "struct_of_variants.v") == values


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_a_variant_column_round_trips(spark, tmp_path, method):
    uri = str(tmp_path / "events")
    df = spark.sql("""SELECT id, parse_json('{"n":' || id || ',"tags":["a","b"]}') AS payload,
                             named_struct('inner', parse_json(CAST(id AS STRING))) AS nested
                      FROM range(6)""")
    write_dataframe(df, uri, mode="overwrite", method=method)
    write_dataframe(df.where("id < 2"), uri, mode="append", method=method)

    snap = Snapshot.load(uri)
    assert "variantType" in snap.protocol.reader_features and "variantType" in snap.protocol.writer_features
    for text in snap.files.column("stats").to_pylist():
        stats = json.loads(text)
        assert "payload" not in stats["nullCount"] and "nested" not in stats["nullCount"], stats
    for path in snap.file_uris():  # unshredded: readers without variantShredding can read it
        assert "typed_value" not in str(pq.ParquetFile(path).schema)

    back = snapshot_dataframe(spark, snap)
    assert back.schema["payload"].dataType.typeName() == "variant"
    assert sorted(back.selectExpr("id", "to_json(payload)", "to_json(nested.inner)").collect()) == sorted(
        df.union(df.where("id < 2")).selectExpr("id", "to_json(payload)", "to_json(nested.inner)").collect())
    assert back.where("variant_get(payload, '$.n', 'int') >= 4").count() == 2

    theirs = deltalake.DeltaTable(uri).to_pyarrow_table()
    ours = read_table(snap)
    key = lambda r: (r["id"], r["payload"]["value"])  # noqa: E731
    assert sorted(theirs.to_pylist(), key=key) == sorted(ours.select(theirs.column_names).to_pylist(), key=key)
    assert theirs.num_rows == 8
