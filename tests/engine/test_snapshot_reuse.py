"""A small table's latest snapshot is reused while its log is unchanged (snapshot_reuse.py), and never
once a commit landed, a checkpoint was written, or the table was dropped and made again."""
import shutil

import pyarrow as pa

from deltalog import DeltaTable, write_deltalake
from deltalog.checkpoint_write import write_checkpoint
from deltalog.snapshot_reuse import latest_snapshot


def _rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64())})


def test_reused_until_the_log_changes(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, _rows(3))
    first = latest_snapshot(DeltaTable(uri))
    assert latest_snapshot(DeltaTable(uri)) is first  # nothing replayed again
    write_deltalake(uri, _rows(2), mode="append")  # by this process or any other: the log says
    second = latest_snapshot(DeltaTable(uri))
    assert second is not first and second.version == 1 and second.num_files == 2
    assert latest_snapshot(DeltaTable(uri)) is second


def test_a_table_made_again_at_the_same_version_is_not_the_kept_one(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, _rows(3))
    kept = latest_snapshot(DeltaTable(uri))
    shutil.rmtree(uri)
    write_deltalake(uri, pa.table({"name": ["a"]}))  # version 0 again, another table
    again = latest_snapshot(DeltaTable(uri))
    assert again.version == 0 and again.metadata.id != kept.metadata.id
    assert [f["name"] for f in again.schema_json["fields"]] == ["name"]


def test_a_checkpoint_of_the_same_version_gives_the_same_rows(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, _rows(3))
    write_deltalake(uri, _rows(2), mode="append")
    before = latest_snapshot(DeltaTable(uri))
    write_checkpoint(DeltaTable(uri).store, before)
    after = latest_snapshot(DeltaTable(uri))
    assert after.version == before.version and sorted(after.files.column("path").to_pylist()) == sorted(
        before.files.column("path").to_pylist())
