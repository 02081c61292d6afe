"""A streaming_table that applies changes (`apply_changes` config) through dbt: change files landing in a
folder, each `dbt run` applying what is new by key — SCD type 1 and 2, out of order across runs, deletes,
re-inserts — as merge-on-read commits that delta-rs reads; a run with nothing new commits nothing;
`--full-refresh` rebuilds the table and its state; a bad request is refused by name before anything runs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from deltalake import DeltaTable, QueryBuilder

from deltalog.snapshot import Snapshot

pytestmark = pytest.mark.dbt

SCHEMA = "id bigint, name string, city string, op string, seq bigint"

CUSTOMERS = """
{{ config(materialized='streaming_table',
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq']}) }}
select * from {{ stream_files(var('landing'), format='json', schema='%s') }}
""" % SCHEMA

HISTORY = """
{{ config(materialized='streaming_table',
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq'], 'stored_as_scd_type': 2,
                         'track_history_except_column_list': ['name']}) }}
select * from {{ stream_files(var('landing'), format='json', schema='%s') }}
""" % SCHEMA

LIVE = """
{{ config(materialized='table') }}
select count(*) as n from {{ ref('customers') }}
"""


def _land(folder: Path, name: str, changes: list[tuple]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(dict(zip(["id", "name", "city", "op", "seq"], c))) + "\n" for c in changes))
    os.replace(tmp, folder / name)


def _rows(table: Path, order: tuple = ("id",)) -> list[dict]:
    read = pa.table(QueryBuilder().register("t", DeltaTable(str(table))).execute("select * from t").read_all())
    return sorted(read.to_pylist(), key=lambda r: tuple(r[c] for c in order))


class TestApplyChanges:
    @pytest.fixture(scope="class")
    def models(self):
        return {"customers.sql": CUSTOMERS, "customers_history.sql": HISTORY, "live_customers.sql": LIVE}

    def test_changes_apply_by_key_run_after_run(self, project, deltalog_warehouse, tmp_path_factory):
        landing = tmp_path_factory.mktemp("cdc")
        variables = ["--vars", json.dumps({"landing": str(landing)})]
        scd1 = Path(deltalog_warehouse) / project.test_schema / "customers"
        scd2 = Path(deltalog_warehouse) / project.test_schema / "customers_history"

        run_dbt(["run", *variables])  # nothing landed: both tables exist, empty, with their columns
        assert _rows(scd1) == [] and _rows(scd2) == []
        assert [f.name for f in DeltaTable(str(scd2)).schema().fields] == ["id", "name", "city", "__START_AT",
                                                                          "__END_AT"]
        _land(landing, "1.json", [(1, "Ann", "Oslo", "c", 1), (2, "Bo", "Rome", "c", 1), (3, "Cy", "Lima", "c", 1),
                                  (2, "Bo", "Paris", "u", 3), (2, "Bo", "Nice", "u", 2)])  # out of order in a file
        run_dbt(["run", *variables])
        assert _rows(scd1) == [{"id": 1, "name": "Ann", "city": "Oslo"}, {"id": 2, "name": "Bo", "city": "Paris"},
                               {"id": 3, "name": "Cy", "city": "Lima"}]
        _land(landing, "2.json", [(3, None, None, "d", 5), (1, "Anne", "Oslo", "u", 4), (2, "Bo", "Turin", "u", 2)])
        run_dbt(["run", *variables])  # a late change of key 2 (seq 2 < 3) is ignored
        assert _rows(scd1) == [{"id": 1, "name": "Anne", "city": "Oslo"}, {"id": 2, "name": "Bo", "city": "Paris"}]
        _land(landing, "3.json", [(3, "Cy", "Quito", "u", 4), (4, "Di", "Kyiv", "c", 1)])
        run_dbt(["run", *variables])  # key 3's late update (4 < its delete at 5) stays deleted
        assert [r["id"] for r in _rows(scd1)] == [1, 2, 4]
        _land(landing, "4.json", [(3, "Cy", "Bern", "u", 6)])
        run_dbt(["run", *variables])  # re-inserted after its delete
        assert {r["id"]: r["city"] for r in _rows(scd1)} == {1: "Oslo", 2: "Paris", 3: "Bern", 4: "Kyiv"}
        assert _rows(Path(deltalog_warehouse) / project.test_schema / "live_customers", ("n",)) == [{"n": 4}]

        # SCD type 2: one row per version, late changes in their place, name changes in place
        assert [(r["id"], r["city"], r["name"], r["__START_AT"], r["__END_AT"])
                for r in _rows(scd2, ("id", "__START_AT"))] == [
            (1, "Oslo", "Anne", 1, None),
            (2, "Rome", "Bo", 1, 2), (2, "Turin", "Bo", 2, 3), (2, "Paris", "Bo", 3, None),
            (3, "Lima", "Cy", 1, 4), (3, "Quito", "Cy", 4, 5), (3, "Bern", "Cy", 6, None),
            (4, "Kyiv", "Di", 1, None)]

        # merge-on-read (tests/spark/test_apply_changes_rules.py shows only the changed rows written)
        assert Snapshot.load(str(scd1)).configuration.get("delta.enableDeletionVectors") == "true"

        versions = (Snapshot.load(str(scd1)).version, Snapshot.load(str(scd2)).version)
        _, out = run_dbt_and_capture(["run", "-s", "customers", "customers_history", *variables])
        assert (Snapshot.load(str(scd1)).version, Snapshot.load(str(scd2)).version) == versions, out

        # --full-refresh: every change again, into a new version; the same rows
        before = _rows(scd1)
        run_dbt(["run", "-s", "customers", "--full-refresh", *variables])
        assert _rows(scd1) == before and Snapshot.load(str(scd1)).version > versions[0]


BAD = {
    "unknown_parameter.sql": ("{'keys': ['id'], 'sequence_by': 'seq', 'sequence': 'x'}", "no parameter 'sequence'"),
    "missing_key.sql": ("{'keys': ['customer_id'], 'sequence_by': 'seq'}", "keys names customer_id"),
    "missing_sequence.sql": ("{'keys': ['id'], 'sequence_by': 'version'}", "sequence_by `version` does not resolve"),
    "both_lists.sql": ("{'keys': ['id'], 'sequence_by': 'seq', 'column_list': ['id'], 'except_column_list': ['op']}",
                       "column_list or except_column_list, not both"),
    "truncate_scd2.sql": ("{'keys': ['id'], 'sequence_by': 'seq', 'stored_as_scd_type': 2, "
                          "'apply_as_truncates': \"op = 't'\"}", "stored_as_scd_type 1 only"),
}


class TestApplyChangesRefusals:
    @pytest.fixture(scope="class")
    def models(self):
        return {name: ("{{ config(materialized='streaming_table', apply_changes=%s) }}\n"
                       "select * from {{ stream_files(var('landing'), format='json', schema='%s') }}\n"
                       % (config, SCHEMA)) for name, (config, _) in BAD.items()}

    def test_a_bad_request_is_refused_by_name_before_anything_runs(self, project, deltalog_warehouse,
                                                                  tmp_path_factory):
        landing = tmp_path_factory.mktemp("cdc")
        _land(landing, "1.json", [(1, "Ann", "Oslo", "c", 1)])
        variables = ["--vars", json.dumps({"landing": str(landing)})]
        for name, (_, expected) in BAD.items():
            model = name[:-4]
            _, out = run_dbt_and_capture(["run", "-s", model, *variables], expect_pass=False)
            assert expected in out and model in out, out[-2000:]
            assert not (Path(deltalog_warehouse) / project.test_schema / model).exists()


EVOLVING = """
{{ config(materialized='streaming_table', on_schema_change=var('on_schema_change', 'append_new_columns'),
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq'], 'stored_as_scd_type': var('scd', 1)}) }}
select * from {{ stream_files(var('landing'), format='json', schema=var('schema')) }}
"""


class TestApplyChangesSchemaChange:
    @pytest.fixture(scope="class")
    def models(self):
        return {"evolving.sql": EVOLVING, "evolving_history.sql": EVOLVING.replace("var('scd', 1)", "2")}

    def test_a_new_source_column_by_on_schema_change(self, project, deltalog_warehouse, tmp_path_factory):
        landing = tmp_path_factory.mktemp("cdc")
        narrow = "id bigint, name string, op string, seq bigint"
        wide = "id bigint, name string, tier string, op string, seq bigint"
        _land(landing, "1.json", [(1, "Ann", None, "c", 1), (2, "Bo", None, "c", 1)])
        run_dbt(["run", "--vars", json.dumps({"landing": str(landing), "schema": narrow})])
        folder = Path(deltalog_warehouse) / project.test_schema
        (landing / "2.json").write_text(json.dumps({"id": 1, "name": "Ann", "tier": "gold", "op": "u", "seq": 2}) + "\n")
        _, out = run_dbt_and_capture(["run", "-s", "evolving", "--vars", json.dumps(
            {"landing": str(landing), "schema": wide, "on_schema_change": "fail"})], expect_pass=False)
        assert "tier" in out and "evolving" in out
        assert [f.name for f in DeltaTable(str(folder / "evolving")).schema().fields] == ["id", "name"]
        run_dbt(["run", "--vars", json.dumps({"landing": str(landing), "schema": wide})])
        assert _rows(folder / "evolving") == [{"id": 1, "name": "Ann", "tier": "gold"},
                                              {"id": 2, "name": "Bo", "tier": None}]
        assert [(r["id"], r["tier"], r["__START_AT"], r["__END_AT"]) for r in
                _rows(folder / "evolving_history", ("id", "__START_AT"))] == [
            (1, None, 1, 2), (1, "gold", 2, None), (2, None, 1, None)]


KEYED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', change_data_feed=true,
          deletion_vectors=true) }}
select id, {{ var('tag', "'a'") }} as tag from range({{ var('lo', 0) }}, {{ var('hi', 4) }})
"""

MIRROR = """
{{ config(materialized='streaming_table',
          apply_changes={'keys': ['id'], 'sequence_by': '_commit_version',
                         'apply_as_deletes': "_change_type = 'delete'",
                         'except_column_list': ['_change_type', '_commit_version', '_commit_timestamp']}) }}
select * from {{ stream(ref('keyed'), changes=true) }} where _change_type != 'update_preimage'
"""


class TestApplyChangesFromAChangeFeed:
    @pytest.fixture(scope="class")
    def models(self):
        return {"keyed.sql": KEYED, "mirror.sql": MIRROR}

    def test_a_table_mirrors_another_through_its_change_feed(self, project, deltalog_warehouse):
        folder = Path(deltalog_warehouse) / project.test_schema
        run_dbt(["run"])
        run_dbt(["run", "--vars", json.dumps({"lo": 2, "hi": 6, "tag": "'b'"})])
        from dbt.adapters.deltalog.runtime.session import get_spark
        from deltalog.spark.operations import delete as delete_rows

        delete_rows(get_spark("local[2]", {}), str(folder / "keyed"), "id in (0, 4)")
        run_dbt(["run", "-s", "mirror"])
        assert _rows(folder / "mirror") == _rows(folder / "keyed") == [
            {"id": 1, "tag": "a"}, {"id": 2, "tag": "b"}, {"id": 3, "tag": "b"}, {"id": 5, "tag": "b"}]
