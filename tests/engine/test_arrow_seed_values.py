"""The values a seed written without Spark takes (dbt/adapters/deltalog/arrow_seeds.py), and those it leaves
to Spark's cast: whatever Spark's load could give differently goes there (its parity with Spark's load is
tested in tests/functional/test_arrow_seeds.py)."""
import datetime as dt
from decimal import Decimal

import pytest

from dbt.adapters.deltalog import arrow_seeds
from dbt.adapters.deltalog.seeds import seed_text


class _Agate:
    def __init__(self, rows):
        self.rows = rows


@pytest.mark.parametrize("kind, value, expected", [
    ("bigint", Decimal("1.0"), 1),
    ("bigint", Decimal("-9223372036854775808"), -2 ** 63),
    ("double", Decimal("0.1"), 0.1),
    ("double", Decimal("1E-7"), 1e-7),
    ("boolean", True, True),
    ("date", dt.date(1582, 10, 4), dt.date(1582, 10, 4)),
    ("timestamp", dt.datetime(2024, 1, 31, 10), dt.datetime(2024, 1, 31, 10, tzinfo=dt.timezone.utc)),
    ("timestamp", dt.datetime(2024, 1, 31, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     dt.datetime(2024, 1, 31, 8, tzinfo=dt.timezone.utc)),
])
def test_values_as_spark_casts_their_text(kind, value, expected):
    table = arrow_seeds.arrow_table(_Agate([(value,), (None,)]), ["c"], [kind])
    assert table.column("c").to_pylist() == [expected, None]


@pytest.mark.parametrize("kind, value", [
    ("bigint", Decimal("1.5")),
    ("bigint", Decimal("9223372036854775808")),
    ("bigint", Decimal("NaN")),
    ("double", Decimal("Infinity")),
    ("date", dt.datetime(2024, 1, 1)),
    ("string", Decimal("1")),
])
def test_values_spark_decides_send_the_seed_there(kind, value):
    with pytest.raises(arrow_seeds.NotHere, match="column c"):
        arrow_seeds.arrow_table(_Agate([(value,)]), ["c"], [kind])


def test_whole_numbers_are_written_without_a_fraction_for_spark_cast_too():
    assert [seed_text(Decimal(v)) for v in ("1.0", "-2.00", "1E+3", "2.50", "-0.0")] == \
        ["1", "-2", "1000", "2.50", "-0"]
