"""`materialized='streaming_table'` through dbt: files landing in a folder (`stream_files`), each `dbt run`
taking what is new (trigger available_now) in exactly-once commits; a downstream model reads the table;
`--full-refresh` starts the stream over into a new version; the checkpoint beside the table is left
alone by VACUUM; what a dbt run cannot do is refused by name."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from deltalog.operations.vacuum import vacuum
from deltalog.snapshot import Snapshot

pytestmark = pytest.mark.dbt

ORDERS = """
{{ config(materialized='streaming_table', auto_compact=true) }}
select order_id, amount * 2 as doubled
from {{ stream_files(var('landing'), format='json', schema='order_id bigint, amount bigint') }}
"""

TOTALS = """
{{ config(materialized='table') }}
select count(*) as n, sum(doubled) as total from {{ ref('orders_stream') }}
"""


def _land(folder: Path, name: str, ids: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"order_id": i, "amount": i}) + "\n" for i in ids))
    os.replace(tmp, folder / name)


def _ids(table: Path) -> list[int]:
    return sorted(deltalake.DeltaTable(str(table)).to_pyarrow_table().column("order_id").to_pylist())


class TestStreamingTable:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders_stream.sql": ORDERS, "order_totals.sql": TOTALS}

    def test_each_run_takes_what_is_new_exactly_once(self, project, deltalog_warehouse, tmp_path_factory):
        landing = tmp_path_factory.mktemp("landing")
        variables = ["--vars", json.dumps({"landing": str(landing)})]
        table = Path(deltalog_warehouse) / project.test_schema / "orders_stream"

        # nothing landed yet: the table exists, empty, with the stream's columns
        run_dbt(["run", "-s", "orders_stream", *variables])
        assert _ids(table) == []
        _land(landing, "a.json", range(0, 4))
        run_dbt(["run", *variables])
        assert _ids(table) == [0, 1, 2, 3]
        # the model's table properties go with its batches
        assert Snapshot.load(str(table)).configuration.get("delta.autoOptimize.autoCompact") == "true"
        totals = Path(deltalog_warehouse) / project.test_schema / "order_totals"
        assert deltalake.DeltaTable(str(totals)).to_pyarrow_table().to_pylist() == [{"n": 4, "total": 12}]
        version = Snapshot.load(str(table)).version
        run_dbt(["run", "-s", "orders_stream", *variables])  # nothing new: no commit
        assert Snapshot.load(str(table)).version == version
        _land(landing, "b.json", range(4, 6))
        _, out = run_dbt_and_capture(["run", "-s", "orders_stream", *variables])
        assert _ids(table) == list(range(6)) and "STREAMED 1 batch(es), 2 row(s)" in out
        apps = Snapshot.load(str(table)).app_transactions
        assert len(apps) == 1 and list(apps.values()) == [1]  # two batches with data: ids 0 and 1

        # the checkpoint lives beside the data; VACUUM leaves it alone and the next run goes on
        checkpoint = table / "_dbt_streaming" / "checkpoint"
        assert (checkpoint / "offsets").is_dir()
        vacuum(str(table), retain_hours=0, force=True)
        assert (checkpoint / "offsets").is_dir()
        _land(landing, "c.json", range(6, 7))
        run_dbt(["run", "-s", "orders_stream", *variables])
        assert _ids(table) == list(range(7))

        # --full-refresh: the stream starts over (every file again) into a new version, history kept
        before = Snapshot.load(str(table)).version
        run_dbt(["run", "-s", "orders_stream", "--full-refresh", *variables])
        assert _ids(table) == list(range(7))
        assert Snapshot.load(str(table)).version > before
        assert deltalake.DeltaTable(str(table), version=before).to_pyarrow_table().num_rows == 7


class TestFullRefreshThatStopsEarly:
    """A `--full-refresh` forgets the stream's checkpoint before its first batch replaces the table: a run
    that fails (or is killed) in between must not leave the next plain run to take the whole input again
    on top of the rows the table still holds."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"orders_stream.sql": ORDERS}

    def test_the_next_run_finishes_the_refresh_instead_of_doubling_the_rows(self, project, deltalog_warehouse,
                                                                            tmp_path_factory):
        landing = tmp_path_factory.mktemp("landing")
        variables = ["--vars", json.dumps({"landing": str(landing)})]
        table = Path(deltalog_warehouse) / project.test_schema / "orders_stream"
        _land(landing, "a.json", range(0, 4))
        run_dbt(["run", *variables])
        assert _ids(table) == [0, 1, 2, 3]

        # `amount * 2` overflows a bigint (ANSI): the refresh's first batch fails, nothing is committed
        bad = landing / "bad.json"
        bad.write_text(json.dumps({"order_id": 99, "amount": 2 ** 62}) + "\n")
        version = Snapshot.load(str(table)).version
        run_dbt(["run", "--full-refresh", *variables], expect_pass=False)
        assert Snapshot.load(str(table)).version == version and _ids(table) == [0, 1, 2, 3]
        assert (table / "_dbt_streaming" / "full_refresh_pending").exists()

        bad.unlink()
        _, out = run_dbt_and_capture(["run", *variables])
        assert "stopped before it replaced the table; it runs again" in out
        assert _ids(table) == [0, 1, 2, 3]  # replaced, not [0, 0, 1, 1, ...]
        assert not (table / "_dbt_streaming" / "full_refresh_pending").exists()
        _land(landing, "b.json", range(4, 6))
        run_dbt(["run", *variables])  # and from there on, as any run: only what is new
        assert _ids(table) == list(range(6))


