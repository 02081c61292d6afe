"""Runs a small dbt project on a Spark standalone cluster, in its own process (its driver is this
process), and prints one JSON line: how the session was set up and how dbt went.

    python cluster_child.py <master url> <project dir> <dbt args...>
    python cluster_child.py <master url> --engine-write <table path>   (both write methods, no dbt)
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)


def main(master: str, project: str, args: list[str]) -> None:
    from dbt.cli.main import dbtRunner

    os.chdir(project)
    result = dbtRunner().invoke(args + ["--profiles-dir", project, "--project-dir", project])
    nodes = list(getattr(result.result, "results", None) or [])
    report = {
        "success": result.success,
        "exception": str(result.exception) if result.exception else None,
        "statuses": {r.node.name: str(r.status) for r in nodes},
        "messages": {r.node.name: r.message for r in nodes if r.message},
    }
    from dbt.adapters.deltalog.runtime import session

    spark = session.RUNTIME.spark
    if spark is not None:
        from deltalog.spark.embedded import runs_jar_classes

        report["shuffle_partitions"] = spark.conf.get("spark.sql.shuffle.partitions")
        report["jar_on_executors"] = runs_jar_classes(spark)
        report["master"] = spark.sparkContext.master
    print("CLUSTER-CHILD " + json.dumps(report), flush=True)


def engine_write(master: str, table: str) -> None:
    """write_dataframe straight from the engine (no adapter check of the warehouse first)."""
    from dbt.adapters.deltalog.runtime.session import get_spark
    from deltalog.spark.operations import write_dataframe

    spark = get_spark(master, {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                               "spark.executor.memory": "1g", "spark.cores.max": "2"})
    report = {}
    for method in ("native", "arrow"):
        try:
            version = write_dataframe(spark.range(1000).selectExpr("id", "id % 7 as k"), table,
                                      mode="overwrite", method=method)
            report[method] = {"committed": version}
        except Exception as e:
            report[method] = {"error": type(e).__name__, "message": str(e)}
    print("CLUSTER-CHILD " + json.dumps(report), flush=True)


if __name__ == "__main__":
    if sys.argv[2] == "--engine-write":
        engine_write(sys.argv[1], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3:])
