"""One way to write identifiers and literals (deltalog/sql_text.py): what it writes is read back as the
same value by the predicate parser (sqlglot's Spark dialect) and by Spark itself."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from deltalog.expressions import parse_sql_predicate
from deltalog.sql_text import quote_identifier, sql_literal

VALUES = ["plain", "it's", "back\\slash", "both \\' here", "", 7, -3, 2.5, Decimal("12.340"), True,
          dt.date(2026, 3, 1), dt.datetime(2026, 3, 1, 12, 30, 5, 123456)]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_predicate_parser_reads_back_the_value(value):
    predicate = parse_sql_predicate(f"{quote_identifier('we`ird')} = {sql_literal(value)}")
    assert predicate.column == "we`ird"
    assert predicate.value == value


def test_a_timestamp_with_a_zone_is_written_in_utc():
    zoned = dt.datetime(2026, 3, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert sql_literal(zoned) == "TIMESTAMP '2026-03-01 12:00:00'"


@pytest.mark.spark
def test_spark_reads_back_the_value(spark):
    row = spark.sql("select " + ", ".join(f"{sql_literal(v)} as c{i}" for i, v in enumerate(VALUES))).collect()[0]
    assert list(row) == VALUES
