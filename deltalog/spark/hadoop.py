"""The Hadoop side of an object-store table: the same storage options delta-rs takes, spelled as the
settings of Spark's Hadoop connectors (S3A, ABFS, the GCS connector), and whether this Spark has the
connector for a URI's scheme at all.

`hadoop_settings` maps the options per bucket or account where Hadoop allows it (S3A's
`fs.s3a.bucket.<bucket>.*`, ABFS's `…<account>.dfs.core.windows.net`), so warehouses on two buckets keep
their own credentials. `apply` puts them into the session's Hadoop configuration, which every later file
scan and write of the session (and its executors) uses. `connector` tells whether the JVM can load the
file system class for a scheme, and why not.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..filesystem import _options, _truthy

S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# The Hadoop scheme Spark reads a URI of each object-store scheme through.
HADOOP_SCHEME = {"s3": "s3a", "s3a": "s3a", "gs": "gs", "gcs": "gs", "az": "abfss", "abfs": "abfs",
                 "abfss": "abfss", "azure": "abfss", "adl": "abfss"}
# Where each connector comes from, for the message when it is missing.
CONNECTOR_PACKAGE = {"s3a": "org.apache.hadoop:hadoop-aws (matching this Spark's Hadoop version)",
                     "abfss": "org.apache.hadoop:hadoop-azure (matching this Spark's Hadoop version)",
                     "abfs": "org.apache.hadoop:hadoop-azure (matching this Spark's Hadoop version)",
                     "gs": "com.google.cloud.bigdataoss:gcs-connector"}


def hadoop_settings(uri: str, storage_options: dict[str, Any] | None) -> dict[str, str]:
    """Hadoop configuration keys (without `spark.hadoop.`) that reach `uri` with `storage_options`."""
    parsed = urlparse(str(uri))
    scheme = parsed.scheme.lower()
    o = _options(storage_options or {})
    if HADOOP_SCHEME.get(scheme) == "s3a":
        return _s3a(parsed.netloc, o)
    if HADOOP_SCHEME.get(scheme) in ("abfs", "abfss"):
        account = o.get("account_name") or o.get("account")
        if "@" in parsed.netloc:  # abfss://container@account.dfs.core.windows.net/
            account = parsed.netloc.split("@", 1)[1].split(".", 1)[0]
        return _abfs(account, o) if account else {}
    if scheme in ("gs", "gcs"):
        return _gcs(o)
    return {}


def _s3a(bucket: str, o: dict[str, str]) -> dict[str, str]:
    p = f"fs.s3a.bucket.{bucket}."
    out = {"fs.s3.impl": S3A}  # s3:// tables are read through S3A, as on EMR and Databricks
    for ours, theirs in (("access_key_id", "access.key"), ("secret_access_key", "secret.key"),
                         ("session_token", "session.token"), ("token", "session.token")):
        if o.get(ours):
            out[p + theirs] = o[ours]
    if o.get("session_token") or o.get("token"):
        out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    if _truthy(o.get("skip_signature")):
        out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
    endpoint = o.get("endpoint_url") or o.get("endpoint")
    if endpoint:
        out[p + "endpoint"] = endpoint
        if endpoint.startswith("http://"):
            out[p + "connection.ssl.enabled"] = "false"
    region = o.get("region") or o.get("default_region")
    if region:
        out[p + "endpoint.region"] = region
    # object_store (and so delta-rs) address buckets by path unless virtual-hosted style is asked for
    out[p + "path.style.access"] = "false" if _truthy(o.get("virtual_hosted_style_request")) else "true"
    return out


def _abfs(account: str, o: dict[str, str]) -> dict[str, str]:
    host = f"{account}.dfs.core.windows.net"
    out = {}
    endpoint = o.get("endpoint")
    if endpoint or _truthy(o.get("use_emulator")):
        out.update(_abfs_blob_endpoint(endpoint or f"http://127.0.0.1:10000/{account}"))
    if o.get("account_key") or o.get("access_key"):
        out[f"fs.azure.account.key.{host}"] = o.get("account_key") or o["access_key"]
    elif o.get("sas_token") or o.get("sas_key"):
        out[f"fs.azure.account.auth.type.{host}"] = "SAS"
        out[f"fs.azure.sas.fixed.token.{host}"] = (o.get("sas_token") or o["sas_key"]).lstrip("?")
    elif o.get("client_id") and o.get("client_secret"):
        tenant = o.get("tenant_id") or o.get("authority_id") or "common"
        out.update({
            f"fs.azure.account.auth.type.{host}": "OAuth",
            f"fs.azure.account.oauth.provider.type.{host}":
                "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
            f"fs.azure.account.oauth2.client.id.{host}": o["client_id"],
            f"fs.azure.account.oauth2.client.secret.{host}": o["client_secret"],
            f"fs.azure.account.oauth2.client.endpoint.{host}":
                f"https://login.microsoftonline.com/{tenant}/oauth2/token",
        })
    return out


def _abfs_blob_endpoint(endpoint: str) -> dict[str, str]:
    """ABFS against a Blob-only server at `endpoint` (Azurite, `http://host:port/<account>`, as delta-rs
    takes it): Hadoop 3.5's ABFS speaks the Blob API to accounts without a hierarchical namespace. The
    endpoint setting is one for the session (ABFS has no per-account spelling of it)."""
    parsed = urlparse(endpoint)
    out = {"fs.azure.abfs.endpoint": parsed.netloc, "fs.azure.account.hns.enabled": "false",
           "fs.azure.fns.account.service.type": "BLOB", "fs.azure.ingress.service.type": "BLOB"}
    if parsed.scheme == "http":
        # ABFS's default Apache HTTP client has no socket factory for plain HTTP: the JDK's client
        out.update({"fs.azure.always.use.https": "false", "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION"})
    return out


def _gcs(o: dict[str, str]) -> dict[str, str]:
    keyfile = o.get("service_account") or o.get("service_account_path") or o.get("application_credentials")
    if not keyfile:
        return {}
    # the GCS connector has no per-bucket credentials: one service account for the session
    return {"fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE", "fs.gs.auth.service.account.json.keyfile": keyfile}


def apply(spark: Any, uri: str, storage_options: dict[str, Any] | None) -> dict[str, str]:
    """Put `hadoop_settings` into the session's Hadoop configuration, leaving keys the user set
    (e.g. `spark.hadoop.fs.s3.impl` in spark_conf) alone. Returns what was set."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    applied = {}
    for key, value in hadoop_settings(uri, storage_options).items():
        if key == "fs.s3.impl" and conf.get(key) is not None:
            continue
        conf.set(key, value)
        applied[key] = value
    return applied


