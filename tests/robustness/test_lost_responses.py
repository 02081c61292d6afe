"""Commits and data files whose PUT reached the store but whose response was lost (a proxy in front of a
real S3 server, SeaweedFS, drops it). The object-store client retries the create and hears "already
exists" for its own object. Every such write must land exactly once: the operation reports the version
that holds it, no version holds it twice, and the change feed reports each row once."""
from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pytest
from deltalake import QueryBuilder

from deltalog.storage import files as filesystem
from deltalog.snapshot import Snapshot
from deltalog.storage import log_store_for
from deltalog.write import write_deltalake
from tests.support.dropping_proxy import DroppingProxy
from tests.support.seaweed import seaweedfs_or_skip

CDF = {"delta.enableChangeDataFeed": "true"}


@pytest.fixture(scope="module")
def s3():
    with seaweedfs_or_skip() as server:
        yield server


@pytest.fixture
def proxied(s3):
    """(proxy, storage options through it); the warehouse prefix is configured for Spark's tasks too."""
    with DroppingProxy(s3.endpoint) as proxy:
        options = {**s3.storage_options(), "AWS_ENDPOINT_URL": proxy.endpoint}
        filesystem.configure(s3.uri(), options)
        try:
            yield proxy, options
        finally:
            filesystem.configure(s3.uri(), None)


def _txn_ids(uri, options) -> list[str]:
    """The txnId of every version, in order; each version must hold another commit."""
    store = log_store_for(uri, options)
    ids = []
    for f in store.list_from(0):
        if f.kind == "commit":
            info = next(json.loads(line)["commitInfo"] for line in store.read(f.name).splitlines()
                        if line.strip() and "commitInfo" in json.loads(line))
            ids.append(info.get("txnId"))
    return ids


def _delta_rs_ids(uri, s3, version=None) -> list[int]:
    """delta-rs reads straight from the server (the proxy is the writers' only)."""
    dt = deltalake.DeltaTable(uri, version=version, storage_options=s3.storage_options())
    t = QueryBuilder().register("t", dt).execute("select id from t").read_all()
    return sorted(pa.table(t).column("id").to_pylist())


def _commit_key(version: int) -> str:
    return r"_delta_log/%020d\.json$" % version


def test_a_blind_append_with_cdf_whose_response_is_lost_lands_once(s3, proxied):
    proxy, options = proxied
    uri = s3.uri("lost", "append_cdf")
    write_deltalake(uri, pa.table({"id": [1, 2]}), configuration=CDF, storage_options=options)
    proxy.drop("PUT", _commit_key(1))
    assert write_deltalake(uri, pa.table({"id": [3, 4]}), mode="append", storage_options=options) == 1
    assert proxy.dropped and proxy.dropped[0][2] == 200  # the server had created it
    ids = _txn_ids(uri, options)
    assert len(ids) == 2 and len(set(ids)) == 2
    assert _delta_rs_ids(uri, s3) == [1, 2, 3, 4]
    changes = deltalake.DeltaTable(uri, storage_options=s3.storage_options()).load_cdf(starting_version=1).read_all()
    assert sorted(pa.table(changes).column("id").to_pylist()) == [3, 4]  # once each
    # the next writer carries on at the next version
    assert write_deltalake(uri, pa.table({"id": [5]}), mode="append", storage_options=options) == 2


def test_an_overwrite_whose_response_is_lost_is_not_a_conflict_with_itself(s3, proxied):
    proxy, options = proxied
    uri = s3.uri("lost", "overwrite")
    write_deltalake(uri, pa.table({"id": [1, 2]}), storage_options=options)
    proxy.drop("PUT", _commit_key(1))
    assert write_deltalake(uri, pa.table({"id": [7]}), mode="overwrite", storage_options=options) == 1
    assert len(_txn_ids(uri, options)) == 2
    assert _delta_rs_ids(uri, s3) == [7]


