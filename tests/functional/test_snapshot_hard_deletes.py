"""Snapshots' `hard_deletes` (ignore / invalidate / new_record) end to end: a row deleted from the source,
then inserted again; with a single and a composite key, and with `dbt_valid_to_current`. A deletion
record says which entity was deleted: its key and columns come from the snapshotted row, as dbt's own
snapshot SQL takes them."""
from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from dbt.tests.util import run_dbt

pytestmark = pytest.mark.dbt

SOURCE = """
{{ config(materialized='table') }}
select * from (values (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)) as t(id, name, grp)
where not array_contains(split('{{ var("gone", "") }}', ','), cast(id as string))
"""

SNAPSHOT = """
{{% snapshot snap %}}
{{{{ config(strategy='check', check_cols='all', unique_key={key}, hard_deletes='{mode}'{extra}) }}}}
select * from {{{{ ref('src') }}}}
{{% endsnapshot %}}
"""


def _rows(project, deltalog_warehouse) -> list[dict]:
    path = Path(deltalog_warehouse) / project.test_schema / "snap"
    return pa.table(deltalake.DeltaTable(str(path)).to_pyarrow_table()).to_pylist()


def _round(gone: str) -> None:
    run_dbt(["run", "--vars", json.dumps({"gone": gone})])
    run_dbt(["snapshot"])


def _current(row, current_marker) -> bool:
    return row["dbt_valid_to"] is None if current_marker is None else str(row["dbt_valid_to"]).startswith("9999")


class _HardDeletes:
    mode = "new_record"
    key = "'id'"
    extra = ""
    current_marker = None

    @pytest.fixture(scope="class")
    def models(self):
        return {"src.sql": SOURCE}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap.sql": SNAPSHOT.format(key=self.key, mode=self.mode, extra=self.extra)}

    def test_delete_then_reinsert(self, project, deltalog_warehouse):
        _round("")
        _round("2")  # id 2 deleted from the source
        rows = _rows(project, deltalog_warehouse)
        twos = sorted((r for r in rows if r["id"] == 2), key=lambda r: str(r["dbt_valid_from"]))
        others = [r for r in rows if r["id"] != 2]
        assert all(_current(r, self.current_marker) for r in others) and len(others) == 2
        if self.mode == "ignore":
            assert len(twos) == 1 and _current(twos[0], self.current_marker)
        elif self.mode == "invalidate":
            assert len(twos) == 1 and not _current(twos[0], self.current_marker)
        else:
            assert len(rows) == 4, rows
            assert not _current(twos[0], self.current_marker) and twos[0]["dbt_is_deleted"] == "False"
            deleted = twos[1]
            # which entity was deleted: its key and columns, not NULLs
            assert (deleted["id"], deleted["name"], deleted["grp"]) == (2, "b", 20), deleted
            assert deleted["dbt_is_deleted"] == "True" and _current(deleted, self.current_marker)
            assert None not in (r["id"] for r in rows)

        _round("")  # id 2 back
        rows = _rows(project, deltalog_warehouse)
        twos = sorted((r for r in rows if r["id"] == 2), key=lambda r: str(r["dbt_valid_from"]))
        current = [r for r in twos if _current(r, self.current_marker)]
        assert len(current) == 1 and (current[0]["name"], current[0]["grp"]) == ("b", 20)
        if self.mode == "new_record":
            assert len(twos) == 3 and current[0]["dbt_is_deleted"] == "False"
            assert [r["dbt_is_deleted"] for r in twos] == ["False", "True", "False"]
        elif self.mode == "invalidate":
            assert len(twos) == 2
        else:
            assert len(twos) == 1


class TestHardDeletesIgnore(_HardDeletes):
    mode = "ignore"


class TestHardDeletesInvalidate(_HardDeletes):
    mode = "invalidate"


class TestHardDeletesNewRecord(_HardDeletes):
    mode = "new_record"


class TestHardDeletesNewRecordCompositeKey(_HardDeletes):
    mode = "new_record"
    key = "['id', 'grp']"


class TestHardDeletesNewRecordValidToCurrent(_HardDeletes):
    mode = "new_record"
    extra = ", dbt_valid_to_current=\"to_timestamp('9999-12-31')\""
    current_marker = "9999"


class TestSnapshotCommitsAgainstTheVersionItRead:
    """The staging view reads the snapshot's own table; a commit landing between that read and the merge
    fails the snapshot by Delta's name, nothing written, and the next run reads the table as it is."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"src.sql": SOURCE}

    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"snap.sql": SNAPSHOT.format(key="'id'", mode="invalidate", extra="")}

    def test_a_commit_landing_before_the_merge_is_a_conflict(self, project, deltalog_warehouse, monkeypatch):
        from dbt.tests.util import run_dbt_and_capture

        from deltalog import Snapshot
        from deltalog.spark import operations

        _round("")
        path = str(Path(deltalog_warehouse) / project.test_schema / "snap")
        real_merge = operations.merge

        def merge_after_another_writer(spark, table, *args, **kwargs):
            if table.uri.rstrip("/").endswith("/snap"):  # another writer removes a row first
                operations.delete(spark, table.uri, "id = 3")  # by location: a handle of its own
            return real_merge(spark, table, *args, **kwargs)

        monkeypatch.setattr(operations, "merge", merge_after_another_writer)
        run_dbt(["run", "--vars", json.dumps({"gone": "1"})])
        before = Snapshot.load(path).version
        _, out = run_dbt_and_capture(["snapshot"], expect_pass=False)
        assert "ConcurrentAppendException" in out or "ConcurrentDeleteReadException" in out, out
        assert Snapshot.load(path).version == before + 1  # the other writer's delete, and nothing of ours
        assert sorted(r["id"] for r in _rows(project, deltalog_warehouse)) == [1, 2]
        monkeypatch.setattr(operations, "merge", real_merge)
        run_dbt(["snapshot"])  # the rerun reads the table as it now is: id 1 closed, id 3 snapshotted again
        rows = sorted(_rows(project, deltalog_warehouse), key=lambda r: r["id"])
        assert [(r["id"], r["dbt_valid_to"] is None) for r in rows] == [(1, False), (2, True), (3, True)]
