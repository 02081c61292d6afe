"""Tables that live outside the warehouse folder, through dbt: `location_root` places a model's table
elsewhere (the warehouse keeps a `.location` file), external Delta tables are sources declared with a
location (read at their latest version, time travel through as_of), and `dbt clone` makes shallow
clones whose VACUUM never touches the source's files. Read back with delta-rs."""
import json
import os

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

pytestmark = pytest.mark.dbt

PLACED = """
{{ config(materialized='table', location_root=var('root')) }}
select id, id * 2 as doubled from range(4)
"""

FROM_SOURCE = """
{{ config(materialized='table') }}
select s.id, s.label, (select count(*) from {{ as_of(source('lake', 'events'), version=0) }}) as rows_at_v0
from {{ source('lake', 'events') }} s
"""

SOURCES_YML = """
version: 2
sources:
  - name: lake
    schema: lake
    tables:
      - name: events
        meta:
          location: "{location}"
"""


class TestLocationRootAndSources:
    @pytest.fixture(scope="class")
    @classmethod
    def external(cls, tmp_path_factory):
        base = tmp_path_factory.mktemp("outside")
        events = str(base / "events")
        deltalake.write_deltalake(events, pa.table({"id": [1, 2], "label": ["a", "b"]}))
        deltalake.write_deltalake(events, pa.table({"id": [3], "label": ["c"]}), mode="append")
        return {"root": str(base / "tables"), "events": events}

    @pytest.fixture(scope="class")
    @classmethod
    def models(cls, external):
        return {"placed.sql": PLACED, "from_source.sql": FROM_SOURCE,
                "sources.yml": SOURCES_YML.format(location=external["events"])}

    @pytest.fixture(scope="class")
    @classmethod
    def project_config_update(cls, external):
        return {"vars": {"root": external["root"]}}

    def test_1_location_root(self, project, deltalog_warehouse, external):
        run_dbt(["run", "--select", "placed"])
        where = os.path.join(external["root"], "placed")
        assert sorted(deltalake.DeltaTable(where).to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3]
        folder = os.path.join(deltalog_warehouse, project.test_schema)
        assert not os.path.exists(os.path.join(folder, "placed"))  # no data in the warehouse folder
        assert open(os.path.join(folder, "placed.location")).read().strip() == where
        run_dbt(["run", "--select", "placed"])  # a rebuild: one more commit at the same place
        assert deltalake.DeltaTable(where).version() == 1
        # the relation is known to dbt like any other: docs and a downstream query
        catalog = run_dbt(["docs", "generate"])
        assert "model.test.placed" in catalog.nodes
        result = run_dbt(["show", "--inline", f"select sum(doubled) as s from {{{{ ref('placed') }}}}"])
        assert result.results[0].agate_table.rows[0][0] == 12

    def test_2_moving_is_refused(self, project, external):
        _, out = run_dbt_and_capture(["run", "--select", "placed", "--vars",
                                      json.dumps({"root": external["root"] + "-elsewhere"})], expect_pass=False)
        assert "not moved silently" in out
        assert not os.path.exists(external["root"] + "-elsewhere")

    def test_3_a_folder_with_other_files_is_refused(self, project, deltalog_warehouse, external):
        busy = external["root"] + "-busy"
        os.makedirs(os.path.join(busy, "busy"))
        with open(os.path.join(busy, "busy", "precious.csv"), "w") as f:
            f.write("keep me\n")
        write_file(PLACED, project.project_root, "models", "busy.sql")
        _, out = run_dbt_and_capture(["run", "--select", "busy", "--vars", json.dumps({"root": busy})],
                                     expect_pass=False)
        assert "holds files but no Delta table" in out
        assert os.listdir(os.path.join(busy, "busy")) == ["precious.csv"]
        assert not os.path.exists(os.path.join(deltalog_warehouse, project.test_schema, "busy.location"))
        os.remove(os.path.join(project.project_root, "models", "busy.sql"))

    def test_4_external_source(self, project, deltalog_warehouse, external):
        run_dbt(["run", "--select", "from_source"])
        t = deltalake.DeltaTable(os.path.join(deltalog_warehouse, project.test_schema, "from_source"))
        rows = sorted(t.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
        assert [(r["id"], r["label"], r["rows_at_v0"]) for r in rows] == [(1, "a", 2), (2, "b", 2), (3, "c", 2)]
        # the latest version is read on every run
        deltalake.write_deltalake(external["events"], pa.table({"id": [4], "label": ["d"]}), mode="append")
        run_dbt(["run", "--select", "from_source"])
        t = deltalake.DeltaTable(os.path.join(deltalog_warehouse, project.test_schema, "from_source"))
        assert t.to_pyarrow_table().num_rows == 4
        assert deltalake.DeltaTable(external["events"]).version() == 2  # read, never written


def scan(dt):
    """Rows as delta-rs's DataFusion scan reads them (its pyarrow-dataset path joins an absolute
    `file://` add path onto the table root, a delta-rs bug; DataFusion reads them right)."""
    from deltalake import QueryBuilder

    return sorted(pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all()).to_pylist(),
                  key=lambda r: r["id"])


def adds(dt):
    return pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()


TABLE = """
{{ config(materialized='table', schema=var('suffix', none)) }}
select id, concat('v', cast(id as string)) as v from range(5)
"""


class TestClone:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"base.sql": TABLE}

    def test_clone_is_shallow_and_vacuum_safe(self, project, deltalog_warehouse):
        run_dbt(["run"])
        state = os.path.join(project.project_root, "state")
        os.makedirs(state)
        os.replace(os.path.join(project.project_root, "target", "manifest.json"), os.path.join(state, "manifest.json"))
        # the same project with a custom schema: `dbt clone` copies the state's table into it
        run_dbt(["clone", "--state", state, "--vars", json.dumps({"suffix": "clone"})])
        source = os.path.join(deltalog_warehouse, project.test_schema, "base")
        clone = os.path.join(deltalog_warehouse, project.test_schema + "_clone", "base")
        src, cln = deltalake.DeltaTable(source), deltalake.DeltaTable(clone)
        assert cln.version() == 0 and cln.history(1)[0]["operation"] == "CLONE"
        assert scan(cln) == scan(src) and len(scan(src)) == 5
        # shallow: the clone's adds are the source's files by absolute path; nothing was copied
        src_files = sorted(src.file_uris())
        assert sorted(p.replace("file://", "") for p in adds(cln)) == src_files
        assert [f for f in os.listdir(clone) if f.endswith(".parquet")] == []

        # the clone diverges with its own writes; VACUUM of the clone keeps the source's files
        run_dbt(["run", "--vars", json.dumps({"suffix": "clone"})])
        cln = deltalake.DeltaTable(clone)
        assert cln.version() == 1
        run_dbt(["run-operation", "vacuum", "--args",
                 json.dumps({"relation": f"{project.test_schema}_clone.base", "retain_hours": 0, "force": True})])
        assert all(os.path.exists(p) for p in src_files)
        assert len(scan(deltalake.DeltaTable(source))) == 5
        assert len(scan(deltalake.DeltaTable(clone))) == 5


from dbt.tests.adapter.dbt_clone.test_dbt_clone import (  # noqa: E402
    BaseClonePossible,
    BaseCloneSameTargetAndState,
)


class TestClonePossible(BaseClonePossible):
    pass


class TestCloneSameTargetAndState(BaseCloneSameTargetAndState):
    pass