BRONZE = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select id, id * 10 as amount from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""

SILVER = """
{{ config(materialized='streaming_table') }}
select id, amount + 1 as amount_plus_one from {{ stream(ref('bronze')) }}
"""


KEYED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', change_data_feed=true) }}
select id, {{ var('tag', "'a'") }} as tag from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""

CHANGES = """
{{ config(materialized='streaming_table') }}
select id, tag, _change_type, _commit_version from {{ stream(ref('keyed'), changes=true) }}
"""


class TestStreamOfOurTable:
    @pytest.fixture(scope="class")
    def models(self):
        return {"bronze.sql": BRONZE, "silver.sql": SILVER, "keyed.sql": KEYED, "keyed_changes.sql": CHANGES}

    def test_the_change_feed_of_an_upstream_flows_downstream(self, project, deltalog_warehouse):
        changes = Path(deltalog_warehouse) / project.test_schema / "keyed_changes"
        run_dbt(["run", "-s", "keyed", "keyed_changes"])
        run_dbt(["run", "-s", "keyed", "keyed_changes", "--vars", json.dumps({"lo": 2, "hi": 4, "tag": "'b'"})])
        rows = deltalake.DeltaTable(str(changes)).to_pyarrow_table().to_pylist()
        got = sorted((r["id"], r["tag"], r["_change_type"]) for r in rows)
        # the first run: the table as inserts; the second: id 2 updated, id 3 inserted
        assert got == [(0, "a", "insert"), (1, "a", "insert"), (2, "a", "insert"), (2, "a", "update_preimage"),
                       (2, "b", "update_postimage"), (3, "b", "insert")]

    def test_a_table_downstream_reads_its_upstream_commit_by_commit(self, project, deltalog_warehouse):
        silver = Path(deltalog_warehouse) / project.test_schema / "silver"
        run_dbt(["run"])
        rows = deltalake.DeltaTable(str(silver)).to_pyarrow_table().to_pylist()
        assert sorted((r["id"], r["amount_plus_one"]) for r in rows) == [(0, 1), (1, 11), (2, 21)]
        run_dbt(["run", "--vars", json.dumps({"lo": 3, "hi": 5})])
        ids = sorted(deltalake.DeltaTable(str(silver)).to_pyarrow_table().column("id").to_pylist())
        assert ids == [0, 1, 2, 3, 4]  # the new rows once, the old ones not again
        version = Snapshot.load(str(silver)).version
        run_dbt(["run", "-s", "silver"])  # nothing new upstream
        assert Snapshot.load(str(silver)).version == version


PYTHON_STREAM = """
def model(dbt, session):
    dbt.config(materialized="streaming_table")
    landing = dbt.config.get("landing")
    return session.readStream.schema("order_id bigint, amount bigint").json(landing)
"""


class TestPythonStreamingTable:
    @pytest.fixture(scope="class")
    def landing(self, tmp_path_factory):
        return tmp_path_factory.mktemp("py_landing")

    @pytest.fixture(scope="class")
    def models(self, landing):
        return {"py_stream.py": PYTHON_STREAM,
                "schema.yml": f"models:\n  - name: py_stream\n    config:\n      landing: '{landing}'\n"}

    def test_a_python_model_returning_a_stream(self, project, deltalog_warehouse, landing):
        table = Path(deltalog_warehouse) / project.test_schema / "py_stream"
        _land(landing, "a.json", range(0, 3))
        run_dbt(["run"])
        assert _ids(table) == [0, 1, 2]
        _land(landing, "b.json", range(3, 5))
        run_dbt(["run"])
        assert _ids(table) == list(range(5))
        assert len(Snapshot.load(str(table)).app_transactions) == 1


