"""delta-spark's own DML, OPTIMIZE, RESTORE and VACUUM on tables deltalog made: after each, deltalog reads
what delta-spark reads, and deltalog's next writes land on top and read back equal in delta-spark."""
from __future__ import annotations

import pytest

from deltalog import Snapshot
from deltalog.spark import operations as ops
from tests.delta_spark.test_reads_what_we_write import delta_spark_rows, our_rows, same_at_every_version
from tests.support.selection import FULL, full_only

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("dv", [True, pytest.param(False, marks=full_only(
    "the same steps run with deletion vectors; delta-spark's copy-on-write DML on our tables is in "
    "test_writers_side_by_side.py's Serializable case"))], ids=["dv", "copy-on-write"])
def test_delta_spark_dml_optimize_restore_vacuum_on_our_table(spark, tmp_path, dv):
    uri = str(tmp_path / "t")
    conf = {"delta.enableDeletionVectors": str(dv).lower(), "delta.enableChangeDataFeed": "true"}
    ops.write_dataframe(spark.sql("select id, id % 5 as k, 'a' as s from range(200)"), uri, mode="overwrite",
                        partition_by=["k"], configuration=conf)
    table = f"delta.`{uri}`"
    steps = [
        f"delete from {table} where id % 7 = 0",
        f"update {table} set s = 'updated' where id % 11 = 0",
        f"merge into {table} t using (select id, id % 5 as k, 'merged' as s from range(150, 260)) u "
        f"on t.id = u.id when matched then update set s = u.s when not matched then insert *",
        f"optimize {table}",
        f"optimize {table} zorder by (id)",
    ]
    for sql in steps:
        spark.sql(sql)
        assert our_rows(uri) == delta_spark_rows(spark, uri), sql
    # ours on top of theirs: an append, a merge, a delete; delta-spark reads each (and, in the full suite,
    # every version before them again as of that version)
    theirs_last = Snapshot.load(uri).version
    ops.write_dataframe(spark.sql("select id, id % 5 as k, 'ours' as s from range(1000, 1010)"), uri, mode="append")
    ops.merge(spark, uri, spark.sql("select id, 'ours-merge' as s from range(0, 300, 3)"), "s.id = t.id",
              when_matched_update={"s": "s.s"}, source_alias="s", target_alias="t")
    ops.delete(spark, uri, "id > 1005")
    last = same_at_every_version(spark, uri, delta_rs=not dv, since=0 if FULL else theirs_last + 1)
    # RESTORE by delta-spark to a version we wrote, then VACUUM with delta-spark: we read and write after
    spark.sql(f"restore table {table} to version as of {last - 1}")
    assert our_rows(uri) == our_rows(uri, last - 1) == delta_spark_rows(spark, uri)
    spark.sql("set spark.databricks.delta.retentionDurationCheck.enabled = false")
    spark.sql(f"vacuum {table} retain 0 hours")
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    version = ops.write_dataframe(spark.sql("select 5000L as id, 0L as k, 'after vacuum' as s"), uri, mode="append")
    assert version == Snapshot.load(uri).version
    assert our_rows(uri) == delta_spark_rows(spark, uri)
    changes = spark.sql(f"select count(*) from table_changes_by_path('{uri}', {version})").collect()[0][0]
    assert changes == 1  # the change feed of our commit as delta-spark reads it
