"""Every piece of process-wide state, driven from 8 threads at once (issue 53): dbt runs a command's nodes
on a thread pool, so each must be set once before the threads start or guarded.

The state, and where it lives:
- RUNTIME (runtime/session.py): the one SparkSession (a JVM of the process, or the server's), its views,
  the once-per-warehouse notes; with the server, the attachment (runtime/spark_server.py);
- the storage prefix registry (filesystem.configure / storage_options_for);
- the store probes: a warehouse's reachability (object_store.probe_warehouse) and a bucket's
  put-if-absent check (ObjectLogStore._check_commit_safety);
- the store cache (stores.log_store_for: one log store per location and options) and pyarrow's clients
  (StorageOptions.arrow_filesystem);
- the in-process query cache (driver_queries._rows);
- the writer's log de-duplication (spark/writer._log_once);
- the lazily imported packages (lazy_imports: tests/functional/test_first_paths.py)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[2]
THREADS = 8


def at_once(fn, n: int = THREADS) -> list:
    """`fn(i)` on n threads released together; their results (an exception fails the test)."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


def test_storage_prefix_registry(tmp_path):
    from deltalog.storage import files as fs

    def configure_and_read(i):
        prefix = f"s3://bucket-{i}/wh"
        fs.configure(prefix, {"endpoint": f"http://127.0.0.1:{9000 + i}", "access_key_id": f"k{i}",
                              "secret_access_key": "s", "allow_http": "true"})
        seen = [fs.storage_options_for(f"s3://bucket-{i}/wh/t/_delta_log").bare.get("access_key_id")
                for _ in range(200)]
        fs.configure(f"s3://bucket-{i}/wh/deeper", {"access_key_id": f"deep{i}", "secret_access_key": "s"})
        return seen, fs.storage_options_for(f"s3://bucket-{i}/wh/deeper/t").bare.get("access_key_id")

    try:
        for i, (seen, deeper) in enumerate(at_once(configure_and_read)):
            assert set(seen) == {f"k{i}"}
            assert deeper == f"deep{i}"  # the longest prefix wins
    finally:
        for i in range(THREADS):
            fs.configure(f"s3://bucket-{i}/wh", None)
            fs.configure(f"s3://bucket-{i}/wh/deeper", None)


@pytest.fixture
def puts(monkeypatch) -> list:
    """The keys obstore is asked to put, in order."""
    import obstore

    keys = []
    real_put = obstore.put

    def counting_put(store, key, *args, **kwargs):
        keys.append(key)
        return real_put(store, key, *args, **kwargs)

    monkeypatch.setattr(obstore, "put", counting_put)
    return keys


def test_a_warehouse_is_probed_once(tmp_path, puts):
    from deltalog.storage import object_store

    root = (tmp_path / "wh").as_uri()
    (tmp_path / "wh").mkdir()
    at_once(lambda i: object_store.probe_warehouse(root, {}))
    assert len([k for k in puts if ".deltalog-probe-" in k]) == 1
    assert list((tmp_path / "wh").iterdir()) == []  # the probe object is gone


def test_a_bucket_is_checked_for_put_if_absent_once(monkeypatch, puts):
    from deltalog.storage import object_store
    from deltalog.storage.object_store import ObjectLogStore

    monkeypatch.setattr(object_store, "_probed", {})
    stores = [ObjectLogStore(f"memory://shared-state/t{i}") for i in range(THREADS)]
    at_once(lambda i: stores[i].write_if_absent(f"{i:020d}.json", b"{}"))
    # one probe: a create and the second create that must be refused
    assert len([k for k in puts if "put-if-absent-probe" in k]) == 2


def test_one_log_store_and_one_arrow_client_per_location_and_options():
    from deltalog.storage.options import StorageOptions
    from deltalog.storage import log_store_for

    options = {"endpoint": "http://127.0.0.1:1", "access_key_id": "k", "secret_access_key": "s",
               "allow_http": "true", "region": "us-east-1"}
    stores = at_once(lambda i: log_store_for("s3://shared-state-bucket/wh/t", options))
    assert len({id(s) for s in stores}) == 1
    clients = at_once(lambda i: StorageOptions.of({**options, "endpoint": "http://127.0.0.1:2"})
                      .arrow_filesystem("s3://shared-state-bucket/wh/t/part-0.parquet")[0])
    assert len({id(c) for c in clients}) == 1


def test_the_writers_notes_are_logged_once(caplog):
    from deltalog.spark import writer

    message = f"shared-state note {id(caplog)}"
    with caplog.at_level(logging.INFO, logger=writer.log.name):
        at_once(lambda i: [writer._log_once(message) for _ in range(50)])
    assert [r.getMessage() for r in caplog.records].count(message) == 1


def test_the_query_cache_answers_every_thread(tmp_path):
    from deltalog import Snapshot, write_deltalake
    from dbt.adapters.deltalog import driver_queries

    uris = []
    for t in range(4):
        uri = str(tmp_path / f"t{t}")
        write_deltalake(uri, pa.table({"id": list(range(t * 100, t * 100 + 100)), "v": [str(t)] * 100}))
        uris.append(uri)

    def read(i):
        snapshot = Snapshot.load(uris[i % 4])
        return [driver_queries._rows(snapshot, ["id", "v"]).column("id").to_pylist() for _ in range(20)]

    for i, answers in enumerate(at_once(read)):
        t = i % 4
        assert all(a == list(range(t * 100, t * 100 + 100)) for a in answers)


RUNTIME_CHILD = textwrap.dedent("""\
    import json, sys, threading
    from concurrent.futures import ThreadPoolExecutor
    import dbt.adapters.deltalog
    from dbt.adapters.deltalog.runtime import spark_server
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    server = sys.argv[1] == "1"
    barrier = threading.Barrier(8)

    def first_node(i):
        barrier.wait()
        spark = RUNTIME.get_spark("local[1]", {"spark.sql.shuffle.partitions": "1"}, server=server,
                                  idle_timeout=60)
        views = RUNTIME.views(spark)
        said = RUNTIME.first_description("/warehouse")
        return id(spark), id(views), said, spark.range(i + 1).count()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(first_node, range(8)))
    print(json.dumps({"sessions": len({r[0] for r in results}), "views": len({r[1] for r in results}),
                      "said": sum(r[2] for r in results), "counts": [r[3] for r in results],
                      "servers": len(spark_server.list_servers()) if server else 0}))
    """)


@pytest.mark.spark
@pytest.mark.parametrize("server", [True, False], ids=["server", "jvm"])
def test_the_runtime_is_made_once_by_eight_first_nodes(tmp_path, server):
    """RUNTIME: one session (one attachment to one server), one set of views, one note per warehouse."""
    from dbt.adapters.deltalog.runtime.spark_server import stop_servers

    stop_servers()
    try:
        out = subprocess.run([sys.executable, "-c", RUNTIME_CHILD, "1" if server else "0"], capture_output=True,
                             text=True, cwd=tmp_path, timeout=300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        import json

        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result == {"sessions": 1, "views": 1, "said": 1, "counts": list(range(1, 9)),
                          "servers": 1 if server else 0}
    finally:
        stop_servers()
