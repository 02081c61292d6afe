"""Both writers, the Arrow one (`deltalog.write_deltalake`) and the Spark one
(`deltalog.spark.operations.write_dataframe`), follow one schema rule set (`deltalog.schema_evolution`): the
same table accepts or refuses the same write whichever of them makes it, and a refused write commits
nothing. Each case runs with both writers on a table made alike; delta-rs reads what was accepted.

What the Arrow writer did before the rules were one: it refused integers into a double column (the Spark
writer took them) and added only top-level columns under schema_mode='merge' (the Spark writer added
struct fields at any depth too)."""
from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest

from deltalog import Snapshot, write_deltalake
from deltalog.errors import SchemaMismatchError
from deltalog.spark import operations as ops

pytestmark = pytest.mark.spark

WRITERS = ["arrow", "spark"]

# a table of (id long, amount double, info struct<a: long, b: string>, tags array<struct<k: string>>)
BASE = pa.table({
    "id": pa.array([1], pa.int64()),
    "amount": pa.array([1.5], pa.float64()),
    "info": pa.array([{"a": 1, "b": "x"}], pa.struct([("a", pa.int64()), ("b", pa.string())])),
    "tags": pa.array([[{"k": "t"}]], pa.list_(pa.struct([("k", pa.string())]))),
})


def _write(spark, writer: str, uri: str, data: pa.Table, **kwargs):
    if writer == "arrow":
        return write_deltalake(uri, data, **kwargs)
    return ops.write_dataframe(spark.createDataFrame(data.to_pandas(), schema=_spark_schema(spark, data)), uri,
                               **kwargs)


def _spark_schema(spark, data: pa.Table):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(data.schema)


def _table(spark, writer: str, tmp_path) -> str:
    uri = str(tmp_path / writer)
    write_deltalake(uri, BASE)
    return uri


