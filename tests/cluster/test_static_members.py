"""Static group members (KIP-345) across a coordinator failover: the new coordinator loads
the members' instance ids from __consumer_offsets, so a restarted static member still
rejoins without a rebalance."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_helpers import call
from harness.local_cluster import LocalCluster
from loglake.protocol import ApiKey
from loglake.groups.runtime import offsets_partition_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

GROUP = "static-failover"
TOPIC = "static-events"


def static_consumer(cluster: LocalCluster, instance: str, on_assign=None) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(cluster.brokers[b].bootstrap for b in cluster.live()),
            "group.id": GROUP,
            "group.instance.id": instance,
            "session.timeout.ms": 45_000,
            "enable.auto.commit": False,
        }
    )
    if on_assign is None:
        consumer.subscribe([TOPIC])
    else:
        consumer.subscribe([TOPIC], on_assign=on_assign)
    return consumer


def partitions(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def poll_until(consumers: list[Consumer], condition, timeout: float, what: str, seen=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; last seen: {seen()}"
        for c in consumers:
            c.poll(0.1)


@pytest.mark.timeout(300)
def test_a_static_member_restarts_without_rebalance_after_coordinator_failover(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 4, 3)])[TOPIC].result(30)
    cluster.wait_for(lambda s: sum(p["topic"] == TOPIC and len(p["isr"]) == 3 for p in s["partitions"]) == 4)

    assignments_of_a: list[set[int]] = []
    a = static_consumer(cluster, "member-a", lambda c, ps: assignments_of_a.append({p.partition for p in ps}))
    b = static_consumer(cluster, "member-b")
    poll_until(
        [a, b],
        lambda: partitions(a) and partitions(b) and partitions(a) | partitions(b) == {0, 1, 2, 3},
        90,
        "both members assigned",
    )
    partitions_of_b = partitions(b)
    seen_by_a = len(assignments_of_a)

    offsets_partition = offsets_partition_for(GROUP, 3)
    coordinator = cluster.partition("__consumer_offsets", offsets_partition)["leader"]
    cluster.kill(coordinator)
    cluster.wait_for(
        lambda s: (
            next(
                p["leader"]
                for p in s["partitions"]
                if p["topic"] == "__consumer_offsets" and p["partition"] == offsets_partition
            )
            not in (-1, coordinator)
        ),
        exclude=(coordinator,),
    )
    # The new coordinator has loaded both static members (their instance ids included).
    # A new admin client for each attempt: one that asked FindCoordinator in the moment a
    # broker's metadata still named the dead coordinator keeps asking that one (librdkafka
    # caches the admin coordinator) until its request times out, again and again.
    survivors = ",".join(cluster.brokers[i].bootstrap for i in cluster.live())

    last: list[object] = []

    def coordinators_seen() -> dict[int, object]:
        """What each live broker answers FindCoordinator for the group."""
        body = {"key": GROUP, "key_type": 0, "coordinator_keys": [GROUP]}
        return {
            b: [
                (c["node_id"], c["error_code"])
                for c in call(cluster.brokers[b].bootstrap, ApiKey.FIND_COORDINATOR, 4, body)["coordinators"]
            ]
            for b in cluster.live()
        }

    def loaded() -> bool:
        try:
            admin = AdminClient({"bootstrap.servers": survivors})
            group = admin.describe_consumer_groups([GROUP], request_timeout=8)[GROUP].result(15)
        except Exception as exc:  # noqa: BLE001 - coordinator moving or loading: ask again
            last[:] = [exc]
            return False
        last[:] = [group.state, [(m.member_id, m.group_instance_id) for m in group.members]]
        return sorted(m.group_instance_id for m in group.members) == ["member-a", "member-b"]

    poll_until(
        [a, b],
        loaded,
        90,
        "the new coordinator to serve the group",
        lambda: (
            f"{last}; coordinators {coordinators_seen()}; cluster {cluster.status(exclude=(coordinator,))['partitions']}"
        ),
    )

    b.close()  # a static member does not leave the group on close
    restarted = static_consumer(cluster, "member-b")
    poll_until([a, restarted], lambda: bool(partitions(restarted)), 90, "the restarted member's assignment")
    assert partitions(restarted) == partitions_of_b
    # Invariant over a few heartbeat intervals: the other member is never reassigned.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        a.poll(0.1)
        restarted.poll(0.1)
        assert len(assignments_of_a) == seen_by_a, "the other member went through a rebalance"
    a.close()
    restarted.close()
