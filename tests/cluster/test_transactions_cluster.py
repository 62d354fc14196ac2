"""Transactions in a 3-broker cluster (RF=3): the transaction coordinator killed between
PrepareCommit and the markers (its successor completes the commit), a partition leader
killed during a transaction, and markers replicated to followers (read_committed from a
new leader reads the same). Consumers see all or nothing of every transaction."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from cluster_helpers import FAST, call, create_topic
from harness.local_cluster import LocalCluster
from loglake.faults import FAULT_ENV
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PARTITIONS = 3
SETTINGS = {**FAST, "transaction.state.log.num.partitions": "3", "min.insync.replicas": "2"}


def coordinator_of(cluster: LocalCluster, transactional_id: str) -> int:
    body = {"key_type": 1, "coordinator_keys": [transactional_id]}
    deadline = time.monotonic() + 30
    while True:
        broker = cluster.live()[0]
        (found,) = call(cluster.brokers[broker].bootstrap, ApiKey.FIND_COORDINATOR, 4, body)["coordinators"]
        if found["error_code"] == 0:
            return found["node_id"]
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def read(cluster: LocalCluster, topic: str, isolation: str, timeout: float = 60) -> list[bytes]:
    """Every value of the topic up to its end (the LSO for read_committed), sorted."""
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "txn-cluster-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out, at_end = [], set()
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"only partitions {sorted(at_end)} reached their end"
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
            else:
                out.append(msg.value())
        return sorted(out)
    finally:
        c.close()


def transaction(producer: Producer, topic: str, tag: bytes, count: int = 30) -> list[bytes]:
    values = [b"%s-%03d" % (tag, i) for i in range(count)]
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def test_a_new_coordinator_completes_a_commit_whose_coordinator_died_before_the_markers(
    tmp_path, zk_connect, monkeypatch
):
    # Every broker would die at that point; only the first coordinator reaches it.
    monkeypatch.setenv(FAULT_ENV, "txn-after-prepare")
    with LocalCluster(tmp_path, 3, SETTINGS, zookeeper_connect=zk_connect) as cluster:
        monkeypatch.delenv(FAULT_ENV)  # the brokers have it; a restarted one will not
        topic = "txn-failover"
        create_topic(cluster, topic, PARTITIONS, 3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "failover-txn"})
        producer.init_transactions(30)
        coordinator = coordinator_of(cluster, "failover-txn")
        values = transaction(producer, topic, b"committed")
        assert read(cluster, topic, "read_committed") == []
        # EndTxn: the coordinator writes PrepareCommit and dies; the client retries with the
        # new coordinator, which finds the prepared commit and writes the markers.
        producer.commit_transaction(60)
        assert cluster.brokers[coordinator].proc.wait(30) == -9
        assert coordinator_of(cluster, "failover-txn") != coordinator
        assert read(cluster, topic, "read_committed") == sorted(values)
        cluster.restart(coordinator)  # without the fault, it rejoins
        assert read(cluster, topic, "read_committed") == sorted(values)


def test_a_partition_leader_killed_during_a_transaction(cluster: LocalCluster):
    topic = "txn-leader-loss"
    create_topic(cluster, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "leader-loss-txn"})
    producer.init_transactions(30)
    committed = transaction(producer, topic, b"before")
    producer.commit_transaction(30)

    coordinator = coordinator_of(cluster, "leader-loss-txn")
    victim = next(
        p["leader"] for p in cluster.status()["partitions"] if p["topic"] == topic and p["leader"] != coordinator
    )
    first_half = transaction(producer, topic, b"during")
    cluster.kill(victim)
    second_half = [b"during-late-%03d" % i for i in range(30)]
    for i, value in enumerate(second_half):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0  # the records of the dead leader's partition went to its successor
    producer.commit_transaction(60)
    committed += first_half + second_half
    assert read(cluster, topic, "read_committed") == sorted(committed)

    # An aborted transaction stays invisible across the next leader change too.
    aborted = transaction(producer, topic, b"aborted")
    producer.abort_transaction(30)
    cluster.restart(victim)
    survivor = next(b for b in cluster.live() if b not in (victim, coordinator))
    cluster.kill(survivor)
    assert read(cluster, topic, "read_committed") == sorted(committed)
    assert set(aborted) <= set(read(cluster, topic, "read_uncommitted"))