def _rows(uri: str) -> list[dict]:
    return sorted(deltalake.DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("writer", WRITERS)
def test_narrower_numbers_are_written_exactly(spark, tmp_path, writer):
    uri = _table(spark, writer, tmp_path)
    data = pa.table({"id": pa.array([2], pa.int32()), "amount": pa.array([2**31 - 1], pa.int32())})
    _write(spark, writer, uri, data, mode="append")
    assert [(r["id"], r["amount"]) for r in _rows(uri)] == [(1, 1.5), (2, float(2**31 - 1))]
    assert Snapshot.load(uri).schema_json == Snapshot.load(uri, version=0).schema_json  # the table keeps its types


@pytest.mark.parametrize("writer", WRITERS)
def test_schema_merge_adds_struct_fields_at_any_depth(spark, tmp_path, writer):
    uri = _table(spark, writer, tmp_path)
    data = pa.table({
        "id": pa.array([2], pa.int64()),
        # a new field inside the struct (and the struct's fields in another order), one inside the array's
        # structs, and a new top-level column
        "info": pa.array([{"c": True, "b": "y", "a": 2}],
                         pa.struct([("c", pa.bool_()), ("b", pa.string()), ("a", pa.int64())])),
        "tags": pa.array([[{"k": "u", "w": 7}]], pa.list_(pa.struct([("k", pa.string()), ("w", pa.int64())]))),
        "note": pa.array(["new"]),
    })
    _write(spark, writer, uri, data, mode="append", schema_mode="merge")
    fields = {f["name"]: f["type"] for f in Snapshot.load(uri).schema_json["fields"]}
    assert [f["name"] for f in fields["info"]["fields"]] == ["a", "b", "c"]
    assert [f["name"] for f in fields["tags"]["elementType"]["fields"]] == ["k", "w"]
    assert list(fields) == ["id", "amount", "info", "tags", "note"]
    assert _rows(uri) == [
        {"id": 1, "amount": 1.5, "info": {"a": 1, "b": "x", "c": None}, "tags": [{"k": "t", "w": None}], "note": None},
        {"id": 2, "amount": None, "info": {"a": 2, "b": "y", "c": True}, "tags": [{"k": "u", "w": 7}], "note": "new"},
    ]


@pytest.mark.parametrize("writer", WRITERS)
def test_struct_fields_match_ignoring_case(spark, tmp_path, writer):
    uri = _table(spark, writer, tmp_path)
    data = pa.table({"id": pa.array([2], pa.int64()),
                     "INFO": pa.array([{"A": 2, "B": "y"}], pa.struct([("A", pa.int64()), ("B", pa.string())]))})
    _write(spark, writer, uri, data, mode="append")
    assert _rows(uri)[1]["info"] == {"a": 2, "b": "y"}  # values kept, spelled as the table spells them


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("case", ["another type", "a new column", "a new struct field", "a long into a double",
                                  "evolution changing a type"])
def test_the_same_writes_are_refused_by_both(spark, tmp_path, writer, case):
    uri = _table(spark, writer, tmp_path)
    data, kwargs, named = {
        "another type": (pa.table({"id": pa.array(["x"])}), {}, "'id'"),
        "a new column": (pa.table({"id": pa.array([2], pa.int64()), "surprise": [1.5]}), {}, "'surprise'"),
        "a new struct field": (pa.table({"info": pa.array([{"a": 1, "z": 2}], pa.struct([("a", pa.int64()),
                                                                                          ("z", pa.int64())]))}),
                               {}, "'info'"),
        "a long into a double": (pa.table({"amount": pa.array([2**60], pa.int64())}), {}, "'amount'"),
        "evolution changing a type": (pa.table({"id": pa.array([1.5])}), {"schema_mode": "merge"}, "'id'"),
    }[case]
    with pytest.raises(SchemaMismatchError) as err:
        _write(spark, writer, uri, data, mode="append", **kwargs)
    assert uri.rstrip("/") in str(err.value) and named in str(err.value) and "Nothing was written" in str(err.value)
    assert Snapshot.load(uri).version == 0


@pytest.mark.parametrize("dv", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_merge_assigns_struct_fields_by_name(spark, tmp_path, dv):
    """MERGE's update and insert clauses assign a source struct spelled in another order field by field,
    as Delta's MERGE does; Spark's cast alone would put b's value into a."""
    from deltalog.spark.reader import snapshot_dataframe

    uri = str(tmp_path / "t")
    ops.write_dataframe(spark.sql("select 1L as id, named_struct('a', 'A1', 'b', 'B1') as info union all "
                                  "select 3L, named_struct('a', 'A3', 'b', 'B3')"), uri, mode="overwrite",
                        configuration={"delta.enableDeletionVectors": str(dv).lower()})
    source = spark.sql("select 1L as id, named_struct('b', 'B1x', 'a', 'A1x') as info union all "
                       "select 2L, named_struct('b', 'B2', 'a', 'A2')")
    ops.merge(spark, uri, source, "s.id = t.id", when_matched_update="*", when_not_matched_insert="*",
              source_alias="s", target_alias="t")
    ops.merge(spark, uri, source.where("id = 1"), "s.id = t.id", when_matched_update={"info": "s.info"},
              source_alias="s", target_alias="t")
    rows = sorted((r["id"], r["info"].asDict()) for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect())
    assert rows == [(1, {"a": "A1x", "b": "B1x"}), (2, {"a": "A2", "b": "B2"}), (3, {"a": "A3", "b": "B3"})]


# --- the write request and the table's layout after it: one WritePlan for both writers ------------------

@pytest.mark.parametrize("writer", WRITERS)
def test_partitioning_is_named_ignoring_case_by_both(spark, tmp_path, writer):
    uri = str(tmp_path / writer)
    write_deltalake(uri, BASE.select(["id", "amount"]), partition_by=["id"])
    _write(spark, writer, uri, BASE.select(["id", "amount"]), mode="append", partition_by=["ID"])
    assert len(_rows(uri)) == 2
    with pytest.raises(Exception, match="partitioned by \\['id'\\], not \\['amount'\\]"):
        _write(spark, writer, uri, BASE.select(["id", "amount"]), mode="append", partition_by=["amount"])
    assert Snapshot.load(uri).version == 1  # the refused write committed nothing


@pytest.mark.parametrize("writer", WRITERS)
def test_a_schema_overwrite_keeps_the_table_and_its_properties(spark, tmp_path, writer):
    uri = str(tmp_path / writer)
    write_deltalake(uri, BASE.select(["id", "amount"]), partition_by=["id"],
                    configuration={"delta.appendOnly": "false", "owner": "finance"})
    before = Snapshot.load(uri).metadata
    _write(spark, writer, uri, pa.table({"id": pa.array([7], pa.int64()), "name": ["n"]}), mode="overwrite",
           schema_mode="overwrite", configuration={"team": "ops"})
    after = Snapshot.load(uri).metadata
    assert after.id == before.id  # the same table with a new schema, as delta-spark's overwriteSchema
    assert after.partition_columns == ["id"]  # the data still has the column: the partitioning stays
    assert after.configuration["owner"] == "finance" and after.configuration["team"] == "ops"
    assert [f["name"] for f in after.schema_json["fields"]] == ["id", "name"]
    assert _rows(uri) == [{"id": 7, "name": "n"}]


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "append", "schema_mode": "overwrite"}, "schema_mode='overwrite' needs mode='overwrite'"),
    ({"mode": "upsert"}, "write mode 'upsert' is not one of"),
    ({"mode": "append", "schema_mode": "evolve"}, "schema_mode 'evolve' is not one of"),
])
def test_the_same_requests_are_refused_by_both(spark, tmp_path, writer, kwargs, message):
    uri = _table(spark, writer, tmp_path)
    with pytest.raises(ValueError, match=message):
        _write(spark, writer, uri, BASE, **kwargs)
    assert Snapshot.load(uri).version == 0


def test_a_table_readable_as_iceberg_widens_only_what_iceberg_readers_promote(spark, tmp_path):
    """int -> bigint widens a UniForm table (Iceberg readers promote it); date -> timestamp_ntz is refused
    by name and nothing is committed."""
    from deltalog.errors import InvalidTableError
    from deltalog.schema_evolution import schema_change
    from deltalog.snapshot import Snapshot

    uri = str(tmp_path / "uniform")
    ops.write_dataframe(spark.sql("select cast(id as int) as id, date'2024-01-01' as d from range(3)"), uri,
                        configuration={"delta.universalFormat.enabledFormats": "iceberg",
                                       "delta.enableIcebergCompatV2": "true", "delta.columnMapping.mode": "name"})
    wide_id = spark.sql("select id, date'2024-01-02' as d from range(3, 5)")
    change = schema_change("t", Snapshot.load(uri).schema_json, wide_id.schema.jsonValue(), "append_new_columns")
    assert ops.write_dataframe(wide_id, uri, mode="append", table_schema=change.schema) == 1
    wide_day = spark.sql("select id, timestamp_ntz'2024-01-03 10:00:00' as d from range(5, 6)")
    change = schema_change("t", Snapshot.load(uri).schema_json, wide_day.schema.jsonValue(), "append_new_columns")
    with pytest.raises(InvalidTableError, match=r"readable as Iceberg cannot widen d \(date -> timestamp_ntz\)"):
        ops.write_dataframe(wide_day, uri, mode="append", table_schema=change.schema)
    assert Snapshot.load(uri).version == 1
