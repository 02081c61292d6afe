"""CHECK constraints, invariants and NOT NULL on the Spark data path: tables with constraints written
by delta-rs are written here with them enforced (not refused); tables we give constraints are ones
delta-rs enforces too; every write path (append, overwrite, replace_where, merge, delete) checks the
rows it adds; the pure-Arrow writer, which cannot evaluate SQL, refuses instead."""
import json

import pyarrow as pa
import pytest

from deltalog.actions import Metadata
from deltalog.definition import TableDefinition
from deltalog.errors import InvalidTableError, UnsupportedFeatureError
from deltalog.spark.operations import alter_table, delete, merge, write_dataframe
from deltalog.table import DeltaTable
from deltalog.write import write_deltalake

deltalake = pytest.importorskip("deltalake")
pytestmark = pytest.mark.spark


def _error_text(exc_info) -> str:
    return str(exc_info.value)


def test_delta_rs_constraints_are_enforced_here(spark, tmp_path):
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, pa.table({"id": pa.array([1, 2], pa.int64()), "qty": pa.array([5, 6], pa.int64())}))
    deltalake.DeltaTable(uri).alter.add_constraint({"qty_positive": "qty > 0"})
    before = DeltaTable(uri).version()

    bad = spark.createDataFrame([(3, 7), (4, -1)], "id long, qty long")
    with pytest.raises(Exception) as e:
        write_dataframe(bad, uri, mode="append")
    assert "qty_positive" in str(e.value) and '"id":4' in str(e.value)
    with pytest.raises(Exception, match="qty_positive"):
        merge(spark, uri, bad, on="s.id = t.id", source_alias="s", target_alias="t",
              when_matched_update="*", when_not_matched_insert="*")
    with pytest.raises(Exception, match="qty_positive"):
        write_dataframe(bad, uri, mode="overwrite", replace_where="id >= 3")
    assert DeltaTable(uri).version() == before

    good = spark.createDataFrame([(3, 7)], "id long, qty long")
    write_dataframe(good, uri, mode="append")
    merge(spark, uri, spark.createDataFrame([(1, 50)], "id long, qty long"), on="s.id = t.id",
          source_alias="s", target_alias="t", when_matched_update="*")
    delete(spark, uri, "id = 2")
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "qty": 50}, {"id": 3, "qty": 7}]

    # a writer that cannot evaluate SQL refuses rather than skipping the check
    with pytest.raises(UnsupportedFeatureError, match="qty_positive"):
        write_deltalake(uri, pa.table({"id": pa.array([9], pa.int64()), "qty": pa.array([-9], pa.int64())}),
                        mode="append")


def test_our_constraints_are_ones_delta_rs_enforces(spark, tmp_path):
    uri = str(tmp_path / "t")
    definition = TableDefinition(properties={"delta.constraints.amount_small": "amount < 100"}, not_null=("id",),
                                 description="documented", column_comments={"amount": "cents"})
    df = spark.createDataFrame([(1, 10), (2, 20)], "id long, amount long")
    assert write_dataframe(df, uri, mode="error", definition=definition) == 0
    dt = deltalake.DeltaTable(uri)
    assert dt.metadata().configuration["delta.constraints.amount_small"] == "amount < 100"
    assert dt.metadata().description == "documented"
    fields = {f.name: f for f in dt.schema().fields}
    assert not fields["id"].nullable and fields["amount"].metadata == {"comment": "cents"}
    with pytest.raises(Exception, match="failed validation"):  # delta-rs enforces our constraint
        deltalake.write_deltalake(uri, pa.table({"id": pa.array([3], pa.int64()),
                                                 "amount": pa.array([500], pa.int64())}), mode="append")
    with pytest.raises(Exception, match="NOT NULL"):
        write_dataframe(spark.createDataFrame([(None, 1)], "id long, amount long"), uri, mode="append")
    assert deltalake.DeltaTable(uri).version() == 0


def test_null_violates_a_check_constraint(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(spark.createDataFrame([(1,)], "x long"), uri, mode="error",
                    definition=TableDefinition(properties={"delta.constraints.x_pos": "x > 0"}))
    with pytest.raises(Exception, match="x_pos"):
        write_dataframe(spark.createDataFrame([(None,)], "x long"), uri, mode="append")
    assert DeltaTable(uri).version() == 0


def test_invariants_are_enforced(spark, tmp_path):
    """A legacy column invariant (writer version 2) written by another engine."""
    uri = str(tmp_path / "t")
    write_dataframe(spark.createDataFrame([(1,)], "x long"), uri, mode="error")
    txn = DeltaTable(uri).transaction()
    md = txn.snapshot.metadata
    schema = md.schema_json
    schema["fields"][0]["metadata"] = {"delta.invariants": json.dumps({"expression": {"expression": "x < 10"}})}
    txn.update_metadata(Metadata(id=md.id, schema_string=json.dumps(schema), partition_columns=[],
                                 configuration={}, created_time=md.created_time))
    txn.commit(operation="CHANGE COLUMN")
    with pytest.raises(Exception, match=r"invariant on column x \(x < 10\)"):
        write_dataframe(spark.createDataFrame([(11,)], "x long"), uri, mode="append")
    write_dataframe(spark.createDataFrame([(9,)], "x long"), uri, mode="append")
    assert sorted(r["x"] for r in deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist()) == [1, 9]


def test_adding_a_constraint_checks_existing_rows(spark, tmp_path):
    uri = str(tmp_path / "t")
    write_dataframe(spark.createDataFrame([(1,), (50,)], "x long"), uri, mode="error")
    with pytest.raises(InvalidTableError, match=r'existing row \{"x":50\}'):
        alter_table(spark, uri, TableDefinition(properties={"delta.constraints.small": "x < 10"}))
    with pytest.raises(InvalidTableError, match="NOT NULL on column x"):
        write_dataframe(spark.createDataFrame([(None,)], "x long"), uri, mode="append")
        alter_table(spark, uri, TableDefinition(not_null=("x",)))
    with pytest.raises(InvalidTableError, match=r'existing row \{"x":null\}'):  # NULL violates a CHECK
        alter_table(spark, uri, TableDefinition(properties={"delta.constraints.big": "x < 100"}))
    delete(spark, uri, "x is null")
    assert alter_table(spark, uri, TableDefinition(properties={"delta.constraints.big": "x < 100"},
                                                   owned_prefixes=("delta.constraints.",))) is not None
    ops = [h["operation"] for h in reversed(deltalake.DeltaTable(uri).history())]
    assert ops[-1] == "ADD CONSTRAINT"
    # dropping it again: the definition owns delta.constraints.*
    alter_table(spark, uri, TableDefinition(owned_prefixes=("delta.constraints.",)))
    assert not any(k.startswith("delta.constraints.") for k in deltalake.DeltaTable(uri).metadata().configuration)
    assert [h["operation"] for h in deltalake.DeltaTable(uri).history(1)] == ["DROP CONSTRAINT"]
