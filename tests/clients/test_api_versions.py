"""The broker presents one Kafka release: every API it advertises has exactly Kafka 3.9.0's
range (KIP-896 floors aside, see tests/kafka_release.py), and clients that infer the
broker's version from ApiVersions see that release."""

from __future__ import annotations

from kafka import KafkaAdminClient

from client_helpers import connect, make_broker, raw_request, recv_frame, serve
from harness.process import free_port
from loglake.protocol import ApiKey, encode_request
from kafka_release import KAFKA_3_9_VERSIONS, release_versions

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


def test_broker_to_broker_apis_are_served_only_on_the_inter_broker_listener(tmp_path) -> None:
    """WriteTxnMarkers (like the controller's requests on a cluster) is for brokers: a client
    listener neither advertises nor answers it, whatever the ACLs."""
    client_port = free_port()
    process = make_broker(tmp_path / "logs")
    process.overrides.update(
        {
            "listeners": process.overrides["listeners"] + f",CLIENT://127.0.0.1:{client_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
        }
    )
    for broker in serve(process):
        client_listener = f"127.0.0.1:{client_port}"
        assert ApiKey.WRITE_TXN_MARKERS in advertised(broker.bootstrap)
        on_client = advertised(client_listener)
        assert ApiKey.WRITE_TXN_MARKERS not in on_client
        assert set(advertised(broker.bootstrap)) - set(on_client) == {ApiKey.WRITE_TXN_MARKERS}
        markers = {"markers": []}
        assert raw_request(broker.bootstrap, ApiKey.WRITE_TXN_MARKERS, 1, markers) == {"markers": []}
        with connect(client_listener) as s:
            s.sendall(encode_request(ApiKey.WRITE_TXN_MARKERS, 1, 7, "raw-test", markers))
            assert recv_frame(s) is None, "a client listener answered WriteTxnMarkers"
        # The listener still serves its clients.
        assert ApiKey.PRODUCE in advertised(client_listener)
