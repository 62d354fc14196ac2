"""Cluster administration on three brokers over ZooKeeper: manual replica assignments,
ElectLeaders (preferred and unclean, also sent to a broker that is not the controller),
and Produce v10+ pointing a producer at the current leader (KIP-951)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.record.batch import encode_batch

from ingest_gateway.network.kafka_client import KafkaClient
from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def call(cluster: LocalCluster, broker_id: int, api_key: ApiKey, version: int, body: dict[str, Any]) -> dict:
    async def go() -> dict:
        client = KafkaClient("127.0.0.1", cluster.brokers[broker_id].kafka_port)
        try:
            return await client.request(api_key, version, body)
        finally:
            await client.close()

    return asyncio.run(go())


def partition(status: dict, topic: str, p: int = 0) -> dict:
    return next(x for x in status["partitions"] if x["topic"] == topic and x["partition"] == p)


def known_leader(cluster: LocalCluster, broker_id: int, topic: str) -> tuple[int, int]:
    """(leader, leader epoch) of the topic's partition 0 in `broker_id`'s metadata."""
    body = {
        "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    (answer,) = call(cluster, broker_id, ApiKey.METADATA, 12, body)["topics"]
    if answer["error_code"] or not answer["partitions"]:
        return -1, -1
    return answer["partitions"][0]["leader_id"], answer["partitions"][0]["leader_epoch"]


def roles(cluster: LocalCluster) -> tuple[int, int, int]:
    """(controller, two other brokers)."""
    controller = cluster.status()["controller"]["broker_id"]
    a, b = sorted(x for x in cluster.brokers if x != controller)
    return controller, a, b


def elect(cluster: LocalCluster, election: ElectionType, *partitions: tuple[str, int]) -> dict:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    results = admin.elect_leaders(election, [TopicPartition(t, p) for t, p in partitions]).result(timeout=60)
    return {(tp.topic, tp.partition): None if e is None else e.code() for tp, e in results.items()}


@pytest.mark.timeout(240)
def test_manual_assignments_place_replicas_and_are_validated(cluster: LocalCluster) -> None:
    controller, a, b = roles(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    placement = [[a, controller], [b, a], [controller, b]]
    admin.create_topics([NewTopic("placed", 3, replica_assignment=placement)])["placed"].result(timeout=60)
    status = cluster.wait_for(lambda s: sum(p["topic"] == "placed" and p["leader"] >= 0 for p in s["partitions"]) == 3)
    assert [partition(status, "placed", p)["replicas"] for p in range(3)] == placement
    assert [partition(status, "placed", p)["leader"] for p in range(3)] == [r[0] for r in placement]

    for bad, message in (([[a, b], [controller]], "same number of replicas"), ([[a, 9]], "Unknown broker")):
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic("refused", len(bad), replica_assignment=bad)])["refused"].result(60)
        assert info.value.args[0].code() == ErrorCode.INVALID_REPLICA_ASSIGNMENT, bad
        assert message in info.value.args[0].str()

    admin.create_partitions([NewPartitions("placed", 4, replica_assignment=[[b, controller]])])["placed"].result(60)
    # Sent to a broker that is not the controller: forwarded with its assignment.
    body = {
        "topics": [{"name": "placed", "count": 5, "assignments": [{"broker_ids": [controller, a]}]}],
        "timeout_ms": 30000,
    }
    assert call(cluster, a, ApiKey.CREATE_PARTITIONS, 3, body)["results"][0]["error_code"] == 0
    refused = {"topics": [{"name": "placed", "count": 6, "assignments": [{"broker_ids": [a]}]}], "timeout_ms": 30000}
    result = call(cluster, b, ApiKey.CREATE_PARTITIONS, 3, refused)["results"][0]
    assert result["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT, result
    status = cluster.wait_for(lambda s: sum(p["topic"] == "placed" and p["leader"] >= 0 for p in s["partitions"]) == 5)
    assert partition(status, "placed", 3)["replicas"] == [b, controller]
    assert partition(status, "placed", 4)["replicas"] == [controller, a]


@pytest.mark.timeout(300)
def test_preferred_and_unclean_elections(cluster: LocalCluster) -> None:
    _, a, b = roles(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name, replicas in (("pref", [[a, b]]), ("stale", [[a, b]]), ("solo", [[a]])):
        admin.create_topics([NewTopic(name, 1, replica_assignment=replicas)])[name].result(timeout=60)
    cluster.wait_for(lambda s: all(partition(s, t)["leader"] == a for t in ("pref", "stale", "solo")))
    assert elect(cluster, ElectionType.PREFERRED, ("pref", 0)) == {("pref", 0): ErrorCode.ELECTION_NOT_NEEDED}
    assert elect(cluster, ElectionType.UNCLEAN, ("pref", 0)) == {("pref", 0): ErrorCode.ELECTION_NOT_NEEDED}

    # The preferred replica fails and comes back in sync: leadership returns only on request
    # (automatic rebalancing is off in these tests).
    cluster.kill(a)
    cluster.wait_for(lambda s: partition(s, "pref")["leader"] == b and partition(s, "pref")["isr"] == [b])
    assert elect(cluster, ElectionType.PREFERRED, ("pref", 0)) == {
        ("pref", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    }
    cluster.restart(a)
    # Both partitions: "stale" (led by b now) must have a back in sync before b is killed
    # below, or its leadership has nowhere to go.
    cluster.wait_for(lambda s: all(sorted(partition(s, t)["isr"]) == sorted([a, b]) for t in ("pref", "stale")))
    assert partition(cluster.status(), "pref")["leader"] == b
    assert elect(cluster, ElectionType.PREFERRED, ("pref", 0)) == {("pref", 0): None}
    cluster.wait_for(lambda s: partition(s, "pref")["leader"] == a)

    # "stale": its leader b dies (a takes over, alone in the ISR), then a dies too. b comes
    # back alive but not in sync: only an unclean election may make it leader.
    cluster.kill(b)
    cluster.wait_for(lambda s: partition(s, "stale")["isr"] == [a])
    cluster.kill(a)
    cluster.wait_for(lambda s: partition(s, "stale")["leader"] == -1)
    cluster.restart(b)
    status = cluster.wait_for(lambda s: any(x["broker_id"] == b for x in s["brokers"]))
    assert partition(status, "stale")["leader"] == -1, "b was not in the ISR"
    assert elect(cluster, ElectionType.PREFERRED, ("stale", 0)) == {
        ("stale", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    }
    # Sent to b, which is not the controller: forwarded.
    body = {
        "election_type": ElectionType.UNCLEAN.value,
        "topic_partitions": [{"topic": "stale", "partitions": [0]}, {"topic": "solo", "partitions": [0]}],
        "timeout_ms": 30000,
    }
    answer = call(cluster, b, ApiKey.ELECT_LEADERS, 2, body)
    codes = {
        (r["topic"], p["partition_id"]): p["error_code"]
        for r in answer["replica_election_results"]
        for p in r["partition_result"]
    }
    assert codes == {("stale", 0): 0, ("solo", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    status = cluster.wait_for(lambda s: partition(s, "stale")["leader"] == b)
    assert partition(status, "stale")["isr"] == [b]
    assert partition(status, "solo")["leader"] == -1


@pytest.mark.timeout(180)
def test_produce_to_a_follower_names_the_current_leader(cluster: LocalCluster) -> None:
    _, a, b = roles(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("moved", 1, replica_assignment=[[a, b]])])["moved"].result(timeout=60)
    state = partition(cluster.wait_for(lambda s: partition(s, "moved")["leader"] == a), "moved")
    # As Kafka's tests: the leader a names is what b's metadata says. A LeaderAndIsr can
    # reach b before the UpdateMetadata does; until then b answers NOT_LEADER_OR_FOLLOWER
    # with no leader to name (Kafka's getCurrentLeader reads the metadata cache too).
    deadline = time.monotonic() + 30
    while known_leader(cluster, b, "moved") != (a, state["leader_epoch"]):
        assert time.monotonic() < deadline, f"broker {b} never learned the leader: {known_leader(cluster, b, 'moved')}"
        time.sleep(0.1)
    records = encode_batch([(None, b"x", (), None)], int(time.time() * 1000))
    body = {
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "moved", "partition_data": [{"index": 0, "records": records}]}],
    }

    def produce_to_follower(version: int) -> tuple[dict, dict]:
        deadline = time.monotonic() + 30
        while True:  # b learns the partition through its LeaderAndIsr
            answer = call(cluster, b, ApiKey.PRODUCE, version, body)
            part = answer["responses"][0]["partition_responses"][0]
            if part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
                return answer, part
            time.sleep(0.2)

    answer, part = produce_to_follower(11)
    assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part["current_leader"] == {"leader_id": a, "leader_epoch": state["leader_epoch"]}
    assert [(n["node_id"], n["port"]) for n in answer["node_endpoints"]] == [(a, cluster.brokers[a].kafka_port)]
    answer, part = produce_to_follower(9)  # before KIP-951: no hint
    assert part["current_leader"]["leader_id"] == -1 and not answer["node_endpoints"]


@pytest.mark.timeout(180)
def test_forwarded_elections_and_reassignments_honour_timeout_ms(cluster: LocalCluster) -> None:
    """The controller does not answer (SIGSTOP, within its ZooKeeper session): a broker
    forwarding ElectLeaders and AlterPartitionReassignments waits the request's own
    timeout_ms, not a fixed 30 s, then answers REQUEST_TIMED_OUT."""
    controller, a, _ = roles(cluster)
    elect_body = {
        "election_type": ElectionType.PREFERRED.value,
        "topic_partitions": [{"topic": "t", "partitions": [0]}],
        "timeout_ms": 500,
    }
    reassign_body = {"timeout_ms": 500, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [a]}]}]}

    async def both() -> tuple[dict, dict]:
        clients = [KafkaClient("127.0.0.1", cluster.brokers[a].kafka_port) for _ in range(2)]
        try:
            return await asyncio.gather(
                clients[0].request(ApiKey.ELECT_LEADERS, 2, elect_body, timeout_ms=20000),
                clients[1].request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, reassign_body, timeout_ms=20000),
            )
        finally:
            for c in clients:
                await c.close()

    call(cluster, a, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    cluster.pause(controller)
    try:
        started = time.monotonic()
        elected, reassigned = asyncio.run(both())
        elapsed = time.monotonic() - started
    finally:
        cluster.resume(controller)
    assert elapsed < 10, f"answered after {elapsed:.1f} s"
    (result,) = elected["replica_election_results"]
    assert [p["error_code"] for p in result["partition_result"]] == [ErrorCode.REQUEST_TIMED_OUT]
    assert reassigned["error_code"] == ErrorCode.REQUEST_TIMED_OUT
    assert "500 ms" in reassigned["error_message"]
