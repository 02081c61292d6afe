"""Profile keys this adapter does not take, refused by name before anything runs.

A user moving from dbt-spark or dbt-databricks brings a profile whose keys point at a remote server
(`method: thrift`, `host`, `http_path`, ...). Ignoring them would build on an embedded local Spark while
the user believes production was built; so every key the adapter does not know fails the profile, with
what it means where it came from and what to use here instead.
"""
from __future__ import annotations

import difflib
from typing import Any, Iterable

# What `method` accepts: only what is built.
METHODS = {
    "session": "Spark in this process: an embedded local Spark (`master: local[*]`, the default) or a "
               "cluster this process drives (`master: spark://host:7077`)",
    "connect": "a Spark Connect server (`host: sc://host:15002`, optional `token` and `use_ssl`)",
}

# The keys only `method: connect` takes (dbt-spark's words for them mean a Thrift server elsewhere).
CONNECT_KEYS = {"host", "token", "use_ssl"}

_INSTEAD = ("This adapter runs Spark itself (`method: session`: choose where with `master`, local[*] by "
            "default or spark://host:7077 for a standalone cluster, and tune it with `spark_conf`) or "
            "reaches a Spark Connect server (`method: connect` with `host: sc://host:15002`). A remote "
            "Thrift, ODBC or Databricks SQL server is not supported.")

_REMOTE = "dbt-spark's address of a remote Spark server (Thrift, HTTP or ODBC)"

# Keys dbt-spark and dbt-databricks take, with what they mean there.
FOREIGN_KEYS = {
    "host": _REMOTE,
    "port": "dbt-spark's port of a remote Thrift or HTTP Spark server",
    "cluster": "dbt-spark's id of a Databricks cluster (HTTP / ODBC methods)",
    "endpoint": "dbt-spark's id of a Databricks SQL endpoint (ODBC method)",
    "token": "dbt-spark's / dbt-databricks' personal access token for a remote server",
    "user": "dbt-spark's user name on a remote Thrift server",
    "password": "dbt-spark's password on a remote Thrift server",
    "auth": "dbt-spark's authentication mechanism of a remote Thrift server (KERBEROS, LDAP, ...)",
    "kerberos_service_name": "dbt-spark's Kerberos service of a remote Thrift server",
    "driver": "dbt-spark's ODBC driver for a remote server",
    "organization": "dbt-spark's Databricks workspace organization id",
    "connection_string_suffix": "dbt-spark's suffix of an ODBC connection string",
    "connect_retries": "dbt-spark's retries while a remote cluster starts",
    "connect_timeout": "dbt-spark's wait between retries while a remote cluster starts",
    "retry_all": "dbt-spark's retry of every connection error to a remote server",
    "use_ssl": "dbt-spark's TLS to a remote Thrift server",
    "server_side_parameters": "dbt-spark's settings sent to a remote server (use `spark_conf` here)",
    "query_timeout": "dbt-spark's timeout of a query on a remote Thrift server",
    "poll_interval": "dbt-spark's polling of asynchronous queries on a remote server",
    "query_retries": "dbt-spark's retries of a query after a lost connection to a remote server",
    "http_path": "dbt-databricks' HTTP path of a Databricks cluster or SQL warehouse",
    "client_id": "dbt-databricks' OAuth client id",
    "client_secret": "dbt-databricks' OAuth client secret",
    "azure_client_id": "dbt-databricks' Azure service principal",
    "azure_client_secret": "dbt-databricks' Azure service principal secret",
    "session_properties": "dbt-databricks' session settings (use `spark_conf` here)",
    "connection_parameters": "dbt-databricks' connection settings",
    "compute": "dbt-databricks' named compute resources",
}

# Keys dbt itself puts beside the adapter's own in a profile output.
DBT_KEYS = {"threads", "type", "target_name", "profile_name"}


def unknown_key_errors(keys: Iterable[str], known: Iterable[str]) -> list[str]:
    """One sentence for each key that is neither the adapter's nor dbt's."""
    known = set(known) | DBT_KEYS
    errors = []
    for key in keys:
        if key in known:
            continue
        if key in FOREIGN_KEYS:
            errors.append(f"`{key}` is {FOREIGN_KEYS[key]}, which this adapter does not take.")
            continue
        close = difflib.get_close_matches(key, sorted(known - DBT_KEYS), n=1, cutoff=0.75)
        hint = f" Did you mean `{close[0]}`?" if close else ""
        errors.append(f"`{key}` is not a key of this adapter.{hint} Allowed: "
                      f"{', '.join(sorted(known - DBT_KEYS))}.")
    return errors


def method_error(method: Any) -> str | None:
    """Why `method` is refused (None when it names what is built)."""
    if method is None or str(method).strip().lower() in METHODS:
        return None
    if str(method).strip().lower() in ("thrift", "http", "odbc"):
        what = f"dbt-spark's `method: {method}` connects to a remote Spark server, which this adapter does not do."
    else:
        what = f"`method: {method}` is not a connection method of this adapter."
    allowed = "; ".join(f"`{k}`: {v}" for k, v in METHODS.items())
    return f"{what} Allowed: {allowed}."


def profile_errors(data: dict, known: Iterable[str]) -> str | None:
    """The whole message for a profile with keys or a method this adapter does not take (None: fine)."""
    connect = str(data.get("method", "")).strip().lower() == "connect"
    if connect:
        problems = [f"`{key}` sets up Spark in this process, which `method: connect` does not start (the "
                    f"Spark Connect server runs Spark); remove it." for key in ("master", "spark_server",
                                                                                 "spark_server_idle_timeout")
                    if key in data]
        if not data.get("host"):
            problems.append("`method: connect` needs `host`: the Spark Connect server's address, sc://host:15002 "
                            "(or `method: session` with a `master` to run Spark from this process).")
        elif not str(data["host"]).startswith("sc://"):
            problems.append(f"`host` is {data['host']!r}; with `method: connect` it is a Spark Connect address, "
                            f"sc://host:15002.")
    else:
        known = set(known) - CONNECT_KEYS  # dbt-spark's host / token: a remote server this profile would miss
        problems = []
    problems += unknown_key_errors(data, known)
    foreign = any(k in FOREIGN_KEYS for k in data if not (connect and k in CONNECT_KEYS))
    if "method" in data and (why := method_error(data["method"])):
        problems.insert(0, why)
        foreign = True
    if not problems:
        return None
    return " ".join(problems + ([_INSTEAD] if foreign else []))
