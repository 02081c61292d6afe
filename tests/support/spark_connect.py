"""A real Spark Connect server for tests, from pyspark's own distribution, on 127.0.0.1:

    spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer --master <master>
                 --conf spark.connect.grpc.binding.port=<port> spark-internal

Its Python workers (mapInArrow, foreachBatch, python models' UDFs) run this interpreter, which has
the project installed, as a server set up for dbt-deltalog would. Stopped when the context ends.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from typing import Iterator

from tests.support.standalone import _environment, free_port, spark_home, stop_process_groups, wait_until_listening

CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def require_client() -> None:
    """Skip the test when this environment cannot be a Spark Connect client (pyspark[connect], which
    the `test` extra installs); in CI, fail instead."""
    import pytest

    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except Exception as exc:
        why = f"Spark's Connect client is not installed (pip install 'pyspark[connect]'): {exc}"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@contextlib.contextmanager
def spark_connect_server(master: str = "local[2]", conf: dict[str, str] | None = None) -> Iterator[str]:
    """A Spark Connect server with `master`; yields its address, sc://127.0.0.1:<port>."""
    port = free_port()
    work = tempfile.mkdtemp(prefix="deltalog-connect-")
    settings = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false", "spark.sql.warehouse.dir": os.path.join(work, "spark-warehouse"),
                "spark.driver.extraJavaOptions": f"-Dderby.system.home={work}", **(conf or {})}
    argv = [os.path.join(spark_home(), "bin", "spark-submit"), "--class", CLASS, "--master", master]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    argv.append("spark-internal")
    log_path = os.path.join(work, "connect-server.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env=_environment(), stdout=log, stderr=subprocess.STDOUT, cwd=work,
                                start_new_session=True)
    try:
        try:
            wait_until_listening(port, proc, f"Spark Connect server (log: {log_path})", timeout=180)
        except RuntimeError as exc:
            with open(log_path, errors="replace") as f:
                raise RuntimeError(f"{exc}\n{f.read()[-3000:]}") from None
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop_process_groups([proc], timeout=20)
