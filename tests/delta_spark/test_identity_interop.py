"""Identity columns between deltalog and delta-spark: delta-spark reads the identity table we write and
goes on numbering past our high-water mark; we write on after it, past its mark; and the same the other
way round, on a table delta-spark declared (start, step, generated always or by default)."""
from __future__ import annotations

import pyarrow as pa
import pytest

from deltalog import Snapshot, identity
from deltalog.errors import SchemaMismatchError
from deltalog.spark import operations as ops
from deltalog.write import write_deltalake
from tests.delta_spark.test_reads_what_we_write import delta_spark_rows, our_rows

pytestmark = pytest.mark.spark


def mark(uri: str) -> int | None:
    return identity.marks(Snapshot.load(uri).schema_json)["id"]


def ids_of(spark, uri: str, values: list[str]) -> list[int]:
    rows = spark.sql(f"select id, v from delta.`{uri}`").collect()
    return sorted(r.id for r in rows if r.v in values)


def check_consistent(spark, uri: str) -> list[int]:
    """Both read the same rows; ids unique; the mark is the farthest id generated."""
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    ids = [r.id for r in spark.sql(f"select id from delta.`{uri}`").collect()]
    assert len(ids) == len(set(ids)), ids
    return ids


def test_delta_spark_continues_our_identity_table_and_we_continue_after_it(spark, tmp_path):
    uri = str(tmp_path / "ours")
    declared = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {
            identity.START: 10, identity.STEP: 5, identity.ALLOW_EXPLICIT_INSERT: False}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}}]}
    ops.write_dataframe(spark.sql("select * from values ('a'), ('b'), ('c') as t(v)"), uri, mode="error",
                        table_schema=declared)
    assert (ids_of(spark, uri, ["a", "b", "c"]), mark(uri)) == ([10, 15, 20], 20)
    check_consistent(spark, uri)
    # delta-spark numbers its rows past our mark, and moves it
    spark.sql(f"insert into delta.`{uri}` (v) values ('d'), ('e')")
    theirs = ids_of(spark, uri, ["d", "e"])
    assert min(theirs) > 20 and all((i - 10) % 5 == 0 for i in theirs) and mark(uri) == max(theirs)
    check_consistent(spark, uri)
    # we number ours past delta-spark's mark (Spark and Arrow writers)
    ops.write_dataframe(spark.sql("select * from values ('f') as t(v)"), uri, mode="append")
    write_deltalake(uri, pa.table({"v": ["g"]}), mode="append")
    assert ids_of(spark, uri, ["f", "g"]) == [max(theirs) + 5, max(theirs) + 10] and mark(uri) == max(theirs) + 10
    check_consistent(spark, uri)
    # and delta-spark once more, past ours
    spark.sql(f"insert into delta.`{uri}` (v) values ('h')")
    assert ids_of(spark, uri, ["h"]) == [max(theirs) + 15] and mark(uri) == max(theirs) + 15
    check_consistent(spark, uri)


@pytest.mark.parametrize("always", [True, False], ids=["always", "by-default"])
def test_we_continue_a_table_delta_spark_declared(spark, tmp_path, always):
    uri = str(tmp_path / "theirs")
    kind = "always" if always else "by default"
    spark.sql(f"create table delta.`{uri}` (id bigint generated {kind} as identity (start with -1 increment by -2), "
              f"v string) using delta")
    spark.sql(f"insert into delta.`{uri}` (v) values ('a'), ('b')")
    theirs = ids_of(spark, uri, ["a", "b"])
    assert mark(uri) == min(theirs)
    ops.write_dataframe(spark.sql("select * from values ('c'), ('d') as t(v)"), uri, mode="append")
    ours = ids_of(spark, uri, ["c", "d"])
    assert max(ours) < min(theirs) and mark(uri) == min(ours) and all((i + 1) % 2 == 0 for i in ours)
    given = spark.sql("select 1000L as id, 'given' as v")
    if always:
        with pytest.raises(SchemaMismatchError, match="column 'id'"):
            ops.write_dataframe(given, uri, mode="append")
    else:
        ops.write_dataframe(given, uri, mode="append")  # kept, and the mark stays
        assert ids_of(spark, uri, ["given"]) == [1000] and mark(uri) == min(ours)
    spark.sql(f"insert into delta.`{uri}` (v) values ('e')")
    assert ids_of(spark, uri, ["e"]) == [min(ours) - 2] and mark(uri) == min(ours) - 2
    check_consistent(spark, uri)
