"""kafka-python against the broker: producer/consumer round trips with a group and commits,
and the admin client (topics, configs, partitions, groups, DeleteRecords)."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import InvalidPartitionsError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from client_helpers import read_all, wait_for_topic


@pytest.fixture(scope="module")
def admin(broker):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield a
    a.close()


def make_consumer(bootstrap: str, *topics: str, **config) -> KafkaConsumer:
    """A group consumer subscribed to `topics` once it knows their partitions.

    kafka-python 3.0.12 loses an assignment when its first join happens before the topic's
    metadata arrives: the leader assigns nothing, the metadata then calls for a rejoin, and
    if that rejoin's JoinGroup/SyncGroup outlasts one poll() the finished join is never
    applied (the assignment snapshot it took clears the rejoin condition), so the consumer
    owns nothing for good. Loading the metadata before subscribing avoids the rejoin."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        heartbeat_interval_ms=300,
        **config,
    )
    for topic in topics:
        assert consumer.partitions_for_topic(topic), f"no metadata for {topic}"
    if topics:
        consumer.subscribe(list(topics))
    return consumer


def consume(consumer: KafkaConsumer, count: int, timeout: float = 30.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            out.extend(records)
    return out


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_with_group_and_commits(broker, admin, topic, compression):
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, wait_for_metadata=True)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type=compression, linger_ms=5)
    futures = [
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2, headers=[("h", b"%d" % i)])
        for i in range(100)
    ]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    for part in (0, 1):
        assert [m.offset for m in metas if m.partition == part] == list(range(50))
    producer.close()

    group = f"{topic}-g"
    consumer = make_consumer(broker.bootstrap, topic, group_id=group)
    got = consume(consumer, 100)
    assert sorted((r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in got) == sorted(
        (i % 2, i // 2, b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i in range(100)
    )
    consumer.commit()
    assert consumer.committed(TopicPartition(topic, 0)) == 50
    assert consumer.committed(TopicPartition(topic, 1)) == 50
    consumer.close()

    # More records; the same group resumes after its commits.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type=compression)
    for i in range(100, 110):
        producer.send(topic, value=b"v%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    consumer = make_consumer(broker.bootstrap, topic, group_id=group)
    got = consume(consumer, 10)
    got += consume(consumer, 1, timeout=1.0)  # nothing more should come
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(100, 110))
    assert {r.offset for r in got} == set(range(50, 55))
    consumer.close()


def test_consumer_auto_commit_and_seek(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, wait_for_metadata=True)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1)
    for i in range(20):
        producer.send(topic, value=b"%d" % i)
    producer.flush(30)
    producer.close()
    group = f"{topic}-g"
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=100,
    )
    assert len(consume(consumer, 20)) == 20
    consumer.close()  # commits on close with auto commit
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    assert consumer.committed(tp) == 20
    consumer.assign([tp])
    consumer.seek(tp, 15)
    assert [r.offset for r in consume(consumer, 5)] == [15, 16, 17, 18, 19]
    consumer.seek_to_beginning(tp)
    assert consumer.position(tp) == 0
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 20
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 20}
    consumer.close()


def test_admin_create_describe_delete_topics(broker, admin, topic):
    created = admin.create_topics(
        {
            topic: {
                "num_partitions": 3,
                "replication_factor": 1,
                "configs": {"retention.ms": "123456", "cleanup.policy": "compact"},
            }
        },
        wait_for_metadata=True,
    )
    (entry,) = created["topics"]
    assert entry["error_code"] == 0 and entry["num_partitions"] == 3 and entry["replication_factor"] == 1
    assert entry["configs"]["retention.ms"]["value"] == "123456"

    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})

    # describe_configs: the default filter shows the overrides only ...
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    modified = configs["topic"][topic]
    assert {k: v["value"] for k, v in modified.items()} == {"retention.ms": "123456", "cleanup.policy": "compact"}
    assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    # ... and config_filter="all" every topic property, with where its value comes from.
    every = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")["topic"][
        topic
    ]
    assert every["retention.ms"]["value"] == "123456"
    assert every["max.message.bytes"]["value"] == "1048588"
    assert every["max.message.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"  # server.properties
    assert every["compression.type"]["config_source"] == "DEFAULT_CONFIG"
    # Asking for named keys returns just those.
    some = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.bytes": None})], config_filter="all"
    )["topic"][topic]
    assert list(some) == ["segment.bytes"]

    described = {t["name"]: t for t in admin.describe_topics([topic])}
    assert len(described[topic]["partitions"]) == 3
    assert topic in admin.list_topics()

    deleted = admin.delete_topics([topic])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(topic, 0)]
    deadline = time.monotonic() + 10
    while topic in admin.list_topics():
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic])


def test_admin_describe_broker_config(broker, admin):
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
    broker_configs = configs["broker"]["0"]
    assert broker_configs["num.partitions"]["value"] == "1"
    assert broker_configs["group.min.session.timeout.ms"]["value"] == "1000"


def test_admin_create_partitions(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, wait_for_metadata=True)
    result = admin.create_partitions({topic: 5})
    assert [(r.name, r.error_code) for r in result.results] == [(topic, 0)]
    wait_for_topic(broker.bootstrap, topic, 5)
    # The new partitions take records.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    producer.send(topic, value=b"in-4", partition=4).get(timeout=30)
    producer.close()
    rows = read_all(broker.bootstrap, topic, partitions=5)
    assert [(r[0], r[3]) for r in rows] == [(4, b"in-4")]
    # Shrinking is refused.
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic: 3})


def test_admin_list_and_describe_groups(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, wait_for_metadata=True)
    group = f"{topic}-g"
    consumer = make_consumer(broker.bootstrap, topic, group_id=group, client_id="describe-me")
    try:
        deadline = time.monotonic() + 20
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "consumer never got its partitions"
            consumer.poll(timeout_ms=100)
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups[group]["protocol_type"] == "consumer"
        assert groups[group]["group_state"] == "Stable"
        description = admin.describe_groups([group])[group]
        assert description["group_state"] == "Stable"
        assert description["protocol_type"] == "consumer"
        assert description["protocol_data"] in ("range", "roundrobin", "sticky")
        (member,) = description["members"]
        assert member["client_id"] == "describe-me"
        # kafka-python decodes the ConsumerProtocol subscription and assignment inline.
        assert member["member_metadata"]["topics"] == [topic]
        assigned = member["member_assignment"]["assigned_partitions"]
        assert {(a["topic"], p) for a in assigned for p in a["partitions"]} == {(topic, 0), (topic, 1)}
    finally:
        consumer.close()
    description = admin.describe_groups([group])[group]
    assert description["group_state"] == "Empty" and description["members"] == []


def test_admin_delete_records(broker, admin, topic):
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, wait_for_metadata=True)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i in range(10):
        producer.send(topic, value=b"%d" % i, partition=0)
    producer.flush(30)
    producer.close()
    tp = TopicPartition(topic, 0)
    result = admin.delete_records({tp: 6})
    assert result[tp]["low_watermark"] == 6
    assert [r[1] for r in read_all(broker.bootstrap, topic)] == [6, 7, 8, 9]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    assert consumer.beginning_offsets([tp]) == {tp: 6}
    consumer.close()
