"""A session on a Spark Connect server (profile `method: connect`, `host: sc://host:15002`).

The log engine stays in this process: it reads and commits `_delta_log` itself, while the server's
executors write and read the Parquet data (Spark's writer, `mapInArrow` with pyarrow). So the
warehouse must be storage both see: an object store, or a folder the server's machines mount at the
same path (checked before the first model, as for a cluster).
"""
from __future__ import annotations

import socket
from typing import Dict, Optional
from urllib.parse import quote, urlparse

from deltalog.lazy_imports import load

DEFAULT_PORT = 15002  # Spark Connect's, when the address names none

# Session settings the embedded Spark starts with, set on the Connect session too: results must not
# depend on where Spark runs (timestamps render in UTC; snapshot views list their files in one go).
SESSION_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
}


class ConnectError(RuntimeError):
    """The Connect endpoint could not be reached or refused a setting; says which and what to do."""


def connection_url(host: str, token: Optional[str] = None, use_ssl: bool = False) -> str:
    """Spark Connect's connection string: `sc://host:port/;token=...;use_ssl=true` (a token implies TLS
    in Spark's client)."""
    url = host.rstrip("/")
    params = []
    if token:
        params.append(f"token={quote(str(token), safe='')}")
    if use_ssl:
        params.append("use_ssl=true")
    return url + ("/;" + ";".join(params) if params else "")


def check_client() -> None:
    """Spark's Connect client needs grpc and friends, which pyspark leaves to its `connect` extra."""
    try:
        load("spark_connect")
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except Exception as exc:
        raise ConnectError(
            f"`method: connect` needs Spark's Connect client, which is not installed here ({exc}). Install it "
            f"with `pip install 'dbt-deltalog[connect]'` (pyspark's grpcio, grpcio-status, "
            f"googleapis-common-protos and zstandard).") from None


def connect_session(url: str, spark_conf: Optional[Dict[str, str]] = None):
    """A new Connect session on `url` with our session settings and the profile's `spark_conf` (only
    settings a session may change: the server's own are fixed when it starts)."""
    check_client()
    load("spark")
    from pyspark.sql import SparkSession

    from deltalog.spark.connect import default_parallelism

    shown = url.split("/;")[0]  # never the token
    # Spark's client retries a refused connection for minutes: a server that is not there is said at once
    parsed = urlparse(shown.replace("sc://", "http://", 1))
    try:
        socket.create_connection((parsed.hostname or "localhost", parsed.port or DEFAULT_PORT), timeout=10).close()
    except OSError as exc:
        raise ConnectError(f"could not reach the Spark Connect server at {shown}: {exc}. Start the server "
                           f"(sbin/start-connect-server.sh) or correct `host`.") from None
    try:
        spark = SparkSession.builder.remote(url).create()
        spark.version  # the first call reaches the server
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConnectError(f"could not reach the Spark Connect server at {shown}: {first[:300]}") from None
    settings = dict(SESSION_SETTINGS)
    user = {str(k): str(v) for k, v in (spark_conf or {}).items()}
    if "spark.sql.shuffle.partitions" not in user:
        # Spark's default of 200 turns a small model into dozens of tiny files: follow the server's cores
        settings["spark.sql.shuffle.partitions"] = str(max(4, 2 * default_parallelism(spark)))
    settings.update(user)
    for key, value in settings.items():
        try:
            spark.conf.set(key, value)
        except Exception as exc:
            spark.stop()
            first = str(exc).strip().splitlines()[0]
            raise ConnectError(
                f"the Spark Connect server at {shown} refused the setting {key}={value} ({first[:200]}). Over "
                f"Connect, `spark_conf` may only hold settings a session can change; settings of the server "
                f"itself (memory, master, jars) are given when the server starts.") from None
    # the jar's classes (clustering's ranks and curve keys) reach the server and its executors as an
    # artifact of this session; a server that refuses it gets the same numbers from plain Spark
    from deltalog.spark.embedded import add_jar_artifact

    add_jar_artifact(spark)
    return spark
