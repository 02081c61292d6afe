"""Structured Streaming into a table exactly once (`deltalog.spark.streaming.batch_writer`): a real file
stream, `availableNow` runs, each micro-batch one commit with `txn(appId, batch id)`; a batch Spark
replays after a crash between our commit and its own checkpoint commit lands nothing twice; and the
idempotent write (`txn_app_id` / `txn_version`, as delta-spark names them) on its own."""
from __future__ import annotations

import json
import os

import deltalake
import pytest

from deltalog.errors import ConcurrentTransactionException
from deltalog.snapshot import Snapshot
from deltalog.spark import operations as ops
from deltalog.spark.streaming import batch_writer

pytestmark = pytest.mark.spark
APP = "orders-stream"


def _land(folder, name: str, ids: range) -> None:
    """A JSON file appearing in the landing folder whole (written aside, then renamed)."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.writelines(json.dumps({"order_id": i, "amount": i * 10}) + "\n" for i in ids)
    os.replace(tmp, os.path.join(folder, name))


def _run(spark, landing, table, checkpoint) -> list[int]:
    """One availableNow run of the stream; the batch ids it handed to the sink."""
    stream = spark.readStream.schema("order_id bigint, amount bigint").json(str(landing))
    write, seen = batch_writer(table, APP), []

    def sink(batch, batch_id):
        seen.append(batch_id)
        write(batch, batch_id)

    query = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    query.stop()  # leaves the active queries, so that the next run may take the same checkpoint
    assert query.exception() is None
    return seen


def _ids(table) -> list[int]:
    return sorted(deltalake.DeltaTable(table).to_pyarrow_table().column("order_id").to_pylist())


def test_a_file_stream_lands_each_batch_once_and_a_replayed_batch_commits_nothing(spark, tmp_path):
    landing, table, checkpoint = tmp_path / "landing", str(tmp_path / "orders"), str(tmp_path / "cp")
    _land(landing, "a.json", range(0, 5))
    _run(spark, landing, table, checkpoint)
    first = Snapshot.load(table)
    assert _ids(table) == list(range(5)) and first.app_transactions == {APP: 0}
    _land(landing, "b.json", range(5, 8))
    _run(spark, landing, table, checkpoint)
    second = Snapshot.load(table)
    assert _ids(table) == list(range(8)) and second.app_transactions == {APP: 1}
    # a crash after our commit, before Spark committed the batch in its checkpoint: Spark runs batch 1
    # again from its offset log on restart
    for name in ("1", ".1.crc"):  # the entry and Hadoop's checksum beside it
        if os.path.exists(os.path.join(checkpoint, "commits", name)):
            os.remove(os.path.join(checkpoint, "commits", name))
    assert _run(spark, landing, table, checkpoint) == [1]  # Spark ran batch 1 again
    assert Snapshot.load(table).version == second.version  # and it committed nothing
    assert _ids(table) == list(range(8))
    _land(landing, "c.json", range(8, 10))
    _run(spark, landing, table, checkpoint)
    assert _ids(table) == list(range(10)) and Snapshot.load(table).app_transactions == {APP: 2}
    # each batch's commit as delta-rs reads it: one WRITE per batch
    history = deltalake.DeltaTable(table).history()
    assert sorted(h["operation"] for h in history) == ["WRITE"] * 3


def test_an_idempotent_write_is_skipped_once_recorded(spark, tmp_path):
    uri = str(tmp_path / "t")
    rows = spark.sql("select id from range(3)")
    assert ops.write_dataframe(rows, uri, txn_app_id="job", txn_version=4) == 0
    assert ops.write_dataframe(rows, uri, txn_app_id="job", txn_version=4) is None  # the same again
    assert ops.write_dataframe(rows, uri, txn_app_id="job", txn_version=3) is None  # an older one
    assert ops.write_dataframe(rows, uri, txn_app_id="other", txn_version=0) == 1  # another app
    assert ops.write_dataframe(rows, uri, txn_app_id="job", txn_version=5) == 2
    assert Snapshot.load(uri).app_transactions == {"job": 5, "other": 0}
    assert len(_ids_of(uri)) == 9
    with pytest.raises(ValueError, match="needs both txn_app_id and txn_version"):
        ops.write_dataframe(rows, uri, txn_app_id="job")
    with pytest.raises(ValueError, match="txn_version must be a whole number"):
        ops.write_dataframe(rows, uri, txn_app_id="job", txn_version=-1)


def test_a_replay_racing_the_original_batch_is_taken_as_done(spark, tmp_path, monkeypatch):
    """Two runs of one batch at once: the loser's conflict names the app id, and the sink takes the
    batch as committed instead of failing the query."""
    from deltalog.spark import streaming

    uri = str(tmp_path / "t")
    rows = spark.sql("select id from range(3)")
    ops.write_dataframe(rows, uri, txn_app_id=APP, txn_version=0)
    real = streaming.write_dataframe

    def racing(*args, **kwargs):
        # the other run of batch 1 lands while this one writes
        ops.write_dataframe(rows, uri, txn_app_id=APP, txn_version=1)
        raise ConcurrentTransactionException("lost to the other run", winning_version=1, winning_operation="WRITE",
                                             winner_changed_data=True, row_level=False)

    monkeypatch.setattr(streaming, "write_dataframe", racing)
    batch_writer(uri, APP)(rows, 1)  # no error: the batch is in the table once
    monkeypatch.setattr(streaming, "write_dataframe", real)
    assert Snapshot.load(uri).app_transactions == {APP: 1} and len(_ids_of(uri)) == 6


def _ids_of(uri):
    return deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()
