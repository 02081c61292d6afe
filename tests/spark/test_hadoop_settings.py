"""The profile's storage_options reach Spark's Hadoop connectors as their own settings (S3A per
bucket, ABFS per account, the GCS connector), and a missing connector is named with the package it
comes in."""
from __future__ import annotations

import pytest

from deltalog.spark.hadoop import apply, connector, hadoop_settings

S3_OPTIONS = {"AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ACCESS_KEY_ID": "AKIA-test",
              "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true"}


def test_s3_options_become_per_bucket_s3a_settings():
    got = hadoop_settings("s3://lake/warehouse", S3_OPTIONS)
    p = "fs.s3a.bucket.lake."
    assert got == {
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        p + "access.key": "AKIA-test", p + "secret.key": "s3cr3t", p + "endpoint": "http://127.0.0.1:8333",
        p + "connection.ssl.enabled": "false", p + "endpoint.region": "eu-west-1",
        p + "path.style.access": "true",
    }
    temporary = hadoop_settings("s3a://other/wh", {"aws_session_token": "tok", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"})
    assert temporary["fs.s3a.bucket.other.session.token"] == "tok"
    assert temporary["fs.s3a.bucket.other.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert temporary["fs.s3a.bucket.other.path.style.access"] == "false"


def test_azure_options_become_per_account_abfs_settings():
    host = "acct.dfs.core.windows.net"
    assert hadoop_settings("az://container/wh", {"AZURE_STORAGE_ACCOUNT_NAME": "acct",
                                                 "AZURE_STORAGE_ACCOUNT_KEY": "k=="}) == \
        {f"fs.azure.account.key.{host}": "k=="}
    sas = hadoop_settings(f"abfss://container@{host}/wh", {"azure_storage_sas_token": "?sv=1&sig=x"})
    assert sas == {f"fs.azure.account.auth.type.{host}": "SAS", f"fs.azure.sas.fixed.token.{host}": "sv=1&sig=x"}
    oauth = hadoop_settings("az://c/wh", {"account_name": "acct", "client_id": "id", "client_secret": "cs",
                                          "tenant_id": "t1"})
    assert oauth[f"fs.azure.account.oauth2.client.endpoint.{host}"] == "https://login.microsoftonline.com/t1/oauth2/token"
    assert oauth[f"fs.azure.account.auth.type.{host}"] == "OAuth"


def test_gcs_service_account_and_local_paths():
    assert hadoop_settings("gs://b/wh", {"GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"}) == {
        "fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE", "fs.gs.auth.service.account.json.keyfile": "/keys/sa.json"}
    assert hadoop_settings("/data/wh", S3_OPTIONS) == {}


@pytest.mark.spark
def test_settings_reach_the_session_and_a_missing_connector_is_named(spark):
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    applied = apply(spark, "s3://hadoop-test-bucket/wh", S3_OPTIONS)
    try:
        assert conf.get("fs.s3a.bucket.hadoop-test-bucket.endpoint") == "http://127.0.0.1:8333"
        assert applied["fs.s3a.bucket.hadoop-test-bucket.secret.key"] == "s3cr3t"
        cls, why = connector(spark, "s3://hadoop-test-bucket/wh")
        if cls is None:  # this machine: no hadoop-aws jar on Spark's class path
            assert "s3a" in why and "hadoop-aws" in why
        else:
            assert cls.endswith("S3AFileSystem")
    finally:
        for key in applied:
            if key.startswith("fs.s3a.bucket.hadoop-test-bucket."):
                conf.unset(key)
