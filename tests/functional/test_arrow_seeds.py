"""A new seed table is written by the engine's Arrow writer, without Spark (arrow_seeds.py), and is the
table Spark's load gives: the same schema, protocol, properties and rows, read by delta-rs. Seeds whose
load is Spark's (column_types, an existing table) still are, and either path's load counts as unchanged
for the other."""

import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt_and_capture

from dbt.adapters.deltalog import arrow_seeds

# dbt infers bigint, bigint, double, string, boolean, date, timestamp, timestamp, bigint
EDGES = '''id,big,ratio,name,flag,day,at,at_tz,whole
1,9223372036854775807,0.1,alice,true,2024-01-31,2024-01-31 10:00:00,2024-01-31T10:00:00+02:00,1.0
2,-9223372036854775808,-0.0,"b, ""quoted""",false,1582-10-04,2024-02-29 23:59:59,2024-02-29T23:59:59.123456Z,"1,000"
3,,1e-7,,,,,,
4,0,12345678901234.5,日本,TRUE,2000-02-29,1999-12-31 00:00:00,1999-12-31T00:00:00-05:30,-0.0
'''

TRACKED = "id,name\n1,a\n2,b\n3,c\n"

SEEDS_YML = """
version: 2
seeds:
  - name: edges
    config: {checkpoint_interval: 3, change_data_feed: true, tblproperties: {team: data}}
  - name: edges_by_spark
    config: {checkpoint_interval: 3, change_data_feed: true, tblproperties: {team: data}}
  - name: typed
    config: {column_types: {amount: 'decimal(10,2)'}}
  - name: tracked
    config: {deletion_vectors: true, row_tracking: true, isolation_level: Serializable}
  - name: tracked_by_spark
    config: {deletion_vectors: true, row_tracking: true, isolation_level: Serializable}
"""


def _log(path):
    version = deltalake.DeltaTable(path).version()
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as f:
        return {k: v for line in f for k, v in json.loads(line).items()}


class TestSeedsWithoutSpark:
    @pytest.fixture(scope="class")
    @classmethod
    def seeds(cls):
        return {"edges.csv": EDGES, "edges_by_spark.csv": EDGES, "typed.csv": "id,amount\n1,2.50\n",
                "tracked.csv": TRACKED, "tracked_by_spark.csv": TRACKED, "seeds.yml": SEEDS_YML}

    def test_arrow_and_spark_loads_give_the_same_table(self, project, deltalog_warehouse, monkeypatch):
        refusal = arrow_seeds.refusal
        monkeypatch.setattr(arrow_seeds, "refusal", lambda adapter, relation, *a: (
            "forced by the test" if relation.identifier.endswith("_by_spark") else refusal(adapter, relation, *a)))
        _, out = run_dbt_and_capture(["--debug", "seed"])
        assert "edges_by_spark: loaded by Spark: forced by the test" in out
        assert "edges: loaded by Spark" not in out
        assert "typed: loaded by Spark: column_types" in out

        folder = os.path.join(deltalog_warehouse, project.test_schema)
        ours, spark = (os.path.join(folder, n) for n in ("edges", "edges_by_spark"))
        a, b = _log(ours), _log(spark)
        assert a["protocol"] == b["protocol"]
        assert json.loads(a["metaData"]["schemaString"]) == json.loads(b["metaData"]["schemaString"])
        assert a["metaData"]["configuration"] == b["metaData"]["configuration"]
        assert a["metaData"]["configuration"]["team"] == "data"
        assert a["commitInfo"]["operation"] == b["commitInfo"]["operation"] == "WRITE"
        rows = [deltalake.DeltaTable(p).to_pyarrow_table().sort_by("id").to_pylist() for p in (ours, spark)]
        assert rows[0] == rows[1]
        assert rows[0][0]["big"] == 2 ** 63 - 1 and rows[0][3]["name"] == "日本" and rows[0][1]["whole"] == 1000
        assert str(rows[0][1]["ratio"]) == "-0.0" and rows[0][1]["at_tz"].microsecond == 123456
        # deletion vectors and row tracking on: the same protocol and row ID high-water mark
        from deltalog import DeltaTable
        from deltalog.scan import read_table

        a, b = (_log(os.path.join(folder, n)) for n in ("tracked", "tracked_by_spark"))
        assert a["protocol"] == b["protocol"] and "rowTracking" in a["protocol"]["writerFeatures"]
        # (the materialized row ID columns' names are random per table)
        assert [{k: v.rsplit("-col-", 1)[0] for k, v in t["metaData"]["configuration"].items()}
                for t in (a, b)] == [{k: v.rsplit("-col-", 1)[0] for k, v in b["metaData"]["configuration"].items()}] * 2
        assert a["domainMetadata"] == b["domainMetadata"]  # the row ID high-water mark
        assert [read_table(DeltaTable(os.path.join(folder, n)).snapshot()).sort_by("id").to_pylist()
                for n in ("tracked", "tracked_by_spark")] == [[{"id": i, "name": c} for i, c in
                                                             ((1, "a"), (2, "b"), (3, "c"))]] * 2
        typed = deltalake.DeltaTable(os.path.join(folder, "typed")).schema().to_arrow()
        assert "decimal" in str(typed.field("amount").type).lower()

        # the fingerprint does not depend on the writer: nothing to load again, whichever wrote it
        monkeypatch.setattr(arrow_seeds, "refusal", refusal)
        _, out = run_dbt_and_capture(["seed"])
        assert out.count("UNCHANGED") == 5
        # an existing table's replacement is Spark's
        _, out = run_dbt_and_capture(["--debug", "seed", "--full-refresh", "--select", "edges"])
        assert "edges: loaded by Spark: the relation exists" in out
        assert deltalake.DeltaTable(ours).version() == 1
