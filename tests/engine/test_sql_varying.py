"""Which SQL expressions may give another value each time Spark computes them (deltalog/sql.py): a MERGE
computes those once for the table and its change feed."""
import pytest

from deltalog.sql import varies_between_runs


@pytest.mark.parametrize("text", ["current_timestamp()", "current_timestamp", "now()", "current_date",
                                  "rand()", "random()", "randn(3)", "uuid()", "shuffle(array(1, 2))",
                                  "monotonically_increasing_id() + 1", "coalesce(s.ts, localtimestamp())",
                                  "unix_timestamp()", "case when s.op = 'd' then null else uuid() end",
                                  "not sql at all ((("])
def test_what_varies(text):
    assert varies_between_runs(text)


@pytest.mark.parametrize("text", ["DBT_INTERNAL_SOURCE.v", "s.amount * 2", "'current_timestamp()'",
                                  "upper(s.name)", "cast(s.ts as date)", "null", "s.`current_date`"])
def test_what_does_not(text):
    assert not varies_between_runs(text)
