"""Liquid clustering through dbt: `liquid_clustered_by` (or `cluster_by`) puts the `clustering` and
`domainMetadata` features and the `delta.clustering` domain metadata in version 0; OPTIMIZE after each
run clusters on those columns (Hilbert), only the files not clustered yet, marking them
clusteringProvider=liquid; changing the columns is one metadata commit. Read back with delta-rs."""
import json
import os

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

pytestmark = pytest.mark.dbt

CLUSTERED = """
{{ config(materialized='incremental', incremental_strategy='append',
          liquid_clustered_by=var('cluster_columns', ['customer', 'day'])) }}
select id, cast(id * 7919 % 101 as bigint) as customer, date_add(date'2024-01-01', cast(id % 30 as int)) as day,
       concat('note-', cast(id as string)) as note
from range({{ var('lo', 0) }}, {{ var('hi', 2000) }})
"""

BOTH = """
{{ config(materialized='table', liquid_clustered_by='a', partition_by='b') }}
select 1 as a, 2 as b, 3 as c
"""


def domain(dt):
    actions = [json.loads(line) for v in range(dt.version() + 1)
               for line in open(os.path.join(dt.table_uri.replace("file://", ""), "_delta_log", f"{v:020d}.json"))]
    found = [a["domainMetadata"] for a in actions if "domainMetadata" in a]
    return json.loads(found[-1]["configuration"]) if found else None


def adds(dt):
    t = pa.table(dt.get_add_actions(flatten=True))
    return t.to_pylist()


class TestLiquidClustering:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"clustered.sql": CLUSTERED}

    def test_1_created_clustered(self, project, deltalog_warehouse):
        run_dbt(["run"])
        dt = deltalake.DeltaTable(os.path.join(deltalog_warehouse, project.test_schema, "clustered"))
        ops = [h["operation"] for h in reversed(dt.history())]
        assert ops == ["CREATE TABLE AS SELECT", "OPTIMIZE"]
        proto = dt.protocol()
        assert {"clustering", "domainMetadata"} <= set(proto.writer_features or [])
        assert domain(dt) == {"clusteringColumns": [["customer"], ["day"]]}
        assert dt.to_pyarrow_table().num_rows == 2000
        with open(os.path.join(dt.table_uri.replace("file://", ""), "_delta_log", f"{1:020d}.json")) as f:
            added = [json.loads(line)["add"] for line in f if '"add"' in line]
        assert added and all(a.get("clusteringProvider") == "liquid" for a in added)

    def test_2_incremental_clusters_only_new_files(self, project, deltalog_warehouse):
        run_dbt(["run", "--vars", json.dumps({"lo": 2000, "hi": 2300})])
        dt = deltalake.DeltaTable(os.path.join(deltalog_warehouse, project.test_schema, "clustered"))
        ops = [h["operation"] for h in reversed(dt.history())]
        assert ops[-2:] == ["WRITE", "OPTIMIZE"]
        optimize, write = dt.history(2)
        # the appended files are clustered into a set of their own; the clustered files stay
        assert int(optimize["operationMetrics"]["numRemovedFiles"]) == int(write["operationMetrics"]["numFiles"])
        assert dt.to_pyarrow_table().num_rows == 2300

    def test_3_changing_the_columns_is_a_metadata_commit(self, project, deltalog_warehouse):
        run_dbt(["run", "--vars", json.dumps({"lo": 0, "hi": 0, "cluster_columns": ["day"]})])
        dt = deltalake.DeltaTable(os.path.join(deltalog_warehouse, project.test_schema, "clustered"))
        ops = [h["operation"] for h in reversed(dt.history())]
        assert "CLUSTER BY" in ops[-3:]
        assert domain(dt) == {"clusteringColumns": [["day"]]}
        assert dt.to_pyarrow_table().num_rows == 2300

    def test_4_partition_and_clustering_together_fail(self, project, deltalog_warehouse):
        write_file(BOTH, project.project_root, "models", "both.sql")
        _, out = run_dbt_and_capture(["run", "--select", "both"], expect_pass=False)
        assert "liquid_clustered_by" in out and "either partitioned or liquid clustered" in out
        assert not os.path.exists(os.path.join(deltalog_warehouse, project.test_schema, "both"))
