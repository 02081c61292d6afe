"""Files an operation writes before its commit are staged in its transaction: whichever step fails after
them (the data write, the change feed, the commit), every file staged and named by no landed commit is
deleted, and the table holds only files its log names."""
from __future__ import annotations

import glob
import json
import os

import pytest

from deltalog.deletion_vectors import dv_file_path
from deltalog.paths import decode_path
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops

pytestmark = pytest.mark.spark
DVS_AND_FEED = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}


class Boom(RuntimeError):
    pass


def _unnamed_files(uri: str) -> list[str]:
    """Files in the table folder (outside `_delta_log`) that no commit of the log names."""
    named = set()
    for commit in glob.glob(os.path.join(uri, "_delta_log", "*.json")):
        for line in open(commit):
            action = json.loads(line)
            for kind in ("add", "remove", "cdc"):
                if kind in action:
                    named.add(decode_path(action[kind]["path"]))
                    dv = dv_file_path(action[kind].get("deletionVector"))
                    if dv:
                        named.add(dv)
    present = {os.path.relpath(p, uri) for p in glob.glob(os.path.join(uri, "**", "*"), recursive=True)
               if os.path.isfile(p) and "_delta_log" not in p and not os.path.basename(p).startswith(".")}
    return sorted(present - named)


def _table(spark, uri: str, configuration=DVS_AND_FEED) -> int:
    return ops.write_dataframe(spark.sql("select id, id % 3 as k, 'a' as s from range(60)"), uri, mode="overwrite",
                               configuration=configuration)


def _failing(monkeypatch, module, name):
    """`module.name` fails (having written nothing of its own: what it wrote it could not name)."""
    def fail(*args, **kwargs):
        raise Boom(name)

    monkeypatch.setattr(module, name, fail)


def test_replace_where_whose_data_write_fails_leaves_no_deletion_vector(spark, tmp_path, monkeypatch):
    """The rows replace_where replaces are marked (a DV file written) before the new rows are written."""
    from deltalog.spark.dml import write

    uri = str(tmp_path / "t")
    version = _table(spark, uri)
    _failing(monkeypatch, write, "write_files")
    with pytest.raises(Boom):
        ops.write_dataframe(spark.sql("select id, 0L as k, 'new' as s from range(5)"), uri, mode="overwrite",
                            replace_where="k = 0")
    assert Snapshot.load(uri).version == version
    assert _unnamed_files(uri) == []


def test_merge_whose_change_feed_write_fails_leaves_nothing(spark, tmp_path, monkeypatch):
    from deltalog.spark.dml.merge import commit as merge

    uri = str(tmp_path / "t")
    version = _table(spark, uri)
    _failing(monkeypatch, merge, "write_change_data")
    source = spark.sql("select id, id % 3 as k, 'merged' as s from range(50, 70)")
    with pytest.raises(Boom):
        ops.merge(spark, uri, source, "s.id = t.id", when_matched_update="*", when_not_matched_insert="*",
                  source_alias="s", target_alias="t")
    assert Snapshot.load(uri).version == version
    assert _unnamed_files(uri) == []


@pytest.mark.parametrize("configuration", [{"delta.enableChangeDataFeed": "true"}, DVS_AND_FEED],
                         ids=["copy-on-write", "deletion-vectors"])
def test_delete_whose_commit_fails_leaves_nothing(spark, tmp_path, monkeypatch, configuration):
    from deltalog.transaction import Transaction

    uri = str(tmp_path / "t")
    version = _table(spark, uri, configuration)

    def commit(self, *args, **kwargs):
        raise Boom("commit")

    monkeypatch.setattr(Transaction, "commit", commit)
    with pytest.raises(Boom):
        ops.delete(spark, uri, "id % 2 = 0")
    assert Snapshot.load(uri).version == version
    assert _unnamed_files(uri) == []
