"""Fresh interpreters in which 8 threads each take a first path into the adapter at the same moment, as
a dbt command's first nodes do: start Spark, the engine's Spark path, a data test answered here by
DuckDB, a seed's and a Python model's first imports, a DML statement's and a predicate's parse, the
metastore client. Before lazy_imports.py, most of them failed with "partially initialized module" or
"deadlock detected by _ModuleLock" (issue 53).

Two of the 20 start a real Spark (a JVM each); the others take every path that does not need one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""\
    import sys, threading, traceback
    import pyarrow as pa
    import dbt.adapters.deltalog  # what dbt imports before its thread pool starts
    from deltalog import write_deltalake

    warehouse_root, start_spark = sys.argv[1], sys.argv[2] == "1"
    write_deltalake(warehouse_root + "/shop/orders", pa.table({"id": [1, 2, 3], "status": ["a", None, "b"]}))

    def spark_session():
        from dbt.adapters.deltalog.runtime.session import RUNTIME
        spark = RUNTIME.get_spark("local[1]", {"spark.ui.enabled": "false"})
        assert spark.range(3).count() == 3

    def engine_spark_path():
        from deltalog.spark import operations
        assert callable(operations.write_dataframe)

    def engine_reader():
        from deltalog.spark.reader import snapshot_dataframe
        assert callable(snapshot_dataframe)

    def data_test_here():
        from dbt.adapters.deltalog import driver_queries
        from dbt.adapters.deltalog.warehouse import Warehouse
        from dbt.adapters.deltalog.sql_gateway import relations_of_sql
        warehouse = Warehouse(warehouse_root)
        text, relations = relations_of_sql(warehouse, "select id from shop.orders where status is null")
        answer = driver_queries.answer(warehouse, text, relations, relations_of_sql)
        assert answer.rows == [(2,)], answer.rows

    def seed_types():
        from deltalog.lazy_imports import load
        load("spark")
        from pyspark.sql.types import StringType, StructField, StructType
        StructType([StructField("c0", StringType())])

    def python_model_imports():
        from deltalog.lazy_imports import load
        load("pandas")
        import pandas
        assert pa.table({"x": [1]}).to_pandas().shape == (1, 1)

    def dml_parse():
        from dbt.adapters.deltalog.dml import parse_dml
        assert parse_dml("delete from `shop.orders` where id = 1") is not None

    def predicate_parse():
        from deltalog.expressions import parse_sql_predicate
        parse_sql_predicate("id > 1 and status = 'a'")

    def warm_up_and_metastore():
        from dbt.adapters.deltalog import metastore
        from dbt.adapters.deltalog.driver_queries import warm_up
        warm_up()
        assert metastore.HiveMetastore

    paths = [spark_session if start_spark else engine_reader, engine_spark_path, data_test_here, seed_types,
             python_model_imports, dml_parse, predicate_parse, warm_up_and_metastore]
    barrier = threading.Barrier(len(paths))
    failures = []

    def take(path):
        barrier.wait()
        try:
            path()
        except BaseException:
            failures.append(f"{path.__name__}: {traceback.format_exc()}")

    threads = [threading.Thread(target=take, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("\\n".join(failures) or "ok")
    sys.exit(1 if failures else 0)
    """)


@pytest.mark.spark
def test_eight_threads_take_every_first_path_at_once_in_20_fresh_interpreters(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)

    def run(i: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / f"wh{i}"),
                               "1" if i % 10 == 0 else "0"],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)

    with ThreadPoolExecutor(2) as pool:  # two interpreters at a time: the machine's cores
        results = list(pool.map(run, range(20)))
    failed = [f"interpreter {i}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
              for i, r in enumerate(results) if r.returncode != 0]
    assert failed == [], "\n".join(failed)
