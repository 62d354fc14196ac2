"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords answer each requested partition on
its own: a partition that fails gets its error and the API's blank values, the others their
answers, in the request's order and under the request's topic key."""

from __future__ import annotations

import asyncio
import time

from protocol_helpers import plaintext_connection

from ingest_gateway.server.broker import Broker
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey, decode_response, encode_request
from loglake.record.batch import encode_batch


def call(broker: Broker, api_key: ApiKey, version: int, body: dict) -> dict:
    frame = encode_request(api_key, version, 1, "partition-answers", body)
    chunks = asyncio.run(broker.requests.handle(plaintext_connection(), memoryview(frame)[4:]))
    assert chunks is not None
    return decode_response(api_key, version, b"".join(chunks)[4:])[1]


def _topic_with_records(broker: Broker) -> None:
    created = call(
        broker,
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 30000,
            "validate_only": False,
        },
    )
    assert created["topics"][0]["error_code"] == ErrorCode.NONE
    batch = encode_batch([(None, v, (), None) for v in (b"a", b"b", b"c")], int(time.time() * 1000))
    produced = call(
        broker,
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE


def test_each_partition_is_answered_on_its_own(broker: Broker) -> None:
    _topic_with_records(broker)
    listed = call(
        broker,
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 7, "timestamp": -1, "current_leader_epoch": -1},
                        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1},
                        # A leader epoch newer than the leader's: this partition's error only.
                        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": 99},
                    ],
                }
            ],
        },
    )
    (topic,) = listed["topics"]
    assert topic["name"] == "t"
    assert [(p["partition_index"], p["error_code"], p["offset"], p["leader_epoch"]) for p in topic["partitions"]] == [
        (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        (0, ErrorCode.NONE, 3, 0),
        (0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
    ]

    epochs = call(
        broker,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        4,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                        {"partition": 7, "current_leader_epoch": -1, "leader_epoch": 0},
                    ],
                }
            ],
        },
    )
    (topic,) = epochs["topics"]
    assert topic["topic"] == "t"
    assert [(p["partition"], p["error_code"], p["leader_epoch"], p["end_offset"]) for p in topic["partitions"]] == [
        (0, ErrorCode.NONE, 0, 3),
        (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]

    deleted = call(
        broker,
        ApiKey.DELETE_RECORDS,
        2,
        {
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 2}, {"partition_index": 7, "offset": 1}]}],
            "timeout_ms": 1000,
        },
    )
    (topic,) = deleted["topics"]
    assert topic["name"] == "t"
    assert [(p["partition_index"], p["error_code"], p["low_watermark"]) for p in topic["partitions"]] == [
        (0, ErrorCode.NONE, 2),
        (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
    ]
