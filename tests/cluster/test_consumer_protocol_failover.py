"""A KIP-848 consumer group across a coordinator failover: the new coordinator loads the
group's records from __consumer_offsets and the members, caught mid-reconciliation,
converge on it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_helpers import FAST, call
from ingest_gateway.network.kafka_client import KafkaConnectionError
from harness.local_cluster import LocalCluster
from loglake.errors import ErrorCode
from loglake.groups.runtime import offsets_partition_for
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = "kip848-failover"
TOPIC = "kip848-events"
PARTITIONS = 6
# Below Kafka's minimums (hence the lowered bounds) so that a test sees fencing quickly;
# still long enough for clients to find the new coordinator before their session ends.
CONSUMER_GROUPS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3, {**FAST, **CONSUMER_GROUPS}, zookeeper_connect=zk_connect) as c:
        yield c


class Tracked:
    """A consumer whose owned partitions and received values are kept by its callbacks."""

    def __init__(self, bootstrap: str) -> None:
        self.owned: set[int] = set()
        self.values: list[bytes] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe(
            [TOPIC],
            on_assign=lambda c, ps: self.owned.update(p.partition for p in ps),
            on_revoke=lambda c, ps: self.owned.difference_update(p.partition for p in ps),
            on_lost=lambda c, ps: self.owned.difference_update(p.partition for p in ps),
        )

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            self.values.append(msg.value())


def poll_until(members: list[Tracked], condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {[sorted(m.owned) for m in members]}"
        for m in members:
            m.poll()


@pytest.mark.timeout(240)
def test_consumer_group_converges_on_the_new_coordinator(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    cluster.wait_for(lambda s: sum(p["topic"] == TOPIC and len(p["isr"]) == 3 for p in s["partitions"]) == PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [b"v%d" % i for i in range(60)]
    for v in values:
        producer.produce(TOPIC, value=v)
    assert producer.flush(30) == 0

    a = Tracked(cluster.bootstrap)
    b: Tracked | None = None
    try:
        poll_until([a], lambda: len(a.owned) == PARTITIONS, 60, "the first member's assignment")
        offsets_partition = offsets_partition_for(GROUP, 3)
        coordinator = cluster.partition("__consumer_offsets", offsets_partition)["leader"]
        b = Tracked(cluster.bootstrap)
        # Mid-reconciliation: the first member is giving partitions up, the second has not got them all.
        poll_until([a, b], lambda: len(a.owned) < PARTITIONS, 60, "a revocation")
        cluster.kill(coordinator)

        poll_until(
            [a, b],
            lambda: len(a.owned) == len(b.owned) == PARTITIONS // 2 and a.owned | b.owned == set(range(PARTITIONS)),
            90,
            "both members to own half the partitions",
        )
        poll_until([a, b], lambda: set(a.values + b.values) == set(values), 60, "every record consumed")
        # The new coordinator describes the group as converged: every member at the group epoch.
        group = describe_on_coordinator(cluster, GROUP)
        assert group["error_code"] == 0 and group["group_state"] == "Stable", group
        assert {m["member_epoch"] for m in group["members"]} == {group["group_epoch"]}
    finally:
        for m in (a, b):
            if m is not None:
                m.consumer.close()


# What a client does on these answers: find the coordinator again and retry. The members may
# have converged before the kill took effect, so the partition's new leader (hence the
# group's new coordinator) comes only once ZooKeeper expired the killed broker's session.
_COORDINATOR_MOVING = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def describe_on_coordinator(cluster: LocalCluster, group_id: str, timeout: float = 60.0) -> dict:
    """ConsumerGroupDescribe of `group_id`, sent to its coordinator as FindCoordinator names it."""
    deadline = time.monotonic() + timeout
    while True:
        live = cluster.live()[0]
        find = {"key_type": 0, "coordinator_keys": [group_id]}
        node = call(cluster.brokers[live].bootstrap, ApiKey.FIND_COORDINATOR, 4, find)["coordinators"][0]
        if node["error_code"] == 0:
            body = {"group_ids": [group_id], "include_authorized_operations": False}
            try:
                group = call(f"{node['host']}:{node['port']}", ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body)["groups"][0]
            except KafkaConnectionError:
                group = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}  # the killed broker, still named
            if group["error_code"] not in _COORDINATOR_MOVING:
                return group
        assert time.monotonic() < deadline, f"no coordinator answered for {group_id}: {node}"
        time.sleep(0.2)
