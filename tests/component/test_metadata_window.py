"""A topic that is in the metadata store but not yet in this broker's metadata image (it was
created an instant ago, here or through another broker): every request naming it gets an
error code the client retries on, never a dropped connection."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ingest_gateway.server.broker import Broker
from loglake.coordination.model import PartitionState, TopicDescription
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey, decode_response, encode_request
from protocol_helpers import plaintext_connection


def call(broker: Broker, api_key: ApiKey, version: int, body: dict) -> dict:
    frame = encode_request(api_key, version, 1, "window-test", body)
    chunks = asyncio.run(broker.requests.handle(plaintext_connection(), memoryview(frame)[4:]))
    assert chunks is not None
    return decode_response(api_key, version, b"".join(chunks)[4:])[1]


@pytest.fixture
def unseen_topic(broker: Broker) -> str:
    """Written to the store directly, as another broker's controller would; no image refresh."""
    name = "created-elsewhere"
    topic = TopicDescription(name, str(uuid.uuid4()), {0: (broker.config.broker_id,)})
    broker.store.create_topic(topic, {0: PartitionState(broker.config.broker_id, 0, (broker.config.broker_id,), 1)})
    assert name not in broker.image.topics
    return name


@pytest.mark.parametrize("version", [1, 4, 9, 12])
@pytest.mark.parametrize("auto_create", [True, False])
def test_metadata_answers_leader_not_available(broker: Broker, unseen_topic: str, version: int, auto_create) -> None:
    body = {
        "topics": [{"name": unseen_topic, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": auto_create,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    topics = call(broker, ApiKey.METADATA, version, body)["topics"]
    expected = ErrorCode.LEADER_NOT_AVAILABLE if auto_create or version < 4 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert [(t["name"], t["error_code"]) for t in topics] == [(unseen_topic, expected)]


def test_produce_and_list_offsets_answer_retriable_errors(broker: Broker, unseen_topic: str) -> None:
    produced = call(
        broker,
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [{"name": unseen_topic, "partition_data": [{"index": 0, "records": None}]}],
        },
    )
    assert produced["responses"][0]["partition_responses"][0]["error_code"] != ErrorCode.NONE
    listed = call(
        broker,
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": unseen_topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    assert listed["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_answers_the_topic_once_the_image_has_it(broker: Broker, unseen_topic: str) -> None:
    broker.metadata_cache.load()
    topics = call(broker, ApiKey.METADATA, 12, {"topics": [{"name": unseen_topic, "topic_id": uuid.UUID(int=0)}]})
    assert topics["topics"][0]["error_code"] == ErrorCode.NONE


def test_a_topic_without_an_id_is_described_with_the_zero_id(broker: Broker) -> None:
    """Created by tools older than topic ids (KIP-516): its znode has no topic_id."""
    me = broker.config.broker_id
    broker.store.create_topic(TopicDescription("old-style", "", {0: (me,)}), {0: PartitionState(me, 0, (me,), 1)})
    broker.metadata_cache.load()
    answer = call(broker, ApiKey.METADATA, 12, {"topics": [{"name": "old-style", "topic_id": uuid.UUID(int=0)}]})
    assert [(t["name"], t["error_code"], t["topic_id"]) for t in answer["topics"]] == [
        ("old-style", ErrorCode.NONE, uuid.UUID(int=0))
    ]


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_an_internal_topic_is_never_auto_created_with_the_defaults(broker: Broker, name: str) -> None:
    """Its coordinator creates it (FindCoordinator), with its own settings and factor."""
    body = {
        "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    (topic,) = call(broker, ApiKey.METADATA, 12, body)["topics"]
    assert topic["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert name not in broker.store.topics()
