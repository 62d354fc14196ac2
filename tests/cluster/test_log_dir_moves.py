"""Replicas of a replicated partition moved to another log dir of their brokers (leader and
followers) while an idempotent producer writes with acks=all: replication keeps the ISR whole
and every acknowledged record is read back in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError

from cluster_helpers import FAST, create_topic, partition_of, read_all
from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[LocalCluster]:
    # Small copy chunks: each move takes many, with appends in between.
    overrides = {**FAST, "replica.fetch.max.bytes": "16384"}
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect, log_dirs_per_broker=2) as c:
        yield c


def current_dirs(admin: KafkaAdminClient, topic: str) -> dict[int, str]:
    """broker id -> the log dir holding its current (not future) replica of `topic`-0."""
    out = {}
    for answer in admin.describe_log_dirs():
        for log_dir in answer["log_dirs"]:
            for t in log_dir["topics"]:
                current = [p for p in t["partitions"] if p["partition_index"] == 0 and not p["is_future_key"]]
                if t["name"] == topic and current:
                    out[answer["broker"]] = log_dir["log_dir"]
    return out


@pytest.mark.timeout(240)
def test_moving_every_replica_while_producing_loses_nothing(cluster: LocalCluster) -> None:
    topic = "moving-dirs"
    create_topic(cluster, topic, 1, 3, {"min.insync.replicas": "2", "segment.bytes": "100000"})
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True, "batch.size": 16384}
    )
    acked: list[int] = []
    errors: list[object] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(int(msg.value().split(b":")[0]))
        else:
            errors.append(err)

    stop = threading.Event()

    def keep_producing() -> None:
        # A steady ~2,000 records/s: a move must catch up with the log's end to swap, and a
        # producer at full speed on a loaded 2-core machine can outrun the copy for minutes.
        i = 0
        while not stop.is_set():
            producer.produce(topic, f"{i}:".encode().ljust(200, b"."), on_delivery=on_delivery)
            producer.poll(0)
            i += 1
            if i % 20 == 0:
                time.sleep(0.01)
            if i % 500 == 0:
                producer.flush(30)

    writer = threading.Thread(target=keep_producing)
    writer.start()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, api_version=(3, 9))
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 3000:
            assert time.monotonic() < deadline, "producing stalled before the moves"
            time.sleep(0.05)
        before = current_dirs(admin, topic)
        assert sorted(before) == [1, 2, 3]
        targets = {b: (d + "2" if not d.endswith("2") else d[:-1]) for b, d in before.items()}
        result = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, b): d for b, d in targets.items()})
        assert set(result.values()) == {NoError}, result
        deadline = time.monotonic() + 60
        while current_dirs(admin, topic) != targets:
            assert time.monotonic() < deadline, f"replicas not moved: {current_dirs(admin, topic)} != {targets}"
            time.sleep(0.1)
        count = len(acked)
        deadline = time.monotonic() + 60
        while len(acked) < count + 2000:
            assert time.monotonic() < deadline, "producing stalled after the moves"
            time.sleep(0.05)
    finally:
        stop.set()
        writer.join(60)
        admin.close()
    assert producer.flush(60) == 0
    assert not errors, errors[:5]
    cluster.wait_for(lambda s: len(partition_of(s, topic)["isr"]) == 3)
    values = read_all(cluster.bootstrap, topic, 1, len(acked))[0]
    assert [int(v.split(b":")[0]) for v in values] == list(range(len(values)))
    assert set(acked) <= set(range(len(values)))
