import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from deltalog.paths import (
    HIVE_DEFAULT_PARTITION, decode_path, encode_path, escape_path_name, new_data_file_path,
    parse_partition_folder, parse_partition_value, partition_folder, serialize_partition_value,
)
from deltalog.schema import partition_column_types

from tests.support.shared_data import GOLDEN, require

UTC = dt.timezone.utc


@pytest.mark.parametrize("value,delta_type,expected", [
    (None, "long", None),
    (None, "string", None),
    ("", "string", None),  # Spark writes an empty partition string as null
    (0, "integer", "0"),
    (-12, "byte", "-12"),
    (2 ** 62, "long", str(2 ** 62)),
    (True, "boolean", "true"),
    (False, "boolean", "false"),
    (0.0, "double", "0.0"),
    (1.5, "double", "1.5"),
    (1e20, "double", "1.0E20"),
    (1e-5, "double", "1.0E-5"),
    (1e7, "double", "1.0E7"),
    (123.25, "double", "123.25"),
    (float("nan"), "double", "NaN"),
    (float("-inf"), "double", "-Infinity"),
    (0.1, "float", "0.1"),
    (Decimal("1.5"), "decimal(10,2)", "1.50"),
    (Decimal("-0.001"), "decimal(5,3)", "-0.001"),
    (Decimal("12345678901234567890.123456789"), "decimal(38,9)", "12345678901234567890.123456789"),
    (3, "decimal(4,0)", "3"),
    (dt.date(2021, 9, 8), "date", "2021-09-08"),
    (dt.datetime(2021, 9, 8, 11, 11, 11), "timestamp_ntz", "2021-09-08 11:11:11"),
    (dt.datetime(2021, 9, 8, 11, 11, 11, 123456), "timestamp_ntz", "2021-09-08 11:11:11.123456"),
    (dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC), "timestamp", "2021-09-08 11:11:11"),
    (dt.datetime(2021, 9, 8, 13, 11, 11, 500, tzinfo=dt.timezone(dt.timedelta(hours=2))), "timestamp",
     "2021-09-08 11:11:11.000500"),
    ("a/b=c%d", "string", "a/b=c%d"),
])
def test_serialize_partition_value(value, delta_type, expected):
    assert serialize_partition_value(value, delta_type) == expected


@pytest.mark.parametrize("text,delta_type,expected", [
    ("12", "integer", 12),
    ("true", "boolean", True),
    ("1.0E20", "double", 1e20),
    ("NaN", "double", None),  # checked below
    ("1.50", "decimal(10,2)", Decimal("1.50")),
    ("2021-09-08", "date", dt.date(2021, 9, 8)),
    ("2021-09-08 11:11:11", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)),
    ("2024-01-01T10:00:00.000000Z", "timestamp", dt.datetime(2024, 1, 1, 10, tzinfo=UTC)),
    ("2024-01-01T12:00:00.5+02:00", "timestamp", dt.datetime(2024, 1, 1, 10, 0, 0, 500000, tzinfo=UTC)),
    ("2013-07-05 17:01:00.123456", "timestamp_ntz", dt.datetime(2013, 7, 5, 17, 1, 0, 123456)),
    ("", "long", None),
    ("", "string", None),  # the protocol: an empty string is a null partition value, for every type
    ("", "date", None),
])
def test_parse_partition_value(text, delta_type, expected):
    got = parse_partition_value(text, delta_type)
    if text == "NaN":
        assert got != got
    else:
        assert got == expected


def test_parse_rejects_garbage_with_clear_message():
    with pytest.raises(Exception, match="'abc' is not a valid integer"):
        parse_partition_value("abc", "integer")
    with pytest.raises(Exception, match="not a valid boolean"):
        parse_partition_value("yes", "boolean")


