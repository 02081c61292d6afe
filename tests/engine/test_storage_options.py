"""Storage options parsed once (`StorageOptions`): one spelling of each key for obstore, pyarrow and
Hadoop, redacted wherever printed, and one client per store and options in a process."""
from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from deltalog.storage import files as filesystem
from deltalog.storage.options import StorageOptions
from deltalog.storage import log_store_for

S3 = {"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "aws_access_key_id": "AKIDEXAMPLE",
      "AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_REGION": "eu-west-1", "allow_http": "true",
      "max_retries": "2", "deltalog_single_writer": "yes"}


def test_one_parse_renders_for_obstore_pyarrow_and_hadoop():
    options = StorageOptions.of(S3)
    config, client = options.obstore_settings()
    # obstore gets the cloud keys as spelled, its client settings apart, and never our own keys
    assert config == {"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "aws_access_key_id": "AKIDEXAMPLE",
                      "AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_REGION": "eu-west-1"}
    assert client == {"allow_http": "true"}
    assert options.retry_config["max_retries"] == 2 and options.single_writer
    fs, path = options.arrow_filesystem("s3://bucket/wh/t")
    assert isinstance(fs, pafs.S3FileSystem) and path == "bucket/wh/t"
    assert fs.region == "eu-west-1"
    hadoop = options.hadoop_settings("s3a://bucket/wh")
    assert hadoop["fs.s3a.bucket.bucket.access.key"] == "AKIDEXAMPLE"
    assert hadoop["fs.s3a.bucket.bucket.secret.key"] == "s3cr3t-value"
    assert hadoop["fs.s3a.bucket.bucket.endpoint"] == "http://127.0.0.1:8333"
    assert hadoop["fs.s3a.bucket.bucket.connection.ssl.enabled"] == "false"
    assert hadoop["fs.s3a.bucket.bucket.endpoint.region"] == "eu-west-1"


def test_azure_keys_in_any_spelling():
    for key in ("AZURE_STORAGE_ACCOUNT_KEY", "azure_storage_account_key", "account_key", "ACCOUNT_KEY"):
        options = StorageOptions.of({"AZURE_STORAGE_ACCOUNT_NAME": "acct", key: "a2V5"})
        assert options.hadoop_settings("abfss://c@acct.dfs.core.windows.net/x") == {
            "fs.azure.account.key.acct.dfs.core.windows.net": "a2V5"}
        fs, path = options.arrow_filesystem("az://c/wh/t")
        assert isinstance(fs, pafs.AzureFileSystem) and path == "c/wh/t"


def test_options_redact_themselves():
    options = StorageOptions.of(S3)
    shown = repr(options)
    assert "s3cr3t-value" not in shown and "AKIDEXAMPLE" not in shown and "eu-west-1" in shown
    assert options.redact("failed with secret s3cr3t-value") == "failed with secret ****"
    filesystem.configure("s3://redact-bucket", S3)
    try:
        assert "s3cr3t-value" not in filesystem.redact("echo: s3cr3t-value")
    finally:
        filesystem.configure("s3://redact-bucket", None)


def test_a_bad_value_fails_when_parsed_by_name():
    with pytest.raises(ValueError, match="retry_timeout must be a duration"):
        StorageOptions.of({"retry_timeout": "soon"})


def test_given_keys_win_over_the_environment_in_any_spelling(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    merged = StorageOptions.of({"access_key_id": "given"}).over(StorageOptions.from_environment()).bare
    assert merged["access_key_id"] == "given" and merged["region"] == "us-east-1"


def test_one_client_and_one_store_per_table_and_options():
    a, _ = filesystem.arrow_filesystem("s3://one/a", S3)
    b, _ = filesystem.arrow_filesystem("s3://one/b", dict(S3))
    assert a is b  # made once, not per call
    c, _ = filesystem.arrow_filesystem("s3://one/a", {**S3, "AWS_REGION": "us-east-2"})
    assert c is not a
    store = log_store_for("s3://one/t", S3)
    assert log_store_for("s3://one/t/", S3) is store
    assert log_store_for("s3://one/t", {**S3, "AWS_REGION": "us-east-2"}) is not store
    # an in-memory store is its own: another handle is another (empty) store
    assert log_store_for("memory://x/t") is not log_store_for("memory://x/t")