def test_a_data_file_whose_response_is_lost_is_kept(s3, proxied):
    """Its name is fresh: the retried create's "already exists" is this write's own object."""
    proxy, options = proxied
    uri = s3.uri("lost", "data_file")
    write_deltalake(uri, pa.table({"id": [1, 2]}), storage_options=options)
    proxy.drop("PUT", r"/lost/data_file/[^_][^/]*\.parquet$")
    assert write_deltalake(uri, pa.table({"id": [3]}), mode="append", storage_options=options) == 1
    assert proxy.dropped
    assert _delta_rs_ids(uri, s3) == [1, 2, 3]


@pytest.mark.spark
def test_spark_merge_and_optimize_whose_responses_are_lost_land_once(spark, s3, proxied):
    from deltalog.spark import operations as ops
    from deltalog.spark.change_data import changes_dataframe
    from deltalog.spark.optimize import optimize

    proxy, options = proxied
    uri = s3.uri("lost", "merge_optimize")
    conf = {**CDF, "delta.enableDeletionVectors": "true"}
    for i in range(3):
        ops.write_dataframe(spark.range(i * 10, (i + 1) * 10).selectExpr("id", "'a' AS s"), uri,
                            configuration=conf if i == 0 else None)
    assert Snapshot.load(uri).version == 2
    proxy.drop("PUT", _commit_key(3))
    source = spark.range(25, 35).selectExpr("id", "'b' AS s")
    ops.merge(spark, uri, source, "t.id = s.id", when_matched_update="*", when_not_matched_insert="*",
              source_alias="s", target_alias="t")
    assert Snapshot.load(uri).version == 3
    proxy.drop("PUT", _commit_key(4))
    assert optimize(spark, uri) == 4
    assert len(proxy.dropped) == 2
    ids = _txn_ids(uri, options)
    assert len(ids) == 5 and len(set(ids)) == 5
    assert _delta_rs_ids(uri, s3) == list(range(35))
    changes = changes_dataframe(spark, uri, 3, 4).collect()
    inserted = sorted(r["id"] for r in changes if r["_change_type"] == "insert")
    updated = sorted(r["id"] for r in changes if r["_change_type"] == "update_postimage")
    assert inserted == list(range(30, 35)) and updated == list(range(25, 30))


def test_a_store_down_during_a_write_then_back_lands_once(s3, proxied):
    """The store stops answering as a write starts (its requests fail unanswered) and comes back 0.6 s
    later: the client's retries land the write once, at the next version. (object_store's default retries,
    10 with a randomised backoff of at least 100 ms each, span 1 s or more: an outage of 1.5 s outlasted
    them once.)"""
    import threading

    proxy, options = proxied
    uri = s3.uri("lost", "outage")
    write_deltalake(uri, pa.table({"id": [1]}), storage_options=options)
    proxy.down = True
    threading.Timer(0.6, lambda: setattr(proxy, "down", False)).start()
    assert write_deltalake(uri, pa.table({"id": [2]}), mode="append", storage_options=options) == 1
    assert _delta_rs_ids(uri, s3) == [1, 2]
    ids = _txn_ids(uri, options)
    assert len(ids) == 2 and len(set(ids)) == 2
    assert write_deltalake(uri, pa.table({"id": [3]}), mode="append", storage_options=options) == 2


def test_credentials_revoked_between_two_commits(s3):
    """A writer whose credentials stop working fails naming the table, the object and the cause, with
    no secret; nothing lands; the next writer with good credentials carries on at the next version."""
    from deltalog.storage.object_store import StoreUnreachableError

    options = s3.storage_options()
    uri = s3.uri("lost", "revoked")
    write_deltalake(uri, pa.table({"id": [1]}), storage_options=options)
    revoked = {**options, "AWS_SECRET_ACCESS_KEY": "revoked-secret-value"}
    with pytest.raises(StoreUnreachableError, match=r"s3://lake/lost/revoked: the store refused .*credentials") as e:
        write_deltalake(uri, pa.table({"id": [2]}), mode="append", storage_options=revoked)
    assert "revoked-secret-value" not in str(e.value) and options["AWS_SECRET_ACCESS_KEY"] not in str(e.value)
    assert _delta_rs_ids(uri, s3) == [1]
    assert write_deltalake(uri, pa.table({"id": [3]}), mode="append", storage_options=options) == 1
    assert _delta_rs_ids(uri, s3) == [1, 3]
