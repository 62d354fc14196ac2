"""Cluster administration through real clients on one broker: DescribeCluster, authorized
operations, manual replica assignments, ElectLeaders, transactional producers failing
fast, and every version the broker advertises for these APIs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from client_helpers import create_topic, wait_for_topic
from confluent_kafka import ElectionType, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewPartitions, NewTopic
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from kafka_release import release_versions
from loglake.record.batch import encode_batch

from ingest_gateway.apis.authorized_operations import NOT_REQUESTED
from loglake.security.acls import RESOURCE_OPERATIONS, ResourceType

# Without an authorizer every operation of the resource type is authorized (Kafka's answer).
TOPIC_OPERATIONS = sum(1 << op for op in RESOURCE_OPERATIONS[ResourceType.TOPIC])
CLUSTER_OPERATIONS = sum(1 << op for op in RESOURCE_OPERATIONS[ResourceType.CLUSTER])
from ingest_gateway.network.kafka_client import KafkaClient

CLUSTER_ACL_OPERATIONS = {
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
}
TOPIC_ACL_OPERATIONS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def call(broker, api_key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        client = KafkaClient("127.0.0.1", broker.kafka_port)
        try:
            return await client.request(api_key, version, body)
        finally:
            await client.close()

    return asyncio.run(go())


def kafka_error(future) -> Any:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    return info.value.args[0]


def test_describe_cluster_with_and_without_authorized_operations(broker):
    a = admin(broker)
    described = a.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert [(n.id, n.host, n.port) for n in described.nodes] == [(0, "127.0.0.1", broker.kafka_port)]
    assert described.controller.id == 0
    assert described.cluster_id
    # No authorizer: every operation Kafka supports on the cluster resource.
    assert set(described.authorized_operations) == CLUSTER_ACL_OPERATIONS
    assert a.describe_cluster().result(timeout=30).authorized_operations is None


def test_describe_cluster_endpoint_types(broker):
    assert (
        call(broker, ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 2})["error_code"]
        == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    )
    assert (
        call(broker, ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 7})["error_code"]
        == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    )
    answer = call(broker, ApiKey.DESCRIBE_CLUSTER, 1, {"endpoint_type": 1})
    assert answer["error_code"] == 0 and answer["endpoint_type"] == 1
    assert answer["cluster_authorized_operations"] == NOT_REQUESTED


def test_describe_topics_authorized_operations(broker, topic):
    create_topic(broker.bootstrap, topic, 2)
    a = admin(broker)
    described = a.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(described.authorized_operations) == TOPIC_ACL_OPERATIONS
    assert len(described.partitions) == 2
    plain = a.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert not plain.authorized_operations


@pytest.mark.parametrize("version", [8, 10, 11, 12])
def test_metadata_authorized_operations(broker, topic, version):
    create_topic(broker.bootstrap, topic)
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    asked = call(
        broker,
        ApiKey.METADATA,
        version,
        body | {"include_cluster_authorized_operations": True, "include_topic_authorized_operations": True},
    )
    assert asked["topics"][0]["topic_authorized_operations"] == TOPIC_OPERATIONS
    # Kafka 2.8 (KIP-700) moved the cluster's operations to DescribeCluster.
    assert asked["cluster_authorized_operations"] == (CLUSTER_OPERATIONS if version <= 10 else NOT_REQUESTED)
    plain = call(broker, ApiKey.METADATA, version, body)
    assert plain["topics"][0]["topic_authorized_operations"] == NOT_REQUESTED
    assert plain["cluster_authorized_operations"] == NOT_REQUESTED


def test_create_topic_and_partitions_with_a_replica_assignment(broker, topic):
    a = admin(broker)
    a.create_topics([NewTopic(topic, 2, replica_assignment=[[0], [0]])])[topic].result(timeout=30)
    wait_for_topic(broker.bootstrap, topic, 2)
    a.create_partitions([NewPartitions(topic, 4, replica_assignment=[[0], [0]])])[topic].result(timeout=30)
    wait_for_topic(broker.bootstrap, topic, 4)
    md = a.list_topics(topic, timeout=10).topics[topic]
    assert {p: (m.leader, m.replicas) for p, m in md.partitions.items()} == {p: (0, [0]) for p in range(4)}


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ([[0], [7]], "Unknown broker"),
        ([[0, 0]], "Duplicate brokers"),
    ],
)
def test_invalid_topic_assignments_are_refused(broker, topic, assignment, message):
    a = admin(broker)
    error = kafka_error(a.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)])[topic])
    assert error.code() == ErrorCode.INVALID_REPLICA_ASSIGNMENT and message in error.str()
    assert topic not in a.list_topics(timeout=10).topics


def test_assignment_partition_numbers_and_counts_are_checked(broker, topic):
    def create(t: dict[str, Any]) -> dict[str, Any]:
        body = {"topics": [{"name": topic, "num_partitions": -1, "replication_factor": -1} | t], "timeout_ms": 5000}
        return call(broker, ApiKey.CREATE_TOPICS, 7, body)["topics"][0]

    gap = create(
        {"assignments": [{"partition_index": 0, "broker_ids": [0]}, {"partition_index": 2, "broker_ids": [0]}]}
    )
    assert gap["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "consecutive" in gap["error_message"]
    empty = create(
        {"assignments": [{"partition_index": 0, "broker_ids": [0]}, {"partition_index": 1, "broker_ids": []}]}
    )
    assert empty["error_code"] == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "factor of 0" in empty["error_message"]
    both = create({"num_partitions": 1, "assignments": [{"partition_index": 0, "broker_ids": [0]}]})
    assert both["error_code"] == ErrorCode.INVALID_REQUEST
    assert topic not in admin(broker).list_topics(timeout=10).topics

    create_topic(broker.bootstrap, topic, 1)
    a = admin(broker)
    too_few = kafka_error(a.create_partitions([NewPartitions(topic, 3, replica_assignment=[[0]])])[topic])
    assert too_few.code() == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    unknown = kafka_error(a.create_partitions([NewPartitions(topic, 2, replica_assignment=[[5]])])[topic])
    assert unknown.code() == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert len(a.list_topics(topic, timeout=10).topics[topic].partitions) == 1


def test_a_null_topic_config_value_is_refused(broker, topic):
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": 1,
                "replication_factor": 1,
                "configs": [{"name": "retention.ms", "value": None}],
            }
        ],
        "timeout_ms": 5000,
    }
    assert call(broker, ApiKey.CREATE_TOPICS, 7, body)["topics"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    assert topic not in admin(broker).list_topics(timeout=10).topics


def test_elect_leaders_on_one_broker(broker, topic):
    create_topic(broker.bootstrap, topic, 2)
    a = admin(broker)
    results = a.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(topic, 0), TopicPartition(topic, 5), TopicPartition("no-such", 0)]
    ).result(timeout=30)
    codes = {(tp.topic, tp.partition): e.code() if e is not None else None for tp, e in results.items()}
    assert codes == {
        (topic, 0): ErrorCode.ELECTION_NOT_NEEDED,
        (topic, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # Every partition: those needing no election are left out, as Kafka does.
    assert a.elect_leaders(ElectionType.UNCLEAN, None).result(timeout=30) == {}
    bad = call(broker, ApiKey.ELECT_LEADERS, 2, {"election_type": 9, "topic_partitions": None})
    assert bad["replica_election_results"] == [] and bad["error_code"] == ErrorCode.INVALID_REQUEST


def test_transactional_init_producer_id_every_version(broker):
    """Each InitProducerId version with a transactional id keeps the producer id and bumps the epoch."""
    find = call(broker, ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["t"]})
    assert find["coordinators"][0]["error_code"] == ErrorCode.NONE
    seen = []
    for version in range(*_inclusive(release_versions(ApiKey.INIT_PRODUCER_ID))):
        body = {"transactional_id": "t", "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
        answer = call(broker, ApiKey.INIT_PRODUCER_ID, version, body)
        deadline = time.monotonic() + 30
        while answer["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
            time.sleep(0.05)  # __transaction_state was just created: poll until its partition is loaded
            answer = call(broker, ApiKey.INIT_PRODUCER_ID, version, body)
        assert answer["error_code"] == ErrorCode.NONE, (version, answer)
        seen.append((answer["producer_id"], answer["producer_epoch"]))
    assert len({pid for pid, _ in seen}) == 1
    assert [epoch for _, epoch in seen] == list(range(seen[0][1], seen[0][1] + len(seen)))


def _inclusive(versions: tuple[int, int]) -> tuple[int, int]:
    return versions[0], versions[1] + 1


OWNED = [
    ApiKey.PRODUCE,
    ApiKey.LIST_OFFSETS,
    ApiKey.METADATA,
    ApiKey.API_VERSIONS,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.DELETE_RECORDS,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.ELECT_LEADERS,
    ApiKey.DESCRIBE_CLUSTER,
]


def test_api_versions_advertise_the_release_ranges(broker):
    for version in range(*_inclusive(release_versions(ApiKey.API_VERSIONS))):
        answer = call(
            broker, ApiKey.API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert answer["error_code"] == 0
        advertised = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
        assert {k: advertised.get(k) for k in OWNED} == {k: release_versions(k) for k in OWNED}


def test_every_advertised_version_answers(broker, topic):
    """Each API at each version of its range, flexible ones included."""
    create_topic(broker.bootstrap, topic)
    tp = {"name": topic, "topic": topic}
    for version in range(*_inclusive(release_versions(ApiKey.PRODUCE))):
        records = encode_batch([(None, b"v%d" % version, (), None)], int(time.time() * 1000))
        body = {
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [tp | {"partition_data": [{"index": 0, "records": records}]}],
        }
        part = call(broker, ApiKey.PRODUCE, version, body)["responses"][0]["partition_responses"][0]
        assert (part["error_code"], part["base_offset"]) == (0, version - 3), version
    for version in range(*_inclusive(release_versions(ApiKey.LIST_OFFSETS))):
        body = {"replica_id": -1, "topics": [tp | {"partitions": [{"partition_index": 0, "timestamp": -1}]}]}
        part = call(broker, ApiKey.LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]
        assert (part["error_code"], part["offset"]) == (0, 9), version
    for version in range(*_inclusive(release_versions(ApiKey.METADATA))):
        answer = call(broker, ApiKey.METADATA, version, {"topics": [{"name": topic}]})
        assert answer["topics"][0]["error_code"] == 0 and answer["brokers"][0]["port"] == broker.kafka_port, version
    for version in range(*_inclusive(release_versions(ApiKey.OFFSET_FOR_LEADER_EPOCH))):
        body = {
            "replica_id": -1,
            "topics": [tp | {"partitions": [{"partition": 0, "leader_epoch": 0, "current_leader_epoch": -1}]}],
        }
        part = call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body)["topics"][0]["partitions"][0]
        assert (part["error_code"], part["end_offset"]) == (0, 9), version
    for version in range(*_inclusive(release_versions(ApiKey.DELETE_RECORDS))):
        body = {"timeout_ms": 5000, "topics": [tp | {"partitions": [{"partition_index": 0, "offset": version + 1}]}]}
        part = call(broker, ApiKey.DELETE_RECORDS, version, body)["topics"][0]["partitions"][0]
        assert (part["error_code"], part["low_watermark"]) == (0, version + 1), version
    for version in range(*_inclusive(release_versions(ApiKey.INIT_PRODUCER_ID))):
        body = {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}
        answer = call(broker, ApiKey.INIT_PRODUCER_ID, version, body)
        assert answer["error_code"] == 0 and answer["producer_id"] >= 0, version
    for version in range(*_inclusive(release_versions(ApiKey.ELECT_LEADERS))):
        body = {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0]}], "timeout_ms": 5000}
        part = call(broker, ApiKey.ELECT_LEADERS, version, body)["replica_election_results"][0]["partition_result"][0]
        assert part["error_code"] == ErrorCode.ELECTION_NOT_NEEDED, version
    for version in range(*_inclusive(release_versions(ApiKey.DESCRIBE_CLUSTER))):
        answer = call(broker, ApiKey.DESCRIBE_CLUSTER, version, {"include_cluster_authorized_operations": True})
        assert answer["error_code"] == 0 and answer["cluster_authorized_operations"] == CLUSTER_OPERATIONS, version

    # Topic administration: create with an assignment, grow, delete (by id from v6).
    for version in range(*_inclusive(release_versions(ApiKey.CREATE_TOPICS))):
        name = f"{topic}-v{version}"
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [0]}],
                }
            ],
            "timeout_ms": 5000,
        }
        assert call(broker, ApiKey.CREATE_TOPICS, version, body)["topics"][0]["error_code"] == 0, version
        wait_for_topic(broker.bootstrap, name, 1)
    for version in range(*_inclusive(release_versions(ApiKey.CREATE_PARTITIONS))):
        name = f"{topic}-v{version}"
        body = {"topics": [{"name": name, "count": 2, "assignments": [{"broker_ids": [0]}]}], "timeout_ms": 5000}
        assert call(broker, ApiKey.CREATE_PARTITIONS, version, body)["results"][0]["error_code"] == 0, version
    ids = {
        t["name"]: t["topic_id"]
        for t in call(broker, ApiKey.METADATA, 12, {"topics": None})["topics"]
        if t["name"].startswith(f"{topic}-v")
    }
    for version in range(*_inclusive(release_versions(ApiKey.DELETE_TOPICS))):
        name = f"{topic}-v{version}"
        body = {"topic_names": [name], "topics": [{"name": None, "topic_id": ids[name]}], "timeout_ms": 5000}
        assert call(broker, ApiKey.DELETE_TOPICS, version, body)["responses"][0]["error_code"] == 0, version


def test_list_offsets_special_timestamps_by_version(broker, topic):
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce(topic, b"%d" % i)
    producer.flush(30)
    call(
        broker,
        ApiKey.DELETE_RECORDS,
        2,
        {"timeout_ms": 5000, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}]},
    )

    def ask(version: int, timestamp: int) -> dict[str, Any]:
        body = {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]}
        return call(broker, ApiKey.LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]

    # -4: the local log's start (KIP-405); with no tiered storage that is the log start.
    assert ask(7, -4)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert (ask(8, -4)["error_code"], ask(8, -4)["offset"]) == (0, 2)
    # -5: the last tiered offset (KIP-1005); without remote storage Kafka answers -1, epoch -1.
    assert ask(8, -5)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    latest_tiered = ask(9, -5)
    assert (latest_tiered["error_code"], latest_tiered["offset"], latest_tiered["leader_epoch"]) == (0, -1, -1)
    assert ask(6, -3)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert ask(9, -6)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert (ask(9, -2)["offset"], ask(9, -1)["offset"]) == (2, 5)


def test_kafka_python_admin_and_transactions(broker, topic):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.admin import NewTopic as KpNewTopic

    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(3, 9))
    try:
        cluster = a.describe_cluster()
        assert cluster["controller_id"] == 0
        assert set(cluster["authorized_operations"]) == {op.name for op in CLUSTER_ACL_OPERATIONS}
        created = a.create_topics([KpNewTopic(topic, -1, -1, replica_assignments={0: [0], 1: [0]})])
        assert created["topics"][0]["num_partitions"] == 2
        a.create_partitions({topic: KpNewPartitions(3, [[0]])})
        wait_for_topic(broker.bootstrap, topic, 3)
        answer = a.elect_leaders(1, {topic: [0, 2]})
        results = {p.partition_id: p.error_code for r in answer.replica_election_results for p in r.partition_result}
        assert results == {0: ErrorCode.ELECTION_NOT_NEEDED, 2: ErrorCode.ELECTION_NOT_NEEDED}
    finally:
        a.close()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn", api_version=(3, 9))
    try:
        producer.init_transactions()
    finally:
        producer.close(timeout=5)
