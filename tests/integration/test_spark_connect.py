"""`method: connect`: dbt runs on a real Spark Connect server started from pyspark's own distribution
(tests/support/spark_connect.py), the log engine in the dbt process, the data written and read by the server.

- integration_tests/ (CI: its models of every kind of node) built over Connect equals the embedded build,
- a project of every materialization and the features that needed the JVM before (deletion vectors,
  row tracking, Z-order, liquid clustering, materialized views, a streaming table exactly once, a python
  model, clones), `dbt show` and `dbt docs generate`, on a local warehouse, on S3 (SeaweedFS) and on a
  Connect server whose master is a standalone cluster;
- profiles and servers that cannot work are refused by name.
Every dbt command runs in its own process, as a user runs it.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.dbt_process import dbt
from tests.support.selection import FULL, full_only
from tests.support.spark_connect import require_client, spark_connect_server

deltalake = pytest.importorskip("deltalake")

pytestmark = [pytest.mark.dbt, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
# Columns whose values are the time of the build (current_timestamp, a check snapshot's validity)
BUILD_TIME_COLUMNS = {"customers_merge": {"first_loaded_at"},
                      "customers_snapshot": {"dbt_valid_from", "dbt_valid_to", "dbt_updated_at", "dbt_scd_id"}}


@pytest.fixture(scope="module")
def connect_url():
    require_client()
    with spark_connect_server("local[2]") as url:
        yield url


# each dbt command in its own process, as a user runs it (a whole project build may take minutes)
_dbt = functools.partial(dbt, timeout=900)


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def _profile(project: Path, name: str, schema: str, lines: list[str]) -> None:
    body = "\n".join(f"      {line}" for line in ["type: deltalog", f"schema: {schema}", "threads: 2", *lines])
    (project / "profiles.yml").write_text(f"{name}:\n  target: dev\n  outputs:\n    dev:\n{body}\n")


def _connect_lines(url: str) -> list[str]:
    return ["method: connect", f"host: {url}"]


def _rows(uri: str, storage_options: dict | None = None, drop: set = frozenset()) -> list:
    """A table's rows as delta-rs reads them (deletion vectors applied), sorted, without `drop`."""
    from deltalake import QueryBuilder

    dt = deltalake.DeltaTable(uri, storage_options=storage_options)
    table = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    table = table.drop_columns([c for c in table.column_names if c in drop])
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _tables(warehouse: Path) -> dict[str, Path]:
    return {f"{p.parent.parent.name}.{p.parent.name}": p.parent for p in warehouse.glob("*/*/_delta_log")}


# CI's selection of the shop project over Connect: the kinds of node the features project below does not build
# there (seeds, staging views, a snapshot, replace_where, microbatch, their data tests); its tables, merges,
# Python model, z-order and clustering run over Connect in test_every_materialization_over_connect.
CONNECT_SELECTION = ["--select", "+orders_snapshot +payments_daily +orders_microbatch",
                     "--indirect-selection", "cautious"]


def test_integration_project_over_connect_equals_the_embedded_build(connect_url, tmp_path):
    builds = {}
    for kind, lines in (("embedded", ["master: local[2]", "spark_server: false"]),
                        ("connect", _connect_lines(connect_url))):
        project = tmp_path / kind
        shutil.copytree(ROOT / "integration_tests", project,
                        ignore=shutil.ignore_patterns("warehouse", "target", "logs", "dbt_packages"))
        _profile(project, "shop", "shop", lines + [f"warehouse: {project / 'warehouse'}"])
        _ok(_dbt(project, "build", *([] if FULL else CONNECT_SELECTION)))
        builds[kind] = _tables(project / "warehouse")
    assert sorted(builds["connect"]) == sorted(builds["embedded"])
    assert len(builds["connect"]) >= (20 if FULL else 7)
    for name, path in builds["embedded"].items():
        drop = BUILD_TIME_COLUMNS.get(name.split(".")[1], set())
        assert _rows(str(builds["connect"][name]), drop=drop) == _rows(str(path), drop=drop), name


EVENTS = """
{{ config(materialized='incremental', unique_key='id', incremental_strategy='merge', deletion_vectors=true,
          row_tracking=true) }}
select id, id % 10 as k, cast(id * {{ var('m', 1) }} as bigint) as v from range(0, 20000, 1, 4)
{% if is_incremental() %} where id % 97 = 0 {% endif %}
"""

