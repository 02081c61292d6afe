"""Storage options, parsed once: the keys delta-rs and the `object_store` crate take (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AZURE_STORAGE_ACCOUNT_NAME`, `GOOGLE_SERVICE_ACCOUNT`, `max_retries`, …; any case,
with or without the cloud's prefix).

`StorageOptions` renders itself for each client that reaches a store — obstore for the log
(`obstore_settings`), pyarrow for data files (`arrow_filesystem`, one cached client per store and
options), Hadoop for Spark's own connectors (`hadoop_settings`) — and redacts itself wherever it is
printed (`repr`, `redact`). One parse, one set of spellings: a key means the same to all three.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

from .. import secrets
from ..process_cache import made_once

SINGLE_WRITER_OPTION = "deltalog_single_writer"
ENVIRONMENT_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_")
_PREFIXES = ("aws_", "azure_storage_", "azure_", "google_")
# a key whose name holds one of these words holds a credential: never printed
# object_store's client settings (not a cloud's own keys): obstore takes them as `client_options`
_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url",
                "pool_idle_timeout", "pool_max_idle_per_host", "user_agent", "http1_only", "http2_only"}
# how long object_store retries a failed request (delta-rs's option names); its default is 10 retries
# within 3 minutes, which a store that stays down makes every command wait for
_RETRY_KEYS = {"max_retries", "retry_timeout"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|m|min|mins|h)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60, "mins": 60, "h": 3600}
# the bare names (see `bare_name`) that reach a store: the environment's cloud variables a Spark task
# needs to be given
_CLIENT_NAMES = {"access_key_id", "secret_access_key", "session_token", "token", "region", "default_region",
                 "endpoint_url", "endpoint", "allow_http", "skip_signature", "virtual_hosted_style_request",
                 "account_name", "account_key", "access_key", "sas_token", "sas_key", "client_id", "client_secret",
                 "tenant_id", "authority_id", "use_emulator", "service_endpoint"}
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "azure", "adl", "memory")
AZURE_SCHEMES = ("az", "abfs", "abfss", "azure", "adl")


def bare_name(key: str) -> str:
    """A key lower-cased without its cloud prefix: `AWS_ACCESS_KEY_ID` -> `access_key_id`."""
    low = str(key).lower()
    return next((low[len(p):] for p in _PREFIXES if low.startswith(p)), low)


def truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")



@dataclass(frozen=True)
class StorageOptions:
    """The options of one store, as given (keys kept as spelled: obstore reads them so). Immutable and
    hashable: it keys the cache of clients made from it."""

    given: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, options: "StorageOptions | Mapping[str, Any] | None") -> "StorageOptions":
        """Options from a mapping (values as strings), or the same options; none for None. Raises
        ValueError naming the option whose value cannot be read."""
        if isinstance(options, StorageOptions):
            return options
        parsed = cls(tuple((str(k), str(v)) for k, v in (options or {}).items()))
        parsed.retry_config  # a bad duration or count fails here, once, by name
        return parsed

    @classmethod
    def from_environment(cls) -> "StorageOptions":
        """The cloud variables of this process's environment that reach a store (`AWS_ACCESS_KEY_ID`,
        `AWS_ENDPOINT_URL`, …): what a client made without options would read."""
        return cls(tuple((k, v) for k, v in sorted(os.environ.items())
                         if k.startswith(ENVIRONMENT_PREFIXES) and bare_name(k) in _CLIENT_NAMES))

    def __bool__(self) -> bool:
        return bool(self.given)

    def __repr__(self) -> str:
        return f"StorageOptions({self.redacted()})"

    def as_dict(self) -> dict[str, str]:
        return dict(self.given)

    def redacted(self) -> dict[str, str]:
        return secrets.redacted(dict(self.given))

    def over(self, base: "StorageOptions") -> "StorageOptions":
        """These options over `base`: a key given here (in any spelling) replaces base's."""
        mine = {bare_name(k) for k, _ in self.given}
        return StorageOptions(tuple((k, v) for k, v in base.given if bare_name(k) not in mine) + self.given)

    @functools.cached_property
    def bare(self) -> dict[str, str]:
        """Values by `bare_name`."""
        return {bare_name(k): v for k, v in self.given}

    def value(self, *names: str) -> str | None:
        """The first of the bare `names` that is given."""
        return next((self.bare[n] for n in names if self.bare.get(n)), None)

    @property
    def single_writer(self) -> bool:
        """The options declare that one writer alone commits to the store (`deltalog_single_writer`)."""
        return truthy(self.bare.get(SINGLE_WRITER_OPTION))

    def secrets(self) -> list[str]:
        return secrets.secret_values(self.given)

    def redact(self, text: str) -> str:
        """`text` with every credential among these options replaced by `****`."""
        return secrets.redact(text, self.secrets())

    # ---- obstore (the log) ------------------------------------------------------------------------

    @functools.cached_property
    def retry_config(self) -> dict[str, Any] | None:
        """obstore's retry_config from `max_retries` (a count) and `retry_timeout` (`30s`, `2 min`,
        `500ms`, or seconds); None keeps object_store's defaults."""
        out: dict[str, Any] = {}
        for key, value in self.given:
            low = key.lower()
            if low == "max_retries":
                try:
                    out["max_retries"] = int(value.strip())
                except ValueError:
                    raise ValueError(f"storage option max_retries must be a whole number, got {value!r}") from None
            elif low == "retry_timeout":
                m = _DURATION.match(value)
                if not m:
                    raise ValueError(f"storage option retry_timeout must be a duration such as 30s, 2min or "
                                     f"500ms, got {value!r}")
                out["retry_timeout"] = timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[(m.group(2) or "s").lower()])
        if not out:
            return None
        out.setdefault("max_retries", 10)
        out.setdefault("retry_timeout", timedelta(minutes=3))
        out["backoff"] = {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=15), "base": 2}
        return out

    def obstore_settings(self) -> tuple[dict[str, str], dict[str, str]]:
        """(config, client_options) for obstore's `from_url`."""
        config: dict[str, str] = {}
        client: dict[str, str] = {}
        for key, value in self.given:
            low = key.lower()
            if low == SINGLE_WRITER_OPTION or low in _RETRY_KEYS:
                continue
            bare = next((low[len(p):] for p in ("aws_", "azure_", "google_") if low.startswith(p)), low)
            if bare in _CLIENT_KEYS:
                client[bare] = value
            else:
                config[key] = value
        return config, client

    def endpoint(self, uri: str) -> str:
        """The endpoint these options reach `uri` at, in words for messages."""
        return self.value("endpoint_url", "endpoint", "service_endpoint") or \
            f"the default {urlparse(uri).scheme}:// endpoint"

    # ---- pyarrow (data files) ---------------------------------------------------------------------

    def arrow_filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """(pyarrow FileSystem, path in it) for an object-store URI; the client is made once per store
        and options in this process."""
        parsed = urlparse(str(uri))
        scheme = parsed.scheme.lower()
        # The key as it is: a URI here spells a key raw (a decoded log path joined to the root), and keys
        # may hold `%` themselves (Spark writes `at=2024-01-01 10%3A00%3A00/` folders).
        path = str(uri).split("://", 1)[1].rstrip("/")
        if scheme in ("s3", "s3a"):
            return _arrow_client(self, "s3", ""), path
        if scheme in AZURE_SCHEMES:
            container = parsed.netloc.split("@", 1)[0]
            account = self.value("account_name") or (parsed.netloc.split("@", 1)[1].split(".")[0]
                                                     if "@" in parsed.netloc else None)
            if not account:
                raise ValueError(f"{uri}: name the storage account (storage option AZURE_STORAGE_ACCOUNT_NAME, "
                                 f"or abfss://container@account.dfs.core.windows.net/...)")
            key = path.split("/", 1)[1] if "/" in path else ""
            return _arrow_client(self, "azure", account), f"{container}/{key}".rstrip("/")
        if scheme in ("gs", "gcs"):
            return _arrow_client(self, "gcs", ""), path
        raise ValueError(f"{uri}: storage scheme {scheme!r} has no file system here; use a local path, s3://, "
                         f"abfss:// / az://, or gs://")

    # ---- Hadoop (Spark's own connectors) ----------------------------------------------------------

    def hadoop_settings(self, uri: str) -> dict[str, str]:
        """Hadoop configuration keys (without `spark.hadoop.`) that reach `uri` with these options, per
        bucket or account where Hadoop allows it (S3A's `fs.s3a.bucket.<bucket>.*`, ABFS's
        `…<account>.dfs.core.windows.net`), so warehouses on two buckets keep their own credentials."""
        parsed = urlparse(str(uri))
        scheme = parsed.scheme.lower()
        if scheme in ("s3", "s3a"):
            return self._s3a(parsed.netloc)
        if scheme in AZURE_SCHEMES:
            account = self.value("account_name", "account")
            if "@" in parsed.netloc:  # abfss://container@account.dfs.core.windows.net/
                account = parsed.netloc.split("@", 1)[1].split(".", 1)[0]
            return self._abfs(account) if account else {}
        if scheme in ("gs", "gcs"):
            return self._gcs()
        return {}

    def _s3a(self, bucket: str) -> dict[str, str]:
        o = self.bare
        p = f"fs.s3a.bucket.{bucket}."
        out = {"fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}  # s3:// through S3A, as on EMR
        for ours, theirs in (("access_key_id", "access.key"), ("secret_access_key", "secret.key"),
                             ("session_token", "session.token"), ("token", "session.token")):
            if o.get(ours):
                out[p + theirs] = o[ours]
        if o.get("session_token") or o.get("token"):
            out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        if truthy(o.get("skip_signature")):
            out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"
        endpoint = self.value("endpoint_url", "endpoint")
        if endpoint:
            out[p + "endpoint"] = endpoint
            if endpoint.startswith("http://"):
                out[p + "connection.ssl.enabled"] = "false"
        region = self.value("region", "default_region")
        if region:
            out[p + "endpoint.region"] = region
        # object_store (and so delta-rs) address buckets by path unless virtual-hosted style is asked for
        out[p + "path.style.access"] = "false" if truthy(o.get("virtual_hosted_style_request")) else "true"
        return out

    def _abfs(self, account: str) -> dict[str, str]:
        o = self.bare
        host = f"{account}.dfs.core.windows.net"
        out = {}
        endpoint = o.get("endpoint")
        if endpoint or truthy(o.get("use_emulator")):
            out.update(_abfs_blob_endpoint(endpoint or f"http://127.0.0.1:10000/{account}"))
        if self.value("account_key", "access_key"):
            out[f"fs.azure.account.key.{host}"] = self.value("account_key", "access_key")
        elif self.value("sas_token", "sas_key"):
            out[f"fs.azure.account.auth.type.{host}"] = "SAS"
            out[f"fs.azure.sas.fixed.token.{host}"] = self.value("sas_token", "sas_key").lstrip("?")
        elif o.get("client_id") and o.get("client_secret"):
            tenant = self.value("tenant_id", "authority_id") or "common"
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

    def _gcs(self) -> dict[str, str]:
        keyfile = self.value("service_account", "service_account_path", "application_credentials")
        if not keyfile:
            return {}
        # the GCS connector has no per-bucket credentials: one service account for the session
        return {"fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE", "fs.gs.auth.service.account.json.keyfile": keyfile}


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


def _endpoint(url: str) -> tuple[str, str]:
    """(host[:port], scheme) of an endpoint URL."""
    parsed = urlparse(url if "://" in url else f"https://{url}")
    return parsed.netloc, parsed.scheme or "https"


@made_once(maxsize=64)
def _arrow_client(options: StorageOptions, kind: str, account: str) -> pafs.FileSystem:
    """One pyarrow client per store kind, account and options (clients are thread-safe and hold their
    connection pools: making one per call cost a TLS handshake and a credential lookup each time)."""
    o = options.bare
    if kind == "s3":
        kwargs: dict[str, Any] = {}
        if o.get("access_key_id"):
            kwargs["access_key"] = o["access_key_id"]
            kwargs["secret_key"] = o.get("secret_access_key")
            if options.value("session_token", "token"):
                kwargs["session_token"] = options.value("session_token", "token")
        region = options.value("region", "default_region")
        if region:
            kwargs["region"] = region
        endpoint = options.value("endpoint_url", "endpoint")
        if endpoint:
            kwargs["endpoint_override"], kwargs["scheme"] = _endpoint(endpoint)
        elif truthy(o.get("allow_http")):
            kwargs["scheme"] = "http"
        if truthy(o.get("skip_signature")):
            kwargs["anonymous"] = True
        if truthy(o.get("virtual_hosted_style_request")):
            kwargs["force_virtual_addressing"] = True
        return pafs.S3FileSystem(**kwargs)
    if kind == "azure":
        kwargs = {}
        if options.value("account_key", "access_key"):
            kwargs["account_key"] = options.value("account_key", "access_key")
        if options.value("sas_token", "sas_key"):
            kwargs["sas_token"] = options.value("sas_token", "sas_key")
        if o.get("client_id"):
            kwargs.update(client_id=o["client_id"], client_secret=o.get("client_secret"),
                          tenant_id=options.value("tenant_id", "authority_id"))
        endpoint = options.value("endpoint", "endpoint_url")
        if truthy(o.get("use_emulator")) and not endpoint:
            endpoint = "http://127.0.0.1:10000"
        if endpoint:
            authority, endpoint_scheme = _endpoint(endpoint)
            kwargs.update(blob_storage_authority=authority, blob_storage_scheme=endpoint_scheme,
                          dfs_storage_authority=authority, dfs_storage_scheme=endpoint_scheme)
        return pafs.AzureFileSystem(account, **kwargs)
    kwargs = {}
    endpoint = options.value("endpoint", "endpoint_url", "service_endpoint")
    if endpoint:
        kwargs["endpoint_override"], kwargs["scheme"] = _endpoint(endpoint)
    if truthy(o.get("skip_signature")):
        kwargs["anonymous"] = True
    return pafs.GcsFileSystem(**kwargs)
