"""Python models, `def model(dbt, session)`, on the adapter's own SparkSession: dbt's adapter suites,
plus what a user checks — a table and each incremental strategy from Python, each run one commit,
pandas results accepted, errors naming the model. Read back with delta-rs."""
import json
import os

import deltalake
import pytest
from dbt.tests.adapter.python_model.test_python_model import (
    BasePythonIncrementalTests,
    BasePythonModelTests,
)
from dbt.tests.util import run_dbt, run_dbt_and_capture

pytestmark = pytest.mark.dbt


class TestPythonModels(BasePythonModelTests):
    pass


class TestPythonIncremental(BasePythonIncrementalTests):
    pass


UPSTREAM = """
{{ config(materialized='table') }}
select id, cast(id % 3 as int) as grp, concat('n', cast(id as string)) as name from range(1, 11)
"""

SPARK_TABLE = """
import pyspark.sql.functions as F

def model(dbt, session):
    dbt.config(materialized="table", tblproperties={"delta.checkpointInterval": "7"})
    df = dbt.ref("upstream")
    return df.groupBy("grp").agg(F.count("*").alias("n"), F.max("id").alias("top"))
"""

PANDAS_TABLE = """
import pandas as pd

def model(dbt, session):
    dbt.config(materialized="table")
    pdf = dbt.ref("upstream").toPandas()
    pdf["name_len"] = pdf["name"].str.len()
    return pdf[["id", "name_len"]]
"""

INCREMENTAL = """
import pyspark.sql.functions as F

def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="{strategy}", unique_key="id",
               partition_by=["grp"])
    df = dbt.ref("upstream").withColumn("run", F.lit(1))
    if dbt.is_incremental:
        top = session.sql(f"select coalesce(max(id), 0) as m from {{dbt.this}}").collect()[0]["m"]
        df = df.filter(F.col("id") > top - 2)  # overlaps the last two rows: an upsert changes them
    return df
"""

GLOBAL_SPARK_AND_PANDAS_ON_SPARK = """
import pyspark.pandas as ps

def model(dbt, session):
    dbt.config(materialized="table")
    assert spark is session  # the global name dbt-spark and Databricks models use
    psdf = dbt.ref("upstream").pandas_api()
    psdf["double"] = psdf["id"] * 2
    return psdf[["id", "double"]]
"""

BROKEN = """
def model(dbt, session):
    dbt.config(materialized="table")
    return 42
"""


def dt(warehouse, project, name):
    return deltalake.DeltaTable(os.path.join(warehouse, project.test_schema, name))


class TestPythonStrategies:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"upstream.sql": UPSTREAM, "by_group.py": SPARK_TABLE, "from_pandas.py": PANDAS_TABLE,
                "inc_merge.py": INCREMENTAL.format(strategy="merge"),
                "inc_append.py": INCREMENTAL.format(strategy="append"),
                "inc_delete_insert.py": INCREMENTAL.format(strategy="delete+insert"),
                "inc_overwrite.py": INCREMENTAL.format(strategy="insert_overwrite"),
                "pandas_on_spark.py": GLOBAL_SPARK_AND_PANDAS_ON_SPARK,
                "broken.py": BROKEN}

    def test_tables_and_incrementals(self, project, deltalog_warehouse):
        results, out = run_dbt_and_capture(["run", "--exclude", "broken"])
        assert len(results) == 8
        ps = dt(deltalog_warehouse, project, "pandas_on_spark").to_pyarrow_table()
        assert ps.column_names == ["id", "double"]  # no index column
        assert sorted((r["id"], r["double"]) for r in ps.to_pylist()) == [(i, 2 * i) for i in range(1, 11)]
        t = dt(deltalog_warehouse, project, "by_group")
        assert t.version() == 0 and t.metadata().configuration["delta.checkpointInterval"] == "7"
        assert sorted((r["grp"], r["n"], r["top"]) for r in t.to_pyarrow_table().to_pylist()) == [
            (0, 3, 9), (1, 4, 10), (2, 3, 8)]
        p = dt(deltalog_warehouse, project, "from_pandas")
        assert sorted((r["id"], r["name_len"]) for r in p.to_pyarrow_table().to_pylist())[-1] == (10, 3)

        before = {n: dt(deltalog_warehouse, project, n).version()
                  for n in ("inc_merge", "inc_append", "inc_delete_insert", "inc_overwrite")}
        run_dbt(["run", "--select", "inc_merge", "inc_append", "inc_delete_insert", "inc_overwrite",
                 "--vars", json.dumps({"unused": 1})])
        for name, version in before.items():
            table = dt(deltalog_warehouse, project, name)
            assert table.version() == version + 1, name  # one commit per run
            rows = table.to_pyarrow_table().to_pylist()
            ids = sorted(r["id"] for r in rows)
            if name == "inc_append":
                assert ids == sorted(list(range(1, 11)) + [9, 10])
            elif name == "inc_overwrite":
                # the partitions the new rows land in (grp 0 and 1: ids 9 and 10) are replaced
                assert ids == [2, 5, 8, 9, 10]
            else:
                assert ids == list(range(1, 11)), name

    def test_errors_name_the_model(self, project, deltalog_warehouse):
        _, out = run_dbt_and_capture(["run", "--select", "broken"], expect_pass=False)
        assert "model.test.broken" in out and "returned builtins.int" in out
        assert not os.path.exists(os.path.join(deltalog_warehouse, project.test_schema, "broken"))


COUNTER = """
import os

def model(dbt, session):
    dbt.config(materialized="incremental", incremental_strategy="merge", unique_key="id")
    if not dbt.is_incremental:
        return session.sql("select -1L as id, 0L as v")
    increment = session.sql(f"select id, v + 1 as v from {dbt.this} where id = -1")
    other_writer = os.environ.get("DELTALOG_TEST_OTHER_WRITER")
    if other_writer:  # another writer's increment lands after this model read the table
        from deltalog.snapshot import Snapshot
        from deltalog.spark import operations
        from deltalog.spark.reader import snapshot_dataframe

        theirs = snapshot_dataframe(session, Snapshot.load(other_writer)).where("id = -1").selectExpr("id", "v + 1 as v")
        operations.merge(session, other_writer, theirs, "s.id = t.id", when_matched_update="*",
                         source_alias="s", target_alias="t")
    return increment
"""


class TestReadModifyWriteOfItsOwnTable:
    """A model computed from its own table (`dbt.this`) commits against the version it read: a commit
    landing in between fails the run by Delta's name, and is not overwritten (no lost update)."""

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"counter.py": COUNTER}

    def test_a_commit_landing_after_the_read_is_a_conflict_not_a_lost_update(self, project, deltalog_warehouse,
                                                                             monkeypatch):
        table = os.path.join(deltalog_warehouse, project.test_schema, "counter")
        run_dbt(["run"])
        run_dbt(["run"])
        assert dt(deltalog_warehouse, project, "counter").to_pyarrow_table().to_pylist() == [{"id": -1, "v": 1}]
        monkeypatch.setenv("DELTALOG_TEST_OTHER_WRITER", table)
        _, out = run_dbt_and_capture(["run"], expect_pass=False)
        assert "ConcurrentDeleteReadException" in out or "ConcurrentAppendException" in out, out
        assert dt(deltalog_warehouse, project, "counter").to_pyarrow_table().to_pylist() == [{"id": -1, "v": 2}]
        monkeypatch.delenv("DELTALOG_TEST_OTHER_WRITER")
        run_dbt(["run"])  # the rerun reads the table as it now is
        assert dt(deltalog_warehouse, project, "counter").to_pyarrow_table().to_pylist() == [{"id": -1, "v": 3}]