MODELS = {
    "events.sql": EVENTS,
    "zordered.sql": "{{ config(materialized='table', zorder_by=['a', 'b']) }}\n"
                    "select id, id % 113 as a, id % 71 as b from range(0, 50000, 1, 4)\n",
    "clustered.sql": "{{ config(materialized='table', liquid_clustered_by=['k']) }}\nselect * from {{ ref('events') }}\n",
    "deleted.sql": "{{ config(materialized='incremental', incremental_strategy='delete+insert', unique_key='id', "
                   "deletion_vectors=true) }}\nselect id, v from {{ ref('events') }} where k = 3\n",
    "totals.sql": "{{ config(materialized='materialized_view') }}\n"
                  "select k, count(*) as n, sum(v) as total from {{ ref('events') }} group by k\n",
    "by_k.py": textwrap.dedent("""\
        def model(dbt, session):
            dbt.config(materialized="table")
            return dbt.ref("events").groupBy("k").count()
        """),
    "recent.sql": "{{ config(materialized='view') }}\nselect * from {{ ref('events') }} where id >= 19990\n",
    # identity values numbered over Connect (no RDD API there), on the first build and on an append
    "numbered.sql": "{{ config(materialized='incremental', incremental_strategy='append', "
                    "identity_columns=['event_id']) }}\nselect id as v from range(0, 3)\n",
}
STREAM = """
{{ config(materialized='streaming_table') }}
select order_id, amount from {{ stream_files(var('landing'), format='json', schema='order_id bigint, amount bigint') }}
"""

CHANGES = """
{{ config(materialized='streaming_table',
          apply_changes={'keys': ['id'], 'sequence_by': 'seq', 'apply_as_deletes': "op = 'd'",
                         'except_column_list': ['op', 'seq'], 'stored_as_scd_type': var('scd', 1)}) }}
select * from {{ stream_files(var('changes'), format='json', schema='id bigint, city string, op string, seq bigint') }}
"""


def _features_project(root: Path, profile_lines: list[str], stream: bool) -> Path:
    root.mkdir(parents=True)
    (root / "models").mkdir()
    (root / "dbt_project.yml").write_text("name: features\nversion: '1.0'\nprofile: features\nconfig-version: 2\n")
    _profile(root, "features", "analytics", profile_lines)
    streams = {"orders_stream.sql": STREAM, "customers.sql": CHANGES,
               "customers_history.sql": CHANGES.replace("var('scd', 1)", "2")}
    for name, sql in {**MODELS, **(streams if stream else {})}.items():
        (root / "models" / name).write_text(sql)
    return root


