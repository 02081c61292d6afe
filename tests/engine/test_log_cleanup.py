"""Expired-log cleanup at checkpoint time (`deltalog.log_cleanup`): log files older than
delta.logRetentionDuration go, only below the newest checkpoint that old; the table, time travel from that
checkpoint on, and delta-rs read the rest; delta.enableExpiredLogCleanup=false keeps everything."""
from __future__ import annotations

import os
import time

import deltalake
import pyarrow as pa
import pytest

from deltalog.errors import VersionNotFoundError
from deltalog.table import DeltaTable
from deltalog.scan import read_table
from deltalog.snapshot import Snapshot
from deltalog.write import write_deltalake

DAY = 86_400


def _age(log: str, versions: range, days: float) -> None:
    """Make the log files of `versions` look `days` old."""
    when = time.time() - days * DAY
    for name in os.listdir(log):
        if name[:20].isdigit() and int(name[:20]) in versions:
            os.utime(os.path.join(log, name), (when, when))


def _commits(log: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(log) if n.endswith(".json") and n[:20].isdigit())


@pytest.mark.parametrize("cleanup", [True, False])
def test_old_log_files_go_at_checkpoint_time_below_an_old_checkpoint(tmp_path, cleanup):
    uri, log = str(tmp_path / "t"), str(tmp_path / "t" / "_delta_log")
    conf = {"delta.checkpointInterval": "5", "delta.logRetentionDuration": "interval 2 days",
            "delta.enableExpiredLogCleanup": str(cleanup).lower()}
    write_deltalake(uri, pa.table({"id": [0]}), configuration=conf)
    for i in range(1, 12):  # checkpoints at 5 and 10
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    assert _commits(log) == list(range(12))
    _age(log, range(0, 8), days=5)  # versions 0..7 (and the checkpoint at 5) are old; 8.. are new
    for i in range(12, 15):  # the checkpoint at 15 cleans up
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    write_deltalake(uri, pa.table({"id": [15]}), mode="append")
    if not cleanup:
        assert _commits(log) == list(range(16))
        return
    # the checkpoint at 5 is the newest old one: everything older goes, 5 and after stay
    assert _commits(log) == list(range(5, 16))
    assert not os.path.exists(os.path.join(log, "%020d.crc" % 4))
    assert os.path.exists(os.path.join(log, "%020d.checkpoint.parquet" % 5))
    assert sorted(read_table(Snapshot.load(uri)).column("id").to_pylist()) == list(range(16))
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == list(range(16))
    assert sorted(read_table(Snapshot.load(uri, version=5)).column("id").to_pylist()) == list(range(6))
    with pytest.raises(VersionNotFoundError):
        Snapshot.load(uri, version=3)
    assert [h["version"] for h in DeltaTable(uri).history()] == list(range(15, 4, -1))  # what the log holds


def test_nothing_goes_without_a_checkpoint_old_enough(tmp_path):
    uri, log = str(tmp_path / "t"), str(tmp_path / "t" / "_delta_log")
    write_deltalake(uri, pa.table({"id": [0]}), configuration={"delta.checkpointInterval": "5"})
    for i in range(1, 10):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append")
    _age(log, range(0, 5), days=40)  # old commits, but the checkpoint at 5 is new: the log must start there
    write_deltalake(uri, pa.table({"id": [10]}), mode="append")
    assert _commits(log) == list(range(11))
