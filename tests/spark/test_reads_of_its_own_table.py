"""A write computed from the table it writes (dbt's `{{ this }}`: a counter read and incremented, an
INSERT of the next id) is made against the version it read (`read_version`). A commit that landed
after that read is a conflict, named, with nothing written; it is never overwritten by rows computed
before it (a lost update). Found by the 8-process dbt load on S3 at WriteSerializable: 3 of 40
increments lost when the merge ran against the latest version instead of the one its source read."""
from __future__ import annotations

import pytest

from deltalog.errors import ConcurrentModificationError
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.reader import snapshot_dataframe

pytestmark = pytest.mark.spark

LEVELS = ["Serializable", "WriteSerializable"]


def counter_table(spark, path, level: str) -> str:
    uri = str(path / "t")
    ops.write_dataframe(spark.sql("select -1L as id, 0L as v union all select 1L, 10L"), uri, mode="overwrite",
                        configuration={"delta.isolationLevel": level})
    return uri


def increment(spark, uri: str, version: int):
    """The counter row plus one, computed from `version` of the table."""
    return snapshot_dataframe(spark, Snapshot.load(uri, version=version)).where("id = -1").selectExpr("id", "v + 1 as v")


def merge(spark, uri: str, source, **kwargs):
    return ops.merge(spark, uri, source, "s.id = t.id", when_matched_update="*", when_not_matched_insert="*",
                     source_alias="s", target_alias="t", **kwargs)


def rows(spark, uri: str) -> dict:
    return {r["id"]: r["v"] for r in snapshot_dataframe(spark, Snapshot.load(uri)).collect()}


@pytest.mark.parametrize("level", LEVELS)
def test_a_merge_computed_from_an_older_version_conflicts_instead_of_losing_an_update(spark, tmp_path, level):
    uri = counter_table(spark, tmp_path, level)
    read = Snapshot.load(uri).version
    stale = increment(spark, uri, read)
    merge(spark, uri, increment(spark, uri, read))  # another writer's increment lands first
    before = Snapshot.load(uri).version
    with pytest.raises(ConcurrentModificationError):
        merge(spark, uri, stale, read_version=read)
    assert Snapshot.load(uri).version == before and rows(spark, uri) == {-1: 1, 1: 10}
    # run again, as dbt's rerun does: from the version it now reads
    latest = Snapshot.load(uri).version
    merge(spark, uri, increment(spark, uri, latest), read_version=latest)
    assert rows(spark, uri) == {-1: 2, 1: 10}


@pytest.mark.parametrize("level", LEVELS)
def test_an_append_computed_from_an_older_version_conflicts_with_a_change_it_did_not_see(spark, tmp_path, level):
    uri = counter_table(spark, tmp_path, level)
    read = Snapshot.load(uri).version
    next_id = snapshot_dataframe(spark, Snapshot.load(uri, version=read)).selectExpr("max(id) + 1 as id", "0L as v")
    merge(spark, uri, increment(spark, uri, read))  # a change to rows the append read
    with pytest.raises(ConcurrentModificationError):
        ops.write_dataframe(next_id, uri, mode="append", read_version=read)
    assert rows(spark, uri) == {-1: 1, 1: 10}


def test_a_blind_append_landing_in_between_does_not_conflict_at_write_serializable(spark, tmp_path):
    uri = counter_table(spark, tmp_path, "WriteSerializable")
    read = Snapshot.load(uri).version
    stale = increment(spark, uri, read)
    ops.write_dataframe(spark.sql("select 2L as id, 20L as v"), uri, mode="append")  # blind: reads nothing
    merge(spark, uri, stale, read_version=read)
    assert rows(spark, uri) == {-1: 1, 1: 10, 2: 20}
