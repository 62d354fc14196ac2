"""What the cluster tests share."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.local_cluster import LocalCluster

# Settings that make failures show within seconds: short ZooKeeper sessions and ISR lag,
# no initial rebalance delay, few offsets partitions, no background leader moves.
FAST = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "auto.leader.rebalance.enable": "false",
}


def serving(method: str, url: str, timeout: float = 30.0, **kwargs: Any) -> httpx.Response:
    """Send until the broker answers other than "not (yet) the leader": a broker the
    controller just made leader may not have received its LeaderAndIsr yet."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.request(method, url, timeout=10, **kwargs)
        if r.status_code not in (404, 503) or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def serving_get(url: str, **kwargs: Any) -> Any:
    """`serving` GET that must succeed; returns the JSON."""
    r = serving("GET", url, **kwargs)
    r.raise_for_status()
    return r.json()


def create_topic(
    cluster: LocalCluster, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})]).values():
        future.result(30)
    status = cluster.wait_for(
        lambda s: sum(p["topic"] == name and len(p["isr"]) == rf for p in s["partitions"]) == partitions
    )
    # /cluster is ZooKeeper's view; each leader serves once its LeaderAndIsr has arrived.
    for p in status["partitions"]:
        if p["topic"] == name:
            url = f"{cluster.http_url(p['leader'])}/topics/{name}/partitions/{p['partition']}/offsets"
            serving("GET", url).raise_for_status()


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[bytes]] = defaultdict(list)
    deadline = time.monotonic() + timeout
    while sum(map(len, out.values())) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                out[msg.partition()].append(msg.value())
    consumer.close()
    return out


def partition_of(status: dict, topic: str, partition: int = 0) -> dict:
    """One partition's entry of a /cluster status."""
    return next(p for p in status["partitions"] if p["topic"] == topic and p["partition"] == partition)
