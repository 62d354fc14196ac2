"""Consumers fetch from the nearest replica (KIP-392): with the rack-aware replica selector,
a consumer whose `client.rack` names a follower's rack reads everything from that follower,
and one without a rack (or in a rack with no replica) reads from the leader."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_helpers import FAST
from harness.local_cluster import LocalCluster
from loglake.broker_configs import RACK_AWARE_REPLICA_SELECTOR
from metrics_helpers import scrape

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BYTES_OUT = "kafka_server_broker_topic_bytes_out_total"


def consume(bootstrap: str, topic: str, count: int, rack: str | None) -> list[bytes]:
    config = {"bootstrap.servers": bootstrap, "group.id": f"near-{rack}", "enable.auto.commit": False}
    if rack is not None:
        config["client.rack"] = rack
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    try:
        while len(values) < count:
            msg = consumer.poll(30)
            assert msg is not None, f"only {len(values)} of {count} records consumed"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def bytes_out(cluster: LocalCluster, broker_id: int, topic: str) -> float:
    return scrape(cluster.http_url(broker_id)).value(BYTES_OUT, topic=topic)


def test_a_consumer_reads_from_the_in_sync_replica_in_its_rack(tmp_path, zk_connect: str) -> None:
    racks = {1: "zone-a", 2: "zone-b", 3: "zone-c"}
    with LocalCluster(
        tmp_path,
        3,
        {**FAST, "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR},
        zookeeper_connect=zk_connect,
        broker_overrides={b: {"broker.rack": r} for b, r in racks.items()},
    ) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic("near", 1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "1"})
        for future in admin.create_topics([topic]).values():
            future.result(30)
        cluster.wait_for(lambda s: any(p["topic"] == "near" and len(p["isr"]) == 3 for p in s["partitions"]))
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        expected = [b"%05d" % i for i in range(2000)]
        for value in expected:
            producer.produce("near", value, partition=0)
        assert producer.flush(30) == 0

        # In zone-b: everything comes from broker 2, the follower there.
        assert consume(cluster.bootstrap, "near", len(expected), "zone-b") == expected
        assert bytes_out(cluster, 2, "near") > 0
        assert bytes_out(cluster, 1, "near") == bytes_out(cluster, 3, "near") == 0

        # No rack, or a rack without a replica: the leader serves.
        assert consume(cluster.bootstrap, "near", len(expected), None) == expected
        leader_bytes = bytes_out(cluster, 1, "near")
        assert leader_bytes > 0
        assert consume(cluster.bootstrap, "near", len(expected), "zone-x") == expected
        assert bytes_out(cluster, 1, "near") > leader_bytes
        assert bytes_out(cluster, 3, "near") == 0
