"""LeaderAndIsr, StopReplica and UpdateMetadata at every version Kafka 3.9.0 serves: the
shapes differ (ungrouped partitions before LeaderAndIsr v2 and StopReplica v3, topic ids
from LeaderAndIsr v5), the effect is the same."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ingest_gateway.server.broker import Broker
from ingest_gateway.apis.controller_apis import ControllerApis
from loglake.coordination.model import LeaderAndIsrPartition, PartitionState, TopicDescription
from loglake.protocol import ApiKey, decode_request, decode_response, encode_request, encode_response
from kafka_release import release_versions
from protocol_helpers import plaintext_connection

from ingest_gateway.network.request_context import RequestContext

TOPIC_ID = uuid.UUID(int=0xABC)


def versions(key: ApiKey) -> range:
    lo, hi = release_versions(key)
    return range(lo, hi + 1)


def on_the_wire(handler, key: ApiKey, version: int, body: dict) -> dict:
    """Encode the request at `version`, decode it as the broker does, run the handler, and
    decode its response at `version`."""
    header, decoded = decode_request(memoryview(encode_request(key, version, 3, "controller", body))[4:])
    response = asyncio.run(handler(RequestContext(header, plaintext_connection()), decoded))
    frame = b"".join(encode_response(key, version, 3, response))
    return decode_response(key, version, frame[4:])[1]


@pytest.fixture
def apis(broker: Broker) -> ControllerApis:
    me = broker.config.broker_id
    broker.store.create_topic(
        TopicDescription("t", str(TOPIC_ID), {0: (me,), 1: (me,)}), {p: PartitionState(me, 0, (me,), 1) for p in (0, 1)}
    )
    return ControllerApis(broker.store, broker.replica_manager, broker.metadata_cache, broker.metadata_thread, "PLAINTEXT")


@pytest.mark.parametrize("version", versions(ApiKey.LEADER_AND_ISR))
def test_leader_and_isr_at_every_version(broker: Broker, apis: ControllerApis, version: int) -> None:
    me = broker.config.broker_id
    states = [
        {
            "topic_name": "t",
            "partition_index": p,
            "controller_epoch": 5,
            "leader": me,
            "leader_epoch": version + 1,
            "isr": [me],
            "partition_epoch": 1,
            "replicas": [me],
        }
        for p in (0, 1)
    ]
    body = {
        "controller_id": 9,
        "controller_epoch": 5,
        "broker_epoch": -1,
        "type": 0,
        "ungrouped_partition_states": states,
        "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": states}],
        "live_leaders": [],
    }
    answer = on_the_wire(apis.leader_and_isr, ApiKey.LEADER_AND_ISR, version, body)
    assert answer["error_code"] == 0
    errors = answer["topics"][0]["partition_errors"] if version >= 5 else answer["partition_errors"]
    assert [(e["partition_index"], e["error_code"]) for e in errors] == [(0, 0), (1, 0)]
    for p in (0, 1):
        partition = broker.replica_manager.partitions[("t", p)]
        assert partition.is_leader and partition.leader_epoch == version + 1
        assert partition.topic_id == str(TOPIC_ID)


@pytest.mark.parametrize("version", versions(ApiKey.STOP_REPLICA))
def test_stop_replica_at_every_version(broker: Broker, apis: ControllerApis, version: int) -> None:
    me = broker.config.broker_id
    entries = [LeaderAndIsrPartition("t", str(TOPIC_ID), p, (me,), PartitionState(me, 0, (me,), 1), {}) for p in (0, 1)]
    broker.replica_manager.become_leader_or_follower(1, entries)
    body = {
        "controller_id": 9,
        "controller_epoch": 5,
        "broker_epoch": -1,
        "delete_partitions": True,
        "ungrouped_partitions": [{"topic_name": "t", "partition_index": 0}],
        "topics": [{"name": "t", "partition_indexes": [0]}],
        "topic_states": [{"topic_name": "t", "partition_states": [{"partition_index": 0, "delete_partition": True}]}],
    }
    answer = on_the_wire(apis.stop_replica, ApiKey.STOP_REPLICA, version, body)
    assert answer["error_code"] == 0
    assert [(e["topic_name"], e["partition_index"]) for e in answer["partition_errors"]] == [("t", 0)]
    assert ("t", 0) not in broker.replica_manager.partitions and ("t", 1) in broker.replica_manager.partitions
    assert broker.log_manager.get_log("t", 0) is None, "deleted"


@pytest.mark.parametrize("version", versions(ApiKey.UPDATE_METADATA))
def test_update_metadata_at_every_version_is_applied_and_fenced(
    broker: Broker, apis: ControllerApis, version: int
) -> None:
    me = broker.config.broker_id
    states = [
        {
            "topic_name": "t",
            "partition_index": p,
            "controller_epoch": 5,
            "leader": me,
            "leader_epoch": 3,
            "isr": [me],
            "zk_version": 1,
            "replicas": [me],
        }
        for p in (0, 1)
    ]
    body = {
        "controller_id": 9,
        "controller_epoch": 5,
        "broker_epoch": -1,
        "ungrouped_partition_states": states,
        "topic_states": [{"topic_name": "t", "topic_id": TOPIC_ID, "partition_states": states}],
        "live_brokers": [
            {
                "id": me,
                "v0_host": "127.0.0.1",
                "v0_port": 9092,
                "endpoints": [{"port": 9092, "host": "127.0.0.1", "listener": "PLAINTEXT", "security_protocol": 0}],
                "rack": None,
            }
        ],
    }
    assert on_the_wire(apis.update_metadata, ApiKey.UPDATE_METADATA, version, body)["error_code"] == 0
    image = broker.image
    assert image.controller_id == 9 and set(image.brokers) == {me}
    assert {p: s.leader_epoch for p, s in image.partition_states["t"].items()} == {0: 3, 1: 3}
    assert image.topics["t"].assignment == {0: (me,), 1: (me,)}
    stale = {**body, "controller_epoch": 4}
    assert on_the_wire(apis.update_metadata, ApiKey.UPDATE_METADATA, version, stale)["error_code"] != 0
