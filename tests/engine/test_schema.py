import json
from pathlib import Path

import pyarrow as pa
import pytest

from deltalog.errors import SchemaMismatchError, UnsupportedFeatureError
from deltalog.schema import (
    check_column_names, from_arrow_schema, leaf_columns, parse_schema_string, partition_column_types,
    schema_string, to_arrow_schema,
)

from tests.support.shared_data import GOLDEN, require

ALL_TYPES = {
    "type": "struct",
    "fields": [
        {"name": "s", "type": "string", "nullable": True, "metadata": {"comment": "a string"}},
        {"name": "l", "type": "long", "nullable": False, "metadata": {}},
        {"name": "i", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "sh", "type": "short", "nullable": True, "metadata": {}},
        {"name": "by", "type": "byte", "nullable": True, "metadata": {}},
        {"name": "f", "type": "float", "nullable": True, "metadata": {}},
        {"name": "d", "type": "double", "nullable": True, "metadata": {}},
        {"name": "dec", "type": "decimal(38,18)", "nullable": True, "metadata": {}},
        {"name": "b", "type": "boolean", "nullable": True, "metadata": {}},
        {"name": "bin", "type": "binary", "nullable": True, "metadata": {}},
        {"name": "dt", "type": "date", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "tsn", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
        {"name": "st", "type": {"type": "struct", "fields": [
            {"name": "a", "type": "integer", "nullable": False, "metadata": {"x": 1, "y": [1, "z"]}},
        ]}, "nullable": True, "metadata": {}},
        {"name": "arr", "type": {"type": "array", "elementType": "string", "containsNull": False},
         "nullable": True, "metadata": {}},
        {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": {
            "type": "array", "elementType": "long", "containsNull": True}, "valueContainsNull": True},
         "nullable": True, "metadata": {}},
    ],
}


def test_all_types_map_to_arrow():
    schema = to_arrow_schema(ALL_TYPES)
    assert schema.field("s").type == pa.string()
    assert schema.field("l").type == pa.int64() and not schema.field("l").nullable
    assert schema.field("i").type == pa.int32()
    assert schema.field("sh").type == pa.int16()
    assert schema.field("by").type == pa.int8()
    assert schema.field("f").type == pa.float32()
    assert schema.field("d").type == pa.float64()
    assert schema.field("dec").type == pa.decimal128(38, 18)
    assert schema.field("b").type == pa.bool_()
    assert schema.field("bin").type == pa.binary()
    assert schema.field("dt").type == pa.date32()
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("tsn").type == pa.timestamp("us")
    assert schema.field("st").type.field("a").type == pa.int32()
    assert not schema.field("arr").type.value_field.nullable
    m = schema.field("m").type
    assert pa.types.is_map(m) and m.key_type == pa.string() and pa.types.is_list(m.item_type)


def test_round_trip_keeps_types_nullability_and_metadata():
    back = from_arrow_schema(to_arrow_schema(ALL_TYPES))
    assert back == ALL_TYPES
    assert json.loads(schema_string(back)) == ALL_TYPES
    assert " " not in schema_string(back).replace("a string", "")


def test_schema_string_accepted():
    text = schema_string(ALL_TYPES)
    assert to_arrow_schema(text) == to_arrow_schema(ALL_TYPES)
    assert parse_schema_string(text) == ALL_TYPES


def test_arrow_types_without_delta_twin_widen():
    schema = pa.schema([("a", pa.large_string()), ("b", pa.uint16()), ("c", pa.timestamp("ns", tz="Europe/Paris")),
                        ("d", pa.large_list(pa.int8())), ("e", pa.dictionary(pa.int32(), pa.string())),
                        ("f", pa.date64())])
    out = from_arrow_schema(schema)
    assert [f["type"] for f in out["fields"][:3]] == ["string", "integer", "timestamp"]
    assert out["fields"][3]["type"] == {"type": "array", "elementType": "byte", "containsNull": True}
    assert out["fields"][4]["type"] == "string" and out["fields"][5]["type"] == "date"


def test_null_type_is_refused_with_column_name():
    with pytest.raises(SchemaMismatchError, match="'?empty_col'?.*cast"):
        from_arrow_schema(pa.schema([("empty_col", pa.null())]))


def test_unknown_type_refused():
    with pytest.raises(UnsupportedFeatureError, match="g.*geometry"):
        to_arrow_schema({"type": "struct", "fields": [{"name": "g", "type": "geometry(OGC:CRS84)", "nullable": True}]})


def test_variant_is_its_two_binaries():
    schema = to_arrow_schema({"type": "struct", "fields": [{"name": "v", "type": "variant", "nullable": True}]})
    assert schema.field("v").type == pa.struct([pa.field("metadata", pa.binary(), nullable=False),
                                                pa.field("value", pa.binary(), nullable=False)])


def test_column_names_unique_ignoring_case():
    with pytest.raises(SchemaMismatchError, match="'Id' and 'ID'"):
        from_arrow_schema(pa.schema([("Id", pa.int64()), ("ID", pa.int64())]))
    nested = {"type": "struct", "fields": [{"name": "s", "type": {"type": "struct", "fields": [
        {"name": "a", "type": "long"}, {"name": "A", "type": "long"}]}}]}
    with pytest.raises(SchemaMismatchError, match="s.a"):
        check_column_names(nested, "db.t")
    check_column_names(ALL_TYPES)


def test_leaf_columns_descend_structs_only():
    leaves = [p for p, _ in leaf_columns(ALL_TYPES)]
    assert ("st", "a") in leaves and ("arr",) in leaves and ("m",) in leaves
    assert len(leaves) == 16


def test_partition_column_types():
    assert partition_column_types(ALL_TYPES, ["dt", "S"]) == {"dt": "date", "S": "string"}
    with pytest.raises(SchemaMismatchError, match="no column 'nope'"):
        partition_column_types(ALL_TYPES, ["nope"])


@pytest.mark.usefixtures("golden")
@pytest.mark.parametrize("table", ["data-reader-primitives", "data-reader-nested-struct", "data-reader-map",
                                   "data-reader-array-complex-objects", "data-reader-partition-values",
                                   "data-reader-timestamp_ntz", "decimal-various-scale-precision"])
def test_golden_schemas_round_trip(table):
    for commit in sorted((GOLDEN / table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
                assert from_arrow_schema(to_arrow_schema(schema)) == schema
                return
    pytest.fail("no metaData found")