def test_hive_escaping():
    assert escape_path_name("a b") == "a b"
    assert escape_path_name('"#%\'*/:=?\\{[]^\x7f\x01') == "%22%23%25%27%2A%2F%3A%3D%3F%5C%7B%5B%5D%5E%7F%01"
    assert escape_path_name("ünï}") == "ünï}"
    assert partition_folder(["d", "s"], ["2021-01-01", None]) == f"d=2021-01-01/s={HIVE_DEFAULT_PARTITION}"
    assert partition_folder(["a=b"], {"a=b": "x/y"}) == "a%3Db=x%2Fy"
    assert partition_folder([], []) == ""


def test_encode_decode_path():
    rel = "ts=2021-09-08 11%3A11%3A11/part-0.parquet"
    assert encode_path(rel) == "ts=2021-09-08%2011%253A11%253A11/part-0.parquet"
    assert decode_path(encode_path(rel)) == rel
    assert decode_path("_2=bar+%252521/x") == "_2=bar+%2521/x"  # '+' is not a space
    assert encode_path("special p@#h") == "special%20p@%23h"
    assert encode_path("a<b>|`}") == "a%3Cb%3E%7C%60%7D"


def test_partition_folder_round_trip():
    values = {"a": "x/y z", "b": None, "c": "%41"}
    folder = partition_folder(["a", "b", "c"], values)
    assert parse_partition_folder(folder + "/part-0.parquet") == values


def test_new_data_file_path():
    p = new_data_file_path("d=2021-01-01")
    assert re.fullmatch(r"d=2021-01-01/part-00000-[0-9a-f-]{36}\.c000\.snappy\.parquet", p)
    assert new_data_file_path() != new_data_file_path()
    assert "/" not in new_data_file_path("")


def _golden_adds(table: str):
    log = GOLDEN / table / "_delta_log"
    schema, partitions, adds = None, [], []
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "metaData" in action:
                schema = json.loads(action["metaData"]["schemaString"])
                partitions = action["metaData"]["partitionColumns"]
            if "add" in action:
                adds.append(action["add"])
    return schema, partitions, adds


@pytest.mark.usefixtures("golden")
@pytest.mark.parametrize("table", ["data-reader-partition-values", "data-reader-escaped-chars",
                                   "data-reader-timestamp_ntz", "kernel-timestamp-partition-col-ISO8601"])
def test_golden_partition_paths(table):
    schema, partitions, adds = _golden_adds(table)
    types = partition_column_types(schema, partitions)
    assert adds
    for add in adds:
        relative = decode_path(add["path"])
        # The file is really there under the decoded path, and we would encode it the same way.
        assert (GOLDEN / table / relative).exists(), relative
        assert encode_path(relative) == add["path"]
        folder = relative.rsplit("/", 1)[0]
        values = add["partitionValues"]
        parsed = {c: parse_partition_value(values[c], t) for c, t in types.items()}
        if table == "kernel-timestamp-partition-col-ISO8601":
            # delta-spark wrote ISO values in the log but wall-clock time in the folder.
            assert partition_folder(partitions, [serialize_partition_value(parsed[c], types[c])
                                                 for c in partitions]) == folder
            continue
        assert partition_folder(partitions, [values[c] for c in partitions]) == folder
        for c, t in types.items():
            if values[c] is not None and t != "string":
                assert serialize_partition_value(parsed[c], t) == values[c], (c, values[c])


@pytest.mark.usefixtures("golden")
def test_golden_special_character_paths():
    for table in ("log-replay-special-characters-a", "log-replay-special-characters-b"):
        _, _, adds = _golden_adds(table)
        for add in adds:
            assert encode_path(decode_path(add["path"])) == add["path"]
            assert decode_path(add["path"]) == "special p@#h"


@pytest.mark.parametrize("path", ["../x.parquet", "a/../../x.parquet", "%2E%2E/x.parquet", "/abs.parquet",
                                  "s3://b/x.parquet", 5])
def test_sidecar_paths_that_leave_the_sidecar_folder_are_refused(path):
    from deltalog.checkpoint_read import _sidecar_name

    with pytest.raises(ValueError, match="sidecar path"):
        _sidecar_name(path)
