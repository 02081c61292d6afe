"""A real Kafka broker for tests: Apache Kafka from Maven Central (`org.apache.kafka:kafka_2.13`, resolved by
tests/support/maven.py), one JVM in KRaft mode (broker and controller together, no ZooKeeper) on
127.0.0.1, its log folder formatted first, started and stopped by the test."""
from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from typing import Iterator

from tests.support.maven import jars
from tests.support.standalone import free_port, stop_process_groups, wait_until_listening


@dataclass
class Broker:
    bootstrap_servers: str

    def produce(self, topic: str, messages: list[tuple[str, str]]) -> None:
        """(key, value) messages, acknowledged by the broker before this returns."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "acks": "all"})
        for key, value in messages:
            producer.produce(topic, key=key, value=value)
        left = producer.flush(60)
        assert left == 0, f"{left} message(s) to {topic} were not acknowledged"


def _properties(port: int, controller: int, logs: str) -> str:
    return "\n".join([
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{controller}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT", f"log.dirs={logs}",
        # one broker: every internal topic with one replica
        "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1", "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1", "group.initial.rebalance.delay.ms=0",
        "num.partitions=2", "auto.create.topics.enable=true",
    ]) + "\n"


def _cluster_id() -> str:
    """A random cluster id as Kafka's own Uuid.randomUuid makes one: never starting with '-', which
    StorageTool's argument parser would take for an option (1 run in 64 failed to start the broker)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@contextlib.contextmanager
def kafka_broker() -> Iterator[Broker]:
    classpath = os.pathsep.join(jars("kafka"))
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    work = tempfile.mkdtemp(prefix="deltalog-kafka-")
    port, controller = free_port(), free_port()
    config = os.path.join(work, "server.properties")
    with open(config, "w") as f:
        f.write(_properties(port, controller, os.path.join(work, "logs")))
    cluster_id = _cluster_id()
    subprocess.run([java, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", config],
                   check=True, capture_output=True, timeout=120)
    log = open(os.path.join(work, "kafka.log"), "wb")
    proc = subprocess.Popen([java, "-Xmx512m", "-cp", classpath, "kafka.Kafka", config], stdout=log,
                            stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    try:
        wait_until_listening(port, proc, f"Kafka (see {work}/kafka.log)", 90)
        yield Broker(f"127.0.0.1:{port}")
    finally:
        stop_process_groups([proc], timeout=20)
        log.close()
        shutil.rmtree(work, ignore_errors=True)