class TestStreamingTableRefusals:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "batch_only.sql": "{{ config(materialized='streaming_table') }} select 1 as id",
            "continuous.sql": "{{ config(materialized='streaming_table', trigger={'continuous': '5 seconds'}) }}\n"
                              "select * from {{ stream_files('landing', format='json', schema='id bigint') }}",
            "no_schema.sql": "{{ config(materialized='streaming_table') }}\n"
                             "select * from {{ stream_files('landing', format='json') }}",
            "no_kafka_jar.sql": "{{ config(materialized='streaming_table') }}\n"
                                "select * from {{ stream_kafka('127.0.0.1:9', 'orders') }}",
        }

    def test_what_a_run_cannot_do_is_refused_by_name(self, project):
        (Path(project.project_root) / "landing").mkdir(exist_ok=True)  # relative to the project
        results, out = run_dbt_and_capture(["run"], expect_pass=False)
        messages = {r.node.name: r.message for r in results}
        assert "reads no stream" in messages["batch_only"]
        assert "trigger={'continuous'" in messages["continuous"] and "processing_time" in messages["continuous"]
        assert "needs the rows' schema" in out
        # this session has no Kafka source: the error names the package to add, and where
        assert "spark-sql-kafka-0-10_2.13" in out and "spark.jars.packages" in out


LIVE = """
{{ config(materialized='streaming_table', tags=['realtime'], trigger={'processing_time': '1 second'}) }}
select order_id, amount from {{ stream_files(var('landing'), format='json', schema='order_id bigint, amount bigint') }}
"""


class TestContinuousStreaming:
    @pytest.fixture(scope="class")
    def models(self):
        return {"live_orders.sql": LIVE,
                "realtime_but_batch.sql": "{{ config(materialized='table', tags=['realtime']) }} select 1 as id"}

    def test_the_stream_command_runs_until_sigterm(self, project, deltalog_warehouse, tmp_path_factory):
        landing = tmp_path_factory.mktemp("live_landing")
        variables = json.dumps({"landing": str(landing)})
        table = Path(deltalog_warehouse) / project.test_schema / "live_orders"
        # `dbt run` runs a processing_time model as available_now: what is there, then it finishes
        _land(landing, "a.json", range(0, 3))
        run_dbt(["run", "-s", "live_orders", "--vars", variables])
        assert _ids(table) == [0, 1, 2]

        command = [sys.executable, "-m", "dbt.adapters.deltalog.stream", "--select", "tag:realtime", "--project-dir",
                   project.project_root, "--profiles-dir", project.profiles_dir, "--vars", variables]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        proc = subprocess.Popen(command, cwd=project.project_root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            for name, ids in (("b.json", range(3, 6)), ("c.json", range(6, 8))):
                _land(landing, name, ids)
                deadline = time.monotonic() + 240
                while _ids(table) != list(range(ids.stop)):
                    assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else ""
                    time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, out
        assert "Streaming live_orders until SIGTERM" in out and "live_orders: batch" in out, out
        assert "stopped after batch" in out, out
        assert not (Path(deltalog_warehouse) / project.test_schema / "realtime_but_batch").exists()  # left to dbt run
        assert _ids(table) == list(range(8))
        # each batch with rows one commit, recorded with its batch id
        snapshot = Snapshot.load(str(table))
        assert list(snapshot.app_transactions.values())[0] >= 2


EVOLVING = """
{{ config(materialized='streaming_table', on_schema_change=var('osc', 'ignore')) }}
select order_id, amount{{ ', amount * 3 as tripled' if var('wider', false) else '' }}
from {{ stream_files(var('landing'), format='json', schema='order_id bigint, amount bigint') }}
"""


class TestStreamingSchemaChange:
    @pytest.fixture(scope="class")
    def models(self):
        return {"evolving.sql": EVOLVING}

    def test_on_schema_change_applies_to_a_stream(self, project, deltalog_warehouse, tmp_path_factory):
        landing = tmp_path_factory.mktemp("evolving_landing")
        table = Path(deltalog_warehouse) / project.test_schema / "evolving"

        def run(expect_pass=True, **variables):
            return run_dbt_and_capture(["run", "--vars", json.dumps({"landing": str(landing), **variables})],
                                       expect_pass=expect_pass)

        _land(landing, "a.json", range(0, 2))
        run()
        _land(landing, "b.json", range(2, 4))
        _, out = run(expect_pass=False, wider=True, osc="fail")  # a new column, and fail: nothing committed
        assert "columns added in the new data: ['tripled']" in out
        assert _ids(table) == [0, 1]
        run(wider=True)  # ignore: the table keeps its columns
        assert deltalake.DeltaTable(str(table)).schema().to_arrow().names == ["order_id", "amount"]
        assert _ids(table) == [0, 1, 2, 3]
        _land(landing, "c.json", range(4, 6))
        run(wider=True, osc="append_new_columns")  # the column joins the table with the batch's rows
        rows = sorted(deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["order_id"])
        assert [(r["order_id"], r["tripled"]) for r in rows] == [(0, None), (1, None), (2, None), (3, None),
                                                                  (4, 12), (5, 15)]
