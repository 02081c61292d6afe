"""Generated columns and column defaults in the engine: the declaration read from the schema, refused by
name when it cannot be honoured, the protocol features a schema needs, and the partition filters a
filter on a generated partition column's source implies."""
import datetime as dt
import json

import pytest

from deltalog import column_defaults, generated_columns
from deltalog.actions import Metadata, Protocol
from deltalog.errors import InvalidTableError
from deltalog.expressions import ALWAYS, Compare, parse_sql_predicate
from deltalog.table_configuration import TableConfiguration


def _schema(*fields):
    return {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": m} for n, t, m in fields]}


def _generated(expression):
    return {generated_columns.GENERATION_EXPRESSION_KEY: expression}


EVENTS = _schema(("id", "long", {}), ("event_ts", "timestamp", {}),
                 ("status", "string", {column_defaults.DEFAULT_KEY: "'new'"}),
                 ("event_date", "date", _generated("CAST(event_ts AS DATE)")))


def test_declarations_are_read_from_field_metadata():
    assert generated_columns.generated_columns(EVENTS) == [
        generated_columns.GeneratedColumn("event_date", "CAST(event_ts AS DATE)", "date")]
    assert column_defaults.column_defaults(EVENTS) == [column_defaults.ColumnDefault("status", "'new'", "string")]


def test_a_schema_that_declares_them_gets_the_writer_features():
    metadata = Metadata(schema_string=json.dumps(EVENTS), partition_columns=["event_date"])
    protocol = TableConfiguration(metadata).required_protocol()
    assert protocol.min_writer_version == 7
    assert {"generatedColumns", "allowColumnDefaults"} <= set(protocol.writer_features)
    assert protocol.unsupported_writer_features(metadata) == []
    # a legacy writer-4 table (delta-spark's generated columns before table features) is writable too
    assert Protocol(1, 4).unsupported_writer_features(metadata) == []


@pytest.mark.parametrize("expression, words", [
    ("cast(missing_ts as date)", ["event_date", "missing_ts", "does not have"]),
    ("cast(event_date as string)", ["event_date", "itself"]),
    ("date_add(current_date(), 1)", ["event_date", "not deterministic", "CURRENT_DATE"]),
    ("cast(event_ts as date) + cast(rand() * 3 as int)", ["not deterministic", "RAND"]),
    ("sum(id)", ["not deterministic"]),
    ("cast(event_ts as", ["not a SQL expression"]),
])
def test_bad_generation_expressions_are_refused_by_name(expression, words):
    schema = _schema(("id", "long", {}), ("event_ts", "timestamp", {}),
                     ("event_date", "date", _generated(expression)))
    with pytest.raises(InvalidTableError) as e:
        TableConfiguration(Metadata(schema_string=json.dumps(schema))).validate_properties("db.events")
    assert "db.events" in str(e.value)
    for word in words:
        assert word.lower() in str(e.value).lower()


def test_a_generated_column_cannot_read_another():
    schema = _schema(("event_ts", "timestamp", {}), ("d", "date", _generated("cast(event_ts as date)")),
                     ("y", "int", _generated("year(d)")))
    with pytest.raises(InvalidTableError, match="reads generated column d"):
        generated_columns.validate(schema, "t")


@pytest.mark.parametrize("default, words", [
    ("id + 1", ["status", "reads column", "id"]),
    ("", ["empty"]),
])
def test_bad_defaults_are_refused_by_name(default, words):
    schema = _schema(("id", "long", {}), ("status", "string", {column_defaults.DEFAULT_KEY: default}))
    with pytest.raises(InvalidTableError) as e:
        column_defaults.validate(schema, "db.t")
    for word in words:
        assert word in str(e.value)


def test_default_and_generation_on_one_column_is_refused():
    schema = _schema(("a", "long", {}), ("b", "long", {**_generated("a + 1"), column_defaults.DEFAULT_KEY: "0"}))
    with pytest.raises(InvalidTableError, match="both a default and a generation expression"):
        column_defaults.validate(schema, "t")


def _derived(schema, parts, sql):
    return generated_columns.derived_partition_filter(parse_sql_predicate(sql), schema, parts)


def _text(expr):
    """The predicate's SQL without quoting and literal type keywords."""
    import re
    return re.sub(r"\b(DATE|TIMESTAMP|TIMESTAMP_NTZ) '", "'", expr.to_sql().replace("`", ""))


def test_a_filter_on_a_timestamp_narrows_its_generated_date_partitions():
    # zoned timestamp: cut into dates in the writer's zone, so the bound is widened by 14 hours
    d = _derived(EVENTS, ["event_date"], "event_ts >= '2024-01-05 20:00:00' and id = 3")
    assert _text(d) == "event_date >= '2024-01-05'"
    d = _derived(EVENTS, ["event_date"], "event_ts < '2024-01-05 12:00:00'")
    assert _text(d) == "event_date <= '2024-01-06'"
    ntz = _schema(("ts", "timestamp_ntz", {}), ("d", "date", _generated("to_date(ts)")))
    assert _text(_derived(ntz, ["d"], "ts = '2024-01-05 12:00:00'")) == "d = '2024-01-05'"
    # a filter on other columns, or a disjunction with one, implies nothing
    assert _derived(EVENTS, ["event_date"], "id > 3") is ALWAYS
    assert _derived(EVENTS, ["event_date"], "event_ts > '2024-01-01' or id = 3") is ALWAYS
    # not a partition column: nothing to prune
    assert _derived(EVENTS, [], "event_ts > '2024-01-01'") is ALWAYS


@pytest.mark.parametrize("expression, ptype, sql, want", [
    ("year(ts)", "int", "ts >= '2023-06-01'", "y >= 2023"),
    ("date_trunc('MONTH', ts)", "timestamp_ntz", "ts <= '2024-03-10'", "y <= '2024-03-01T00:00:00'"),
    ("trunc(ts, 'MM')", "date", "ts > '2024-03-10'", "y >= '2024-03-01'"),
    ("date_format(ts, 'yyyy-MM')", "string", "ts < '2024-03-10'", "y <= '2024-03'"),
    ("month(ts)", "int", "ts = '2024-03-10'", "y = 3"),
    ("month(ts)", "int", "ts > '2024-03-10'", None),  # month does not keep order: ranges imply nothing
])
def test_order_keeping_expressions_carry_ranges(expression, ptype, sql, want):
    schema = _schema(("ts", "timestamp_ntz", {}), ("y", ptype, _generated(expression)))
    d = _derived(schema, ["y"], sql)
    if want is None:
        assert d is ALWAYS
    else:
        assert _text(d).replace(" 00:00:00", "T00:00:00") == want


def test_a_writer_that_cannot_evaluate_sql_may_not_add_rows(tmp_path):
    from deltalog.actions import AddFile
    from deltalog.errors import UnsupportedFeatureError
    from deltalog.table import DeltaTable

    table = DeltaTable(str(tmp_path / "t"))
    txn = table.transaction()
    txn.update_metadata(Metadata(schema_string=json.dumps(EVENTS)))
    txn.add_actions([AddFile(path="part-0.parquet", partition_values={}, size=1, modification_time=0)])
    with pytest.raises(UnsupportedFeatureError, match="generated column event_date = CAST"):
        txn.commit(operation="WRITE")
    assert not table.exists()


def test_an_instant_cut_in_the_writers_zone_is_bounded_for_every_zone():
    """date_trunc('DAY', ts) on a zoned timestamp is the writer's local midnight: in UTC+5 the row at
    2024-01-05 15:00 UTC has the partition value 2024-01-04 19:00 UTC, which the derived bound keeps."""
    schema = _schema(("ts", "timestamp", {}), ("day", "timestamp", _generated("date_trunc('DAY', ts)")))
    d = _derived(schema, ["day"], "ts >= '2024-01-05 15:00:00'")
    assert isinstance(d, Compare) and d.op == ">="
    assert d.value <= dt.datetime(2024, 1, 4, 19, tzinfo=dt.timezone.utc)
    d = _derived(schema, ["day"], "ts <= '2024-01-05 02:00:00'")
    # in UTC-12 that row is 2024-01-04 14:00 local, its partition 2024-01-04 12:00 UTC; in UTC+14 its
    # partition is 2024-01-05 10:00 UTC: both within the bound
    assert d.value >= dt.datetime(2024, 1, 5, 10, tzinfo=dt.timezone.utc)
