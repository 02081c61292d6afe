"""In-commit timestamps (`delta.enableInCommitTimestamps`): each commit carries its time in commitInfo,
strictly increasing; history and time travel by timestamp use it (not file times), as delta-rs does."""
from __future__ import annotations

import datetime as dt
import json
import os

import deltalake
import pyarrow as pa

from deltalog import write_deltalake
from deltalog.history import history
from deltalog.snapshot import Snapshot

ICT = {"delta.enableInCommitTimestamps": "true"}


def _commit_info(uri: str, version: int) -> dict:
    with open(os.path.join(uri, "_delta_log", "%020d.json" % version)) as f:
        first = json.loads(f.readline())
    return first.get("commitInfo") or {}


def test_commits_carry_increasing_times_that_time_travel_uses(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(uri, pa.table({"x": [i]}), mode="append", configuration=ICT if i == 0 else None)
    snap = Snapshot.load(uri)
    assert "inCommitTimestamp" in snap.protocol.writer_features and snap.protocol.min_writer_version == 7
    times = [_commit_info(uri, v)["inCommitTimestamp"] for v in range(4)]
    assert times == sorted(set(times))  # strictly increasing, commitInfo the first action
    dt_rs = deltalake.DeltaTable(uri)
    assert [h["timestamp"] for h in sorted(dt_rs.history(), key=lambda h: h["version"])] == times
    dt_rs.load_as_version(dt.datetime.fromtimestamp(times[2] / 1000, dt.timezone.utc))
    assert dt_rs.version() == 2
    assert sorted(dt_rs.to_pyarrow_table().column("x").to_pylist()) == [0, 1, 2]
    # our history and time travel go by the commits' own times: make the file times lie, in reverse
    # order (delta-rs 1.6 still travels by file times)
    for v in range(4):
        os.utime(os.path.join(uri, "_delta_log", "%020d.json" % v), (1_000_000 - v, 1_000_000 - v))
    assert [h["timestamp"] for h in sorted(history(uri), key=lambda h: h["version"])] == times
    assert Snapshot.load(uri, timestamp=times[2]).version == 2
    assert Snapshot.load(uri, timestamp=times[2] - 1).version == 1


def test_switching_them_on_records_the_enablement(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"x": [0]}))
    write_deltalake(uri, pa.table({"x": [1]}), mode="append")
    write_deltalake(uri, pa.table({"x": [2]}), mode="append", configuration=ICT)  # version 2
    conf = Snapshot.load(uri).configuration
    assert conf["delta.inCommitTimestampEnablementVersion"] == "2"
    assert int(conf["delta.inCommitTimestampEnablementTimestamp"]) == _commit_info(uri, 2)["inCommitTimestamp"]
    assert "inCommitTimestamp" not in _commit_info(uri, 1)
    write_deltalake(uri, pa.table({"x": [3]}), mode="append")
    assert _commit_info(uri, 3)["inCommitTimestamp"] > _commit_info(uri, 2)["inCommitTimestamp"]
    assert Snapshot.load(uri).configuration["delta.inCommitTimestampEnablementVersion"] == "2"
    assert deltalake.DeltaTable(uri).version() == 3
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table().column("x").to_pylist()) == [0, 1, 2, 3]
