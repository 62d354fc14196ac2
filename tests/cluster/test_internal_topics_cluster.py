"""Internal topics in a cluster whose third broker starts late: with
`offsets.topic.replication.factor` and `transaction.state.log.replication.factor` 3 (conf/cluster)
and two brokers alive, FindCoordinator answers COORDINATOR_NOT_AVAILABLE (saying why) and
nothing is created, while a confluent-kafka consumer group waits; once the third broker is
up, `__consumer_offsets` and `__transaction_state` exist with three replicas per partition."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from cluster_helpers import FAST, create_topic
from metrics_helpers import scrape
from protocol_helpers import call
from harness.local_cluster import LocalCluster
from loglake.errors import ErrorCode
from loglake.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TXN_PARTITIONS = 3
SETTINGS = {**FAST, "transaction.state.log.num.partitions": str(TXN_PARTITIONS)}
SETTING_OF = {0: "offsets.topic.replication.factor", 1: "transaction.state.log.replication.factor"}


def refusals(cluster: LocalCluster) -> float:
    """FindCoordinator answers COORDINATOR_NOT_AVAILABLE, counted by every live broker."""
    return sum(
        scrape(cluster.http_url(b)).value(
            "kafka_network_request_errors_total", request="FindCoordinator", error="COORDINATOR_NOT_AVAILABLE"
        )
        for b in cluster.live()
    )


def replicas(make_store, topic: str) -> dict[int, tuple[int, ...]]:
    """The topic's replicas by partition, as ZooKeeper has them ({} if it does not exist)."""
    described = make_store().topics_named([topic]).get(topic)
    return {} if described is None else dict(described.assignment)


@pytest.mark.timeout(300)
def test_internal_topics_wait_for_their_replication_factor_of_live_brokers(
    tmp_path: Path, zk_connect: str, make_store
) -> None:
    with LocalCluster(tmp_path, 2, SETTINGS, zookeeper_connect=zk_connect) as cluster:
        create_topic(cluster, "events", 1, 2)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce("events", b"before-the-third")
        assert producer.flush(30) == 0

        # Every broker refuses, for groups and transactional ids alike, and says why.
        for broker in cluster.brokers.values():
            for key_type, setting in SETTING_OF.items():
                body = {"key_type": key_type, "coordinator_keys": ["late-third"]}
                (found,) = call(broker.bootstrap, ApiKey.FIND_COORDINATOR, 4, body)["coordinators"]
                assert found["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, found
                assert f"{setting} is 3 but only 2 brokers are alive" in found["error_message"], found

        # A consumer group's client is refused too (counted by the brokers) and waits.
        before = refusals(cluster)
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "late-third",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe(["events"])
            deadline = time.monotonic() + 60
            while refusals(cluster) <= before:
                assert time.monotonic() < deadline, "the consumer's FindCoordinator was never refused"
                msg = consumer.poll(0.5)
                assert msg is None or msg.error() is not None, "a record was read without a coordinator"
            assert consumer.assignment() == []
            assert replicas(make_store, OFFSETS_TOPIC) == {}
            assert replicas(make_store, TRANSACTION_STATE_TOPIC) == {}

            assert cluster.add_broker() == 3
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline, "the group did not read the record once broker 3 was up"
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    assert msg.value() == b"before-the-third"
                    break
        finally:
            consumer.close()

        offsets = replicas(make_store, OFFSETS_TOPIC)
        assert len(offsets) == int(FAST["offsets.topic.num.partitions"])
        assert all(sorted(r) == [1, 2, 3] for r in offsets.values()), offsets

        transactional = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "late-third"})
        transactional.init_transactions(60)
        transactional.begin_transaction()
        transactional.produce("events", b"in-a-transaction")
        transactional.commit_transaction(60)
        state = replicas(make_store, TRANSACTION_STATE_TOPIC)
        assert len(state) == TXN_PARTITIONS
        assert all(sorted(r) == [1, 2, 3] for r in state.values()), state
        described = make_store().topics_named([TRANSACTION_STATE_TOPIC])[TRANSACTION_STATE_TOPIC]
        assert described.config["min.insync.replicas"] == "2"  # transaction.state.log.min.isr, as configured