def _land(folder: Path, name: str, ids: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{name}").write_text("".join(json.dumps({"order_id": i, "amount": i}) + "\n" for i in ids))
    os.replace(folder / f".{name}", folder / name)


def _check_features(project: Path, uri, options: dict | None) -> None:
    """Two runs (the second merges 1 % of the rows with deletion vectors), then every table read by
    delta-rs; then `dbt show` and `dbt docs generate`."""
    _ok(_dbt(project, "run"))
    out = _ok(_dbt(project, "run", "--vars", "{m: 2}"))
    assert "MERGE version" in out
    changed = {i for i in range(20000) if i % 97 == 0}
    expected = sorted(({"id": i, "k": i % 10, "v": i * (2 if i in changed else 1)} for i in range(20000)),
                      key=lambda r: json.dumps(r, sort_keys=True))
    assert _rows(uri("events"), options) == expected
    events = deltalake.DeltaTable(uri("events"), storage_options=options)
    from deltalog.snapshot import Snapshot

    files = Snapshot.load(uri("events"), storage_options=options).files
    assert files.column("deletion_vector").null_count < files.num_rows, "the merge marked rows with deletion vectors"
    assert {"deletionVectors", "rowTracking"} <= set(events.protocol().writer_features or [])
    assert [r for r in _rows(uri("deleted"), options)] == sorted(
        ({"id": r["id"], "v": r["v"]} for r in expected if r["k"] == 3), key=lambda r: json.dumps(r, sort_keys=True))
    totals = {r["k"]: (r["n"], r["total"]) for r in _rows(uri("totals"), options)}
    assert totals == {k: (2000, sum(r["v"] for r in expected if r["k"] == k)) for k in range(10)}
    assert {r["k"]: r["count"] for r in _rows(uri("by_k"), options)} == {k: 2000 for k in range(10)}
    zordered = deltalake.DeltaTable(uri("zordered"), storage_options=options)
    assert any(h.get("operation") == "OPTIMIZE" for h in zordered.history())
    clustered = deltalake.DeltaTable(uri("clustered"), storage_options=options)
    assert "clustering" in (clustered.protocol().writer_features or [])
    assert len(_rows(uri("clustered"), options)) == 20000
    numbered = _rows(uri("numbered"), options)
    assert sorted(r["event_id"] for r in numbered) == list(range(1, 7)), numbered  # two runs, one sequence
    assert sorted(r["v"] for r in numbered) == [0, 0, 1, 1, 2, 2]

    shown = _ok(_dbt(project, "show", "--inline", "select count(*) as c, sum(v) as s from {{ ref('recent') }}"))
    assert str(sum(r["v"] for r in expected if r["id"] >= 19990)) in shown
    _ok(_dbt(project, "docs", "generate"))
    catalog = json.loads((project / "target" / "catalog.json").read_text())
    assert any(key.endswith(".events") for key in catalog["nodes"])


def test_every_materialization_over_connect(connect_url, tmp_path):
    landing = tmp_path / "landing"
    project = _features_project(tmp_path / "p", _connect_lines(connect_url) + [f"warehouse: {tmp_path / 'wh'}"],
                                stream=True)
    uri = lambda name: str(tmp_path / "wh" / "analytics" / name)  # noqa: E731
    changes = tmp_path / "changes"
    changes.mkdir()

    def land_changes(name: str, rows: list[tuple]) -> None:
        (changes / f".{name}").write_text("".join(json.dumps(dict(zip(["id", "city", "op", "seq"], r))) + "\n"
                                                  for r in rows))
        os.replace(changes / f".{name}", changes / name)

    _land(landing, "a.json", range(0, 3))
    land_changes("a.json", [(1, "Oslo", "c", 1), (2, "Rome", "c", 1), (3, "Lima", "c", 1)])
    variables = ["--vars", json.dumps({"landing": str(landing), "changes": str(changes)})]
    streams = ["-s", "orders_stream", "customers", "customers_history"]
    _ok(_dbt(project, "run", *streams, *variables))
    _land(landing, "b.json", range(3, 5))
    land_changes("b.json", [(1, "Bern", "u", 3), (2, None, "d", 2), (1, "Nice", "u", 2)])
    out = _ok(_dbt(project, "run", *streams, *variables))
    assert "STREAMED 1 batch(es), 2 row(s)" in out
    _ok(_dbt(project, "run", *streams, *variables))  # nothing new: nothing taken twice
    assert [r["order_id"] for r in _rows(uri("orders_stream"))] == list(range(5))
    # changes applied by key in the server's Python (each batch's foreachBatch runs there)
    assert sorted((r["id"], r["city"]) for r in _rows(uri("customers"))) == [(1, "Bern"), (3, "Lima")]
    assert sorted((r["id"], r["city"], r["__START_AT"], r["__END_AT"]) for r in _rows(uri("customers_history"))) == [
        (1, "Bern", 3, None), (1, "Nice", 2, 3), (1, "Oslo", 1, 2), (2, "Rome", 1, 2), (3, "Lima", 1, None)]
    for name in ("orders_stream", "customers", "customers_history"):
        (project / "models" / f"{name}.sql").unlink()

    _check_features(project, uri, None)
    log = (project / "logs" / "dbt.log").read_text(errors="replace")
    assert "the jar's classes (clustering ranks and curve keys) run on the server" in log

    # dbt clone: a second target clones the tables of the first (shallow clones of their versions)
    (project / "state").mkdir()
    shutil.copy(project / "target" / "manifest.json", project / "state" / "manifest.json")
    profile = (project / "profiles.yml").read_text()
    (project / "profiles.yml").write_text(profile.replace("schema: analytics", "schema: analytics_clone"))
    _ok(_dbt(project, "clone", "--state", "state", "-s", "events", "zordered"))
    assert _rows(uri("../analytics_clone/events")) == _rows(uri("events"))


JAR_CHECK = textwrap.dedent("""
    import json, sys
    from dbt.adapters.deltalog.runtime.connect import connect_session
    from deltalog.spark import zorder

    FILE = "__deltalog_cluster_file"
    spark = connect_session(sys.argv[1])
    report = {"artifact": spark._deltalog_jar_artifact, "refused": getattr(spark, "_deltalog_jar_refused", None),
              "curves": {}}
    df = spark.sql("select id, concat('user-', cast(id * 7919 % 1000 as string)) as s, "
                   "case when id % 50 = 0 then null else (id * 37 % 211) / 3.0 end as d from range(0, 3000)")
    model = zorder.fit_ranges(df, ["s", "d"], num_ranges=64)
    for curve in zorder.CURVES:
        got = {}
        for with_jar in (True, False):
            spark._deltalog_jar_artifact = with_jar and report["artifact"]
            keyed, keys = zorder._with_file_ids(model, df, curve, 7, 0, None, 42)
            ids, rids = model.with_range_ids(df)
            got[with_jar] = (sorted(tuple(r) for r in keyed.select("id", *keys, FILE).collect()),
                             sorted(tuple(r) for r in ids.select("id", *rids).collect()))
        spark._deltalog_jar_artifact = report["artifact"]
        report["curves"][curve] = {"same": got[True] == got[False], "files": len({r[-1] for r in got[True][0]})}
    report["registered"] = sorted(getattr(spark, "_deltalog_registered", ()))
    # a table with deletion vectors, read through the jar's Parquet format (the server's own Spark does not
    # have it), equal to what pyarrow reads
    from deltalog.scan import read_table
    from deltalog.snapshot import Snapshot
    from deltalog.spark import operations as ops, reader
    uri = sys.argv[2]
    ops.write_dataframe(spark.range(0, 1000, 1, 4), uri, configuration={"delta.enableDeletionVectors": "true"})
    ops.delete(spark, uri, "id % 7 = 0")
    snap = Snapshot.load(uri)
    dvs = reader.files_dataframe(spark, snap, snap.files)
    report["dv"] = {"spark": sorted(r[0] for r in dvs.collect()),
                    "pyarrow": sorted(read_table(snap).column("id").to_pylist()),
                    "format": "Format: Parquet with deletion vectors" in dvs._explain_string(extended=True)}
    spark.stop()
    print("JAR-CHECK " + json.dumps(report))
""")


def test_the_jar_reaches_the_server_as_an_artifact_and_its_functions_match_plain_spark(connect_url, tmp_path):
    """The jar's clustering functions (range ids of numbers and strings, curve keys, file ranks) run on the
    server, registered by class name in this session (the server was started without the jar): the same
    numbers as the plain-Spark spelling of each, for both curves. Its Parquet format applies deletion
    vectors there too. In a process of its own: a Connect session marks its process
    (SPARK_CONNECT_MODE_ENABLED), and later classic sessions there would fail."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run([sys.executable, "-c", JAR_CHECK, connect_url, str(tmp_path / "dv")], capture_output=True,
                         text=True, timeout=600, env=env)
    line = [x for x in run.stdout.splitlines() if x.startswith("JAR-CHECK ")]
    assert line, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(line[0][len("JAR-CHECK "):])
    assert report["artifact"] is True, report["refused"]
    for curve, seen in report["curves"].items():
        assert seen == {"same": True, "files": 7}, curve  # rows spread over the 7 files, as plain Spark puts them
    assert {f"__deltalog_cluster_{c}_with_args" for c in ("rangeid", "stringrangeid", "curvekey", "rank")} \
        <= set(report["registered"])
    dv = report["dv"]
    assert dv["format"] and dv["spark"] == dv["pyarrow"] == [i for i in range(1000) if i % 7]


@full_only("over Connect, object-store data goes through the same pyarrow tasks as a session without a "
           "Hadoop connector (tests/integration/test_object_store_warehouse.py)")
def test_an_object_store_warehouse_over_connect(connect_url, tmp_path):
    from tests.support.seaweed import seaweedfs_or_skip

    with seaweedfs_or_skip() as s3:
        options = s3.storage_options()
        lines = _connect_lines(connect_url) + [f"warehouse: {s3.uri('wh')}", "storage_options:"] + \
            [f"  {k}: '{v}'" for k, v in options.items()]
        project = _features_project(tmp_path / "p", lines, stream=False)
        _check_features(project, lambda name: s3.uri("wh", "analytics", name), options)


def test_a_connect_server_on_a_standalone_cluster(tmp_path):
    """The features project on a Connect server whose master is a standalone cluster. When this machine
    can give a worker a disk of its own (a private mount namespace), a warehouse folder on that disk
    is refused first, before anything is written: the server's tasks would write where dbt cannot see."""
    from tests.support.standalone import private_mounts_available, standalone_cluster

    require_client()
    private = tmp_path / "workers_own_disk"
    private.mkdir()
    isolated = private_mounts_available() is None
    with standalone_cluster(workers=2 if isolated else 1, cores=1, memory="1g",
                            private_folders=[str(private)] if isolated else ()) as cluster, \
            spark_connect_server(cluster.master_url, {"spark.executor.memory": "768m"}) as url:
        if isolated:
            cluster.wait_for_workers(2)
            unshared = _features_project(tmp_path / "unshared", _connect_lines(url) + [
                f"warehouse: {private / 'wh'}"], stream=False)
            result = _dbt(unshared, "run")
            assert result.returncode != 0
            assert "do not share" in result.stdout, result.stdout[-3000:]
            assert not (private / "wh" / "analytics").exists()
        project = _features_project(tmp_path / "p", _connect_lines(url) + [f"warehouse: {tmp_path / 'wh'}"],
                                    stream=False)
        uri = lambda name: str(tmp_path / "wh" / "analytics" / name)  # noqa: E731
        if FULL:
            _check_features(project, uri, None)
            return
        # CI's selection: one build on the cluster, read back (the local case runs the merge, show and docs)
        _ok(_dbt(project, "run"))
        assert _rows(uri("events")) == sorted(({"id": i, "k": i % 10, "v": i} for i in range(20000)),
                                               key=lambda r: json.dumps(r, sort_keys=True))
        assert {r["k"]: r["count"] for r in _rows(uri("by_k"))} == {k: 2000 for k in range(10)}


def test_connect_profiles_that_cannot_work_are_refused_by_name(tmp_path):
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.deltalog.connections import DeltalogCredentials

    def refusal(**keys) -> str:
        with pytest.raises(DbtRuntimeError) as info:
            DeltalogCredentials.from_dict({"type": "deltalog", "schema": "s", **keys})
        return str(info.value)

    assert "needs `host`" in refusal(method="connect")
    assert "sc://host:15002" in refusal(method="connect", host="localhost:15002")
    said = refusal(method="connect", host="sc://h:15002", master="local[2]")
    assert "`master`" in said and "Nothing was run" in said
    said = refusal(host="sc://h:15002")  # dbt-spark's `host` without `method: connect`
    assert "`host`" in said and "method: connect" in said
    creds = DeltalogCredentials.from_dict({"type": "deltalog", "schema": "s", "method": "connect",
                                           "host": "sc://h:15002", "token": "t0k/en", "use_ssl": True})
    assert creds.connect_url() == "sc://h:15002/;token=t0k%2Fen;use_ssl=true"
    assert "t0k" not in json.dumps(dict(creds.connection_info()), default=str)


def test_an_unreachable_server_or_a_server_setting_fails_before_anything_runs(connect_url, tmp_path):
    from tests.support.standalone import free_port

    project = _features_project(tmp_path / "p", ["method: connect", f"host: sc://127.0.0.1:{free_port()}",
                                                 f"warehouse: {tmp_path / 'wh'}"], stream=False)
    result = _dbt(project, "run", timeout=300)
    assert result.returncode != 0
    assert "could not reach the Spark Connect server at sc://127.0.0.1:" in result.stdout
    assert not (tmp_path / "wh" / "analytics").exists()

    _profile(project, "features", "analytics", _connect_lines(connect_url) + [
        f"warehouse: {tmp_path / 'wh'}", "spark_conf:", "  spark.executor.memory: 1g"])
    result = _dbt(project, "run")
    assert result.returncode != 0
    assert "refused the setting spark.executor.memory=1g" in result.stdout
    assert not (tmp_path / "wh" / "analytics").exists()
