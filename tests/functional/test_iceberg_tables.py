"""`table_format: iceberg`: a Delta table that Iceberg readers read too, from the same files (Delta's
UniForm). Built with dbt, then read with pyiceberg (the newest metadata, every snapshot as the Delta
version it names, and by name through a SQLite catalog) and compared with delta-rs row for row: every
type, partitioned and not, after append, merge, delete, OPTIMIZE / Z-order, schema evolution,
`--full-refresh`, and turned on for a table that had been Delta only."""

from __future__ import annotations

import datetime as dt
import json
import os

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.support import iceberg_readers as ice

pytestmark = [pytest.mark.dbt, pytest.mark.spark]

EVERY_TYPE = """
{{ config(materialized='table', table_format='iceberg') }}
select id, cast(id as tinyint) as tiny, cast(id as smallint) as small, cast(id as int) as i, id * 1000000000 as big,
       cast(id / 3 as float) as f, id / 7 as d, cast(id + 0.125 as decimal(12, 3)) as amount,
       concat('name ', id) as s, id % 2 = 0 as even, date_add(date'2026-01-01', cast(id as int)) as day,
       timestamp_micros(1767225600000000 + id * 1234567) as ts,
       cast(timestamp_micros(1767225600000000 + id * 1234567) as timestamp_ntz) as ts_ntz,
       cast(concat('b', id) as binary) as bin,
       named_struct('n', cast(id as int), 'inner', named_struct('label', concat('l', id))) as nested,
       array(id, id + 1) as numbers, map(concat('k', id), cast(id as int)) as lookup,
       case when id % 3 = 0 then null else id end as maybe
from range(0, 40)
"""

BY_DAY = """
{{ config(materialized='table', table_format='iceberg', partition_by=['day']) }}
select id, date_add(date'2026-01-01', cast(id % 4 as int)) as day, concat('v', id) as v from range(0, 20)
"""

ORDERS = """
{{ config(materialized='incremental', table_format='iceberg', incremental_strategy='merge', unique_key='id',
          zorder_by=['customer'], on_schema_change='append_new_columns',
          post_hook=["delete from {{ this }} where id = 5"] if var('round', 1) == 2 else []) }}
{% if var('round', 1) == 1 %}
select id, id % 5 as customer, cast(id * 10 as bigint) as amount from range(0, 12)
{% else %}
select id, id % 5 as customer, cast(id * 100 as bigint) as amount, 'late' as note from range(8, 16)
{% endif %}
"""

EVENTS = """
{{ config(materialized='incremental', incremental_strategy='append', table_format='iceberg',
          partition_by=['kind'],
          post_hook=["delete from {{ this }} where kind = 'view'"] if var('round', 1) == 2 else []) }}
select id, case when id % 2 = 0 then 'click' else 'view' end as kind, {{ var('round', 1) }} as round
from range({{ var('round', 1) * 10 }}, {{ var('round', 1) * 10 + 10 }})
"""

LEDGER = """
{{ config(materialized='incremental', table_format='iceberg', deletion_vectors=true, incremental_strategy='merge',
          unique_key='id', partition_by=['shard'],
          post_hook=["delete from {{ this }} where id = 5"] if var('round', 1) == 2 else []) }}
select id, id % 2 as shard, cast(id * {{ var('round', 1) }} as bigint) as amount
from range({{ 0 if var('round', 1) == 1 else 8 }}, {{ 12 if var('round', 1) == 1 else 16 }})
"""

LATER = """
{{ config(materialized='incremental', incremental_strategy='append', table_format=var('later_format', none)) }}
select id, {{ var('round', 1) }} as round from range({{ var('round', 1) * 5 }}, {{ var('round', 1) * 5 + 5 }})
"""


