"""The broker presents one Kafka release: every API it advertises has exactly Kafka 3.9.0's
range (KIP-896 floors aside, see loglake.protocol.release), and clients that infer the
broker's version from ApiVersions see that release."""

from __future__ import annotations

from kafka import KafkaAdminClient

from client_helpers import raw_request
from loglake.protocol import ApiKey
from loglake.protocol.release import KAFKA_3_9_VERSIONS, release_versions

# What Kafka clients need from a broker, and what this one serves (no transactions, ACLs,
# SASL, quotas or reassignment yet).
SERVED = {
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
    ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS,
    ApiKey.INIT_PRODUCER_ID, ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS, ApiKey.ALTER_REPLICA_LOG_DIRS, ApiKey.DESCRIBE_LOG_DIRS,
    ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_GROUPS, ApiKey.ELECT_LEADERS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.OFFSET_DELETE, ApiKey.DESCRIBE_CLUSTER,
}  # fmt: skip


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    answer = raw_request(
        bootstrap, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}


def test_every_advertised_range_is_the_releases(broker) -> None:
    ranges = advertised(broker.bootstrap)
    assert SERVED <= set(ranges), f"not advertised: {sorted(ApiKey(k).name for k in SERVED - set(ranges))}"
    assert set(ranges) <= set(KAFKA_3_9_VERSIONS), "an API Kafka 3.9.0 does not have"
    assert ranges == {k: release_versions(k) for k in ranges}


def test_kafka_python_infers_kafka_3_9(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        inferred = admin._client.check_version()
    finally:
        admin.close()
    assert inferred == (3, 9), inferred
