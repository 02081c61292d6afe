"""A streaming table reading a Kafka topic through dbt (`{{ stream_kafka(servers, topic) }}`), against a
real broker (Apache Kafka from Maven Central, KRaft mode, tests/support/kafka_broker.py) and Spark's Kafka source
(its jar from Maven Central: for pyspark 4.2, so this runs in the pyspark 4.2 environment beside
delta-spark, which also reads the table). Each `dbt run` takes the messages new since the last one, each
micro-batch one commit recording its batch id; a run that finds nothing new commits nothing at any layer
of the pipeline: bronze (the topic) -> silver (a stream of bronze) -> gold (a materialized view)."""
from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from deltalog.snapshot import Snapshot
from tests.support.kafka_broker import kafka_broker

pytestmark = [pytest.mark.spark, pytest.mark.dbt]

ORDERS = """
{{ config(materialized='streaming_table', partition_by=['region']) }}
select cast(key as string) as order_key,
       cast(get_json_object(cast(value as string), '$.amount') as bigint) as amount,
       get_json_object(cast(value as string), '$.region') as region,
       partition as kafka_partition, offset as kafka_offset
from {{ stream_kafka(var('bootstrap_servers'), 'orders', {'maxOffsetsPerTrigger': 4}) }}
"""


SILVER = """
{{ config(materialized='streaming_table') }}
select order_key, region, amount * 2 as doubled from {{ stream(ref('orders_from_kafka')) }}
"""

GOLD = """
{{ config(materialized='materialized_view') }}
select region, sum(doubled) as total, count(*) as n from {{ ref('orders_silver') }} group by region
"""


def _messages(ids: range) -> list[tuple[str, str]]:
    return [(f"o{i}", json.dumps({"amount": i * 10, "region": "eu" if i % 2 else "us"})) for i in ids]


@pytest.fixture(scope="module")
def broker():
    with kafka_broker() as server:
        yield server


class TestKafkaStreamingTable:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders_from_kafka.sql": ORDERS, "orders_silver.sql": SILVER, "orders_gold.sql": GOLD}

    def test_each_run_takes_the_new_messages_once(self, spark, broker, project, deltalog_warehouse):
        table = Path(deltalog_warehouse) / project.test_schema / "orders_from_kafka"
        variables = ["--vars", json.dumps({"bootstrap_servers": broker.bootstrap_servers})]

        def keys():
            rows = deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist()
            return sorted(int(r["order_key"][1:]) for r in rows)

        broker.produce("orders", _messages(range(0, 10)))
        _, out = run_dbt_and_capture(["run", *variables])
        assert keys() == list(range(10))
        assert "STREAMED 3 batch(es), 10 row(s)" in out  # at most 4 offsets per batch, each one commit
        layers = [Path(deltalog_warehouse) / project.test_schema / t for t in
                  ("orders_from_kafka", "orders_silver", "orders_gold")]
        versions = [Snapshot.load(str(t)).version for t in layers]
        run_dbt(["run", *variables])  # nothing new in the topic: no commit at any layer
        assert [Snapshot.load(str(t)).version for t in layers] == versions
        broker.produce("orders", _messages(range(10, 13)))
        run_dbt(["run", *variables])
        assert keys() == list(range(13))
        apps = Snapshot.load(str(table)).app_transactions
        assert list(apps.values()) == [3]  # batch ids 0..3, each recorded once
        # silver has every message once; gold (refreshed incrementally the second time) is exact
        silver = deltalake.DeltaTable(str(layers[1])).to_pyarrow_table().to_pylist()
        assert sorted(int(r["order_key"][1:]) for r in silver) == list(range(13))
        expected: dict = {}
        for i in range(13):
            region = "eu" if i % 2 else "us"
            total, n = expected.get(region, (0, 0))
            expected[region] = (total + i * 20, n + 1)
        gold = deltalake.DeltaTable(str(layers[2])).to_pyarrow_table().to_pylist()
        assert {r["region"]: (r["total"], r["n"]) for r in gold} == expected
        # delta-spark reads the table the stream wrote, partitioned by region
        rows = spark.read.format("delta").load(str(table)).select("order_key", "region").collect()
        assert sorted(int(r["order_key"][1:]) for r in rows) == list(range(13))
        assert {r["region"] for r in rows} == {"eu", "us"}
