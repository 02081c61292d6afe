"""`write_dataframe(table_schema=...)` on a new table, or with schema_mode='overwrite': the table takes
the caller's schema — its columns in its order, its field metadata (identity, generated columns,
defaults: what dbt declares for a model) — and the data may leave some of its columns out; a column
the schema lacks is refused and nothing is written."""
from __future__ import annotations

import pytest

from deltalog import Snapshot
from deltalog.errors import SchemaMismatchError
from deltalog.spark import operations as ops

pytestmark = pytest.mark.spark

DECLARED = {"type": "struct", "fields": [
    {"name": "note", "type": "string", "nullable": True, "metadata": {"comment": "a note"}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    {"name": "n", "type": "long", "nullable": True, "metadata": {}},
]}


def test_a_new_table_takes_the_declared_schema(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a"), (2, "b")], "n long, name string")
    ops.write_dataframe(df, uri, mode="error", table_schema=DECLARED)
    snapshot = Snapshot.load(uri)
    assert [f["name"] for f in snapshot.schema_json["fields"]] == ["note", "name", "n"]
    assert snapshot.schema_json["fields"][0]["metadata"] == {"comment": "a note"}
    from deltalog.spark.reader import snapshot_dataframe

    got = sorted((r.n, r.name, r.note) for r in snapshot_dataframe(spark, snapshot).collect())
    assert got == [(1, "a", None), (2, "b", None)]


def test_an_overwrite_replacing_the_schema_takes_it_too(spark, tmp_path):
    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.createDataFrame([(1,)], "n long"), uri, mode="error")
    df = spark.createDataFrame([(3, "c")], "n long, name string")
    ops.write_dataframe(df, uri, mode="overwrite", schema_mode="overwrite", table_schema=DECLARED)
    assert [f["name"] for f in Snapshot.load(uri).schema_json["fields"]] == ["note", "name", "n"]


def test_a_column_the_declared_schema_lacks_is_refused(spark, tmp_path):
    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a", 1.5)], "n long, name string, extra double")
    with pytest.raises(SchemaMismatchError, match="column 'extra'"):
        ops.write_dataframe(df, uri, mode="error", table_schema=DECLARED)
    assert not (tmp_path / "t" / "_delta_log").exists() or not list((tmp_path / "t" / "_delta_log").glob("*.json"))
