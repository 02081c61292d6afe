"""Tables on S3, against a real S3 server (SeaweedFS on 127.0.0.1, started by the test): the log
through obstore's put-if-absent, data files as whole objects, checkpoints read from their bytes.
delta-rs reads what we write there and we read what it writes; concurrent writers in separate
processes each land every commit exactly once. A store that overwrites instead of refusing a second
create is refused before anything is committed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import deltalake
import pyarrow as pa
import pytest

from deltalog import Snapshot, write_deltalake
from deltalog.storage import object_store
from deltalog.storage.object_store import UnsafeStoreError
from tests.support.seaweed import seaweedfs_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        yield server


def rows_of(uri, options, columns):
    t = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=columns)
    return sorted(tuple(r[c] for c in columns) for r in t.to_pylist())


def test_delta_rs_reads_what_we_write_on_s3(s3):
    uri, options = s3.uri("ours", "orders"), s3.storage_options()
    data = pa.table({"id": [1, 2, 3], "day": ["2026-11-01", "2026-11-01", "2026-11-02"], "amount": [1.5, 2.5, 3.5]})
    assert write_deltalake(uri, data, partition_by=["day"], configuration={"delta.checkpointInterval": "2"},
                           storage_options=options) == 0
    assert write_deltalake(uri, pa.table({"id": [4], "day": ["2026-11-03"], "amount": [4.5]}), mode="append",
                           storage_options=options) == 1
    assert write_deltalake(uri, pa.table({"id": [5], "day": ["2026-11-02"], "amount": [5.5]}), mode="overwrite",
                           predicate="day = '2026-11-02'", storage_options=options) == 2
    theirs = deltalake.DeltaTable(uri, storage_options=options)
    assert theirs.version() == 2
    assert rows_of(uri, options, ["id", "day"]) == [(1, "2026-11-01"), (2, "2026-11-01"), (4, "2026-11-03"),
                                                     (5, "2026-11-02")]
    assert [h["operation"] for h in theirs.history()] == ["WRITE", "WRITE", "WRITE"]
    # version 2 is a checkpoint (interval 2), read back from its bytes on S3
    snap = Snapshot.load(uri, storage_options=options)
    assert snap.version == 2 and snap.num_files == 3
    assert sorted(snap.files.column("path").to_pylist()) == sorted(theirs.file_uris()) or \
        sorted(uri + "/" + p for p in snap.files.column("path").to_pylist()) == sorted(theirs.file_uris())
    assert Snapshot.load(uri, version=0, storage_options=options).num_files == 2


def test_we_read_and_append_to_what_delta_rs_writes_on_s3(s3):
    uri, options = s3.uri("theirs", "events"), s3.storage_options()
    for i in range(12):  # delta-rs checkpoints at 10 by default
        deltalake.write_deltalake(uri, pa.table({"id": [i], "kind": ["a" if i % 2 else "b"]}), mode="append",
                                  partition_by=["kind"], storage_options=options)
    theirs = deltalake.DeltaTable(uri, storage_options=options)
    snap = Snapshot.load(uri, storage_options=options)
    assert snap.version == theirs.version() == 11
    assert sorted(snap.files.column("path").to_pylist()) == sorted(theirs.file_uris()) or \
        sorted(uri + "/" + p for p in snap.files.column("path").to_pylist()) == sorted(theirs.file_uris())
    assert write_deltalake(uri, pa.table({"id": [100], "kind": ["c"]}), mode="append", storage_options=options) == 12
    assert rows_of(uri, options, ["id"]) == [(i,) for i in range(12)] + [(100,)]


WRITER = """
import sys, json
sys.path.insert(0, {root!r})
import pyarrow as pa
from deltalog import write_deltalake
uri, options, writer, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
versions = []
for i in range(n):
    versions.append(write_deltalake(uri, pa.table({{"writer": [writer], "seq": [i]}}), mode="append",
                                    storage_options=options))
print(json.dumps(versions))
"""


def test_three_processes_commit_every_append_once_on_s3(s3):
    uri, options = s3.uri("race", "t"), s3.storage_options()
    write_deltalake(uri, pa.table({"writer": pa.array([], pa.int64()), "seq": pa.array([], pa.int64())}),
                    storage_options=options)
    script = WRITER.format(root=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", script, uri, json.dumps(options), str(w), "15"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(3)]
    versions = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        versions += json.loads(out.strip().splitlines()[-1])
    assert sorted(versions) == list(range(1, 46))  # every commit landed once, no version twice
    assert rows_of(uri, options, ["writer", "seq"]) == sorted((w, i) for w in range(3) for i in range(15))
    assert deltalake.DeltaTable(uri, storage_options=options).version() == 45


def test_a_store_that_overwrites_is_refused_before_committing(monkeypatch):
    """Some S3 emulators ignore `If-None-Match: *`; two writers could then both 'create' a version."""
    import obstore

    real_put = obstore.put

    def put_ignoring_conditions(store, path, data, **kwargs):
        kwargs.pop("mode", None)
        return real_put(store, path, data, **kwargs)

    monkeypatch.setattr(obstore, "put", put_ignoring_conditions)
    monkeypatch.setattr(object_store, "_probed", {})
    uri = "memory://overwriting-store/t"
    with pytest.raises(UnsafeStoreError, match="deltalog_single_writer"):
        write_deltalake(uri, pa.table({"id": [1]}))
    # declared single writer: the user takes responsibility, and the commit goes through
    assert write_deltalake(uri, pa.table({"id": [1]}), storage_options={"deltalog_single_writer": "true"}) == 0


def test_retry_options_take_delta_rs_names_and_refuse_bad_values():
    from datetime import timedelta

    from deltalog.storage.options import StorageOptions

    def retry_config(options):
        return StorageOptions.of(options).retry_config

    assert retry_config({"AWS_REGION": "x"}) is None  # object_store's own defaults
    config = retry_config({"retry_timeout": "2 min", "max_retries": "4"})
    assert config["retry_timeout"] == timedelta(minutes=2) and config["max_retries"] == 4
    assert retry_config({"retry_timeout": "500ms"})["retry_timeout"] == timedelta(milliseconds=500)
    assert retry_config({"RETRY_TIMEOUT": "30"})["retry_timeout"] == timedelta(seconds=30)
    assert "retry_timeout" not in StorageOptions.of({"retry_timeout": "3s", "AWS_REGION": "x"}).obstore_settings()[0]
    with pytest.raises(ValueError, match="retry_timeout must be a duration"):
        retry_config({"retry_timeout": "soon"})
    with pytest.raises(ValueError, match="max_retries must be a whole number"):
        retry_config({"max_retries": "many"})