class TestIcebergTables:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"every_type.sql": EVERY_TYPE, "by_day.sql": BY_DAY, "orders.sql": ORDERS, "events.sql": EVENTS,
                "later.sql": LATER, "ledger.sql": LEDGER}

    def _path(self, project, warehouse, name):
        return os.path.join(warehouse, project.test_schema, name)

    def test_readers_see_what_delta_readers_see(self, project, deltalog_warehouse, tmp_path):
        run_dbt(["run", "--exclude", "later", "ledger"])
        run_dbt(["run", "--exclude", "later", "ledger", "--vars", json.dumps({"round": 2})])
        for name in ("every_type", "by_day", "orders", "events"):
            path = self._path(project, deltalog_warehouse, name)
            assert ice.assert_every_snapshot_matches_delta(path) >= 1, name
            assert ice.registered_rows(path, name, tmp_path) == ice.delta_rows(path), name

        orders = self._path(project, deltalog_warehouse, "orders")
        table = ice.iceberg_table(orders)
        operations = [s.summary.operation.value for s in table.metadata.snapshots]
        assert operations[0] == "append" and "overwrite" in operations, operations  # the merge
        assert "replace" in operations, operations  # the Z-order's OPTIMIZE (dataChange = false)
        assert operations.count("overwrite") == 2, operations  # the merge, and the DELETE rewriting a file
        assert "note" in [f.name for f in table.schema().fields]  # the column the second round added
        assert len(table.metadata.snapshots) == len(deltalake.DeltaTable(orders).history())  # one per version

        events = ice.iceberg_table(self._path(project, deltalog_warehouse, "events"))
        assert [f.name for f in events.spec().fields] == ["kind"]
        # the DELETE of a whole partition removes files only
        assert [s.summary.operation.value for s in events.metadata.snapshots] == ["append", "append", "delete"]

    def test_bounds_keep_every_row_of_the_last_millisecond(self, project, deltalog_warehouse):
        """A filter on a file's exact largest timestamp (microseconds past its millisecond) finds it: the
        bounds Iceberg readers skip files by hold every value of the file."""
        from pyiceberg.expressions import EqualTo

        run_dbt(["run", "--select", "every_type"])
        path = self._path(project, deltalog_warehouse, "every_type")
        newest = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=39 * 1234567)
        assert newest.microsecond % 1000 != 0
        found = ice.iceberg_rows(ice.iceberg_table(path), row_filter=EqualTo("ts", newest.isoformat()))
        assert len(found) == 1

    def test_full_refresh_and_turning_it_on_and_off(self, project, deltalog_warehouse):
        run_dbt(["run", "--select", "orders", "--full-refresh"])
        orders = self._path(project, deltalog_warehouse, "orders")
        ice.assert_every_snapshot_matches_delta(orders)

        later = self._path(project, deltalog_warehouse, "later")
        run_dbt(["run", "--select", "later"])
        assert not os.path.exists(os.path.join(later, "metadata"))
        run_dbt(["run", "--select", "later", "--vars", json.dumps({"round": 2, "later_format": "iceberg"})])
        assert ice.iceberg_rows(ice.iceberg_table(later)) == ice.delta_rows(later)
        assert len(ice.delta_rows(later)) == 10
        run_dbt(["run", "--select", "later", "--vars", json.dumps({"round": 3, "later_format": "delta"})])
        config = deltalake.DeltaTable(later).metadata().configuration
        assert config.get("delta.universalFormat.enabledFormats", "") == ""
        converted = int(ice.iceberg_table(later).metadata.properties["delta-version"])
        run_dbt(["run", "--select", "later", "--vars", json.dumps({"round": 4, "later_format": "delta"})])
        # turned off: later versions are Delta only; Iceberg readers keep the last version converted
        assert int(ice.iceberg_table(later).metadata.properties["delta-version"]) == converted
        assert deltalake.DeltaTable(later).version() > converted

    def test_deletion_vectors_make_it_iceberg_v3(self, project, deltalog_warehouse):
        """With deletion_vectors the table is IcebergCompatV3 (row tracking on): a merge and a delete mark
        rows, and Iceberg v3 readers see the same rows as delta-rs in every version."""
        run_dbt(["run", "--select", "ledger"])
        run_dbt(["run", "--select", "ledger", "--vars", json.dumps({"round": 2})])
        path = self._path(project, deltalog_warehouse, "ledger")
        config = deltalake.DeltaTable(path).metadata().configuration
        assert config["delta.enableIcebergCompatV3"] == "true" and config["delta.enableRowTracking"] == "true"
        assert config.get("delta.enableIcebergCompatV2") == "false"
        table = ice.iceberg_table(path)
        assert table.metadata.format_version == 3
        assert any(n.endswith(".puffin") for n in os.listdir(os.path.join(path, "metadata")))
        assert ice.assert_every_snapshot_matches_delta(path) >= 3
        assert len(ice.delta_rows(path)) == 15  # 0..11 merged with 8..15, then id 5 deleted

    def test_refused_with_deletion_vectors_on_iceberg_v2(self, project):
        bad = ("{{ config(materialized='table', table_format='iceberg', deletion_vectors=true,"
               " tblproperties={'delta.enableIcebergCompatV2': 'true'}) }}\nselect 1 as id")
        with open(os.path.join(project.project_root, "models", "bad.sql"), "w") as f:
            f.write(bad)
        try:
            result, out = run_dbt_and_capture(["run", "--select", "bad"], expect_pass=False)
            assert "table_format" in out and "delta.enableIcebergCompatV2" in out, out
        finally:
            os.remove(os.path.join(project.project_root, "models", "bad.sql"))


class TestIcebergCatchUp:
    @pytest.fixture(scope="class")
    @classmethod
    def models(cls):
        return {"by_day.sql": BY_DAY}

    def test_a_missed_conversion_is_caught_up_by_the_macro_and_the_catalog_says_where_it_is(
            self, project, deltalog_warehouse, monkeypatch):
        from deltalog.iceberg import conversion

        run_dbt(["run"])
        path = os.path.join(deltalog_warehouse, project.test_schema, "by_day")

        def crash(*args, **kwargs):
            raise OSError("the process died after the Delta commit")

        monkeypatch.setattr(conversion._Builder, "metadata_json", crash)
        run_dbt(["run"])  # the commit lands; its Iceberg metadata does not
        monkeypatch.undo()
        latest = deltalake.DeltaTable(path).version()
        assert int(ice.iceberg_table(path).metadata.properties["delta-version"]) < latest

        run_dbt(["docs", "generate"])
        catalog = json.load(open(os.path.join(project.project_root, "target", "catalog.json")))
        stats = catalog["nodes"]["model.test.by_day"]["stats"]
        assert stats["iceberg_version"]["value"] < stats["version"]["value"]

        relation = f"{project.test_schema}.by_day"
        _, out = run_dbt_and_capture(["run-operation", "convert_to_iceberg", "--args", json.dumps({"relation": relation})])
        assert f"(Delta version {latest})" in out, out
        ice.assert_every_snapshot_matches_delta(path)
        _, out = run_dbt_and_capture(["run-operation", "convert_to_iceberg", "--args", json.dumps({"relation": relation})])
        assert f"already at Delta version {latest}" in out, out