def connector(spark: Any, uri: str) -> tuple[str | None, str]:
    """(the Hadoop file system class for `uri`'s scheme, or None; why, in words)."""
    scheme = HADOOP_SCHEME.get(urlparse(str(uri)).scheme.lower())
    if scheme is None:
        return None, f"no Hadoop scheme for {uri}"
    jvm = spark.sparkContext._jvm
    try:
        cls = jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(
            scheme, spark.sparkContext._jsc.hadoopConfiguration())
        return cls.getName(), f"Spark's {scheme} connector ({cls.getName()}) is on the class path"
    except Exception as exc:  # Py4J wraps UnsupportedFileSystemException / ClassNotFoundException
        first = str(exc).strip().splitlines()
        cause = next((ln for ln in first if "Exception" in ln), first[0] if first else type(exc).__name__)
        return None, (f"this Spark has no Hadoop connector for {scheme}:// ({cause.strip()[:160]}); it comes "
                      f"with {CONNECTOR_PACKAGE.get(scheme, 'a Hadoop file system package')}")


# Schemes whose URIs Spark's connector takes as they are (with `fs.s3.impl` set, s3:// too); `az://`
# names a container but no account, which ABFS needs in the host.
_AS_GIVEN = {"s3", "s3a", "gs", "abfs", "abfss"}
DIRECT_COMMIT_PROTOCOL = "write.DirectCommitProtocol"


def native_io(spark: Any, uri: str) -> tuple[bool, str]:
    """(whether Spark's own Parquet reader and writer serve the table at `uri` on an object store, why).

    They do where the JVM has the scheme's Hadoop connector and every task can load the jar's
    `DirectCommitProtocol` (writes at final keys, no rename). The store's options become the session's
    Hadoop settings for the bucket or account first. Otherwise executors read and write through
    pyarrow's file systems."""
    from ..filesystem import task_storage_options
    from .embedded import has_jar_class

    scheme = urlparse(str(uri)).scheme.lower()
    if scheme not in _AS_GIVEN:
        hint = (" (give the warehouse as abfss://<container>@<account>.dfs.core.windows.net/… for Spark's ABFS "
                "connector)" if HADOOP_SCHEME.get(scheme) == "abfss" else "")
        return False, f"Spark's Hadoop connectors do not take {scheme}:// URIs{hint}"
    sc = spark.sparkContext
    applied = sc.__dict__.setdefault("_deltalog_hadoop_applied", set())
    options = task_storage_options(uri)
    key = (uri, tuple(sorted(options.items())))
    if key not in applied:
        apply(spark, uri, options)
        applied.add(key)
    decided = sc.__dict__.setdefault("_deltalog_native_io", {})
    if scheme not in decided:
        found, why = connector(spark, uri)
        if found is not None and not has_jar_class(spark, DIRECT_COMMIT_PROTOCOL):
            found, why = None, f"{why}, but not every task can load this package's jar (io.deltalog.{DIRECT_COMMIT_PROTOCOL})"
        decided[scheme] = (found is not None, why)
    return decided[scheme]
