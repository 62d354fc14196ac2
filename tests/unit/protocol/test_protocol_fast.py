"""The hand-written produce-path codecs (loglake.protocol.fast) against the compiled ones:
the same dicts from the same bytes, the same bytes from the same dicts, and the same refusal
of bytes the compiled codec refuses."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loglake.protocol import ProtocolDecodeError, codec
from loglake.protocol.fast_fetch import (
    fetch_request_reader,
    fetch_request_writer,
    fetch_response_reader,
    fetch_response_writer,
)
from loglake.protocol.messages import MESSAGES
from loglake.protocol.schema import _compile_struct
from protocol_values import message_strategy

_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _compiled(name: str, version: int) -> Any:
    c = codec(name, version)
    return _compile_struct(MESSAGES[name]["fields"], version, c.flexible, name)


def _decode(read: Any, data: bytes) -> Any:
    """What a reader makes of `data`: the message and where it ends, or the kind of error
    it raises (the codec turns each into a ProtocolDecodeError)."""
    try:
        return read(memoryview(data), 0)
    except (ProtocolDecodeError, IndexError, ValueError, OverflowError, struct.error) as exc:
        return type(exc)


def _produce_request_versions() -> st.SearchStrategy[tuple[int, dict]]:
    return message_strategy("ProduceRequest").filter(lambda vb: vb[0] >= 3)


@_SETTINGS
@given(
    message=_produce_request_versions(), cut=st.integers(0, 8), flip=st.tuples(st.integers(0, 400), st.integers(1, 255))
)
def test_property_produce_request_decodes_as_compiled(
    message: tuple[int, dict], cut: int, flip: tuple[int, int]
) -> None:
    _check_decodes_as_compiled("ProduceRequest", message, cut, flip)


@_SETTINGS
@given(message=message_strategy("ProduceResponse"))
def test_property_produce_response_encodes_as_compiled(message: tuple[int, dict]) -> None:
    _check_encodes_as_compiled("ProduceResponse", message)


def _check_encodes_as_compiled(name: str, message: tuple[int, dict]) -> None:
    version, body = message
    fast = codec(name, version)._struct
    compiled = _compiled(name, version)
    assert fast.write is not compiled.write  # the fast path is in place
    assert _encode(fast.write, body) == _encode(compiled.write, body)


@pytest.mark.parametrize("version", range(12))
def test_a_broker_produce_answer_encodes_as_compiled(version: int) -> None:
    """What the broker answers a produce (one partition, no error; an error with a message;
    an empty node endpoint list), and partial dicts taking the spec's defaults."""
    bodies = [
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {
                            "index": 3,
                            "error_code": 0,
                            "base_offset": 77,
                            "log_append_time_ms": -1,
                            "log_start_offset": 0,
                        },
                        {"index": 4, "error_code": 6, "base_offset": -1, "error_message": "not the leader"},
                    ],
                }
            ],
            "throttle_time_ms": 5,
            "node_endpoints": [],
        },
        {"responses": [{"name": "é" * 200, "partition_responses": [{"index": i} for i in range(200)]}]},
        {},
    ]
    fast = codec("ProduceResponse", version)._struct
    compiled = _compiled("ProduceResponse", version)
    for body in bodies:
        encoded = _encode(fast.write, body)
        assert isinstance(encoded, bytes) and encoded == _encode(compiled.write, body)


def _encode(write: Any, body: dict) -> bytes | None:
    """The bytes a writer makes of `body`, or None if it refuses it (the codec turns the
    error, whichever it is, into a ProtocolEncodeError)."""
    out: list = []
    try:
        write(out, body)
    except (TypeError, AttributeError, ValueError, OverflowError, struct.error):
        return None
    return b"".join(out)


@pytest.mark.parametrize(
    "body",
    [
        {"responses": None},
        {"responses": [{"name": "t", "partition_responses": [{"index": "x"}]}]},
        {"responses": [{"name": "t", "partition_responses": [{"index": 1, "record_errors": None}]}]},
        {"responses": [{"name": None, "partition_responses": []}]},
        {"responses": [], "node_endpoints": None},
        {"responses": [], "throttle_time_ms": 1 << 40},
    ],
)
@pytest.mark.parametrize("version", range(12))
def test_bad_produce_answers_fail_as_compiled(body: dict, version: int) -> None:
    """Refused where the compiled writer refuses (fields a version lacks are ignored by both)."""
    fast = codec("ProduceResponse", version)._struct
    assert _encode(fast.write, body) == _encode(_compiled("ProduceResponse", version).write, body)


# --- Fetch (fast_fetch.py) -------------------------------------------------------------------


def _flexible(name: str) -> st.SearchStrategy[tuple[int, dict]]:
    return message_strategy(name).filter(lambda vb: vb[0] >= 12)


@_SETTINGS
@given(
    message=_flexible("FetchRequest"), cut=st.integers(0, 8), flip=st.tuples(st.integers(0, 400), st.integers(1, 255))
)
def test_property_fetch_request_decodes_as_compiled(message: tuple[int, dict], cut: int, flip: tuple[int, int]) -> None:
    _check_decodes_as_compiled("FetchRequest", message, cut, flip)


@_SETTINGS
@given(
    message=_flexible("FetchResponse"), cut=st.integers(0, 8), flip=st.tuples(st.integers(0, 400), st.integers(1, 255))
)
def test_property_fetch_response_decodes_as_compiled(
    message: tuple[int, dict], cut: int, flip: tuple[int, int]
) -> None:
    _check_decodes_as_compiled("FetchResponse", message, cut, flip)


def _check_decodes_as_compiled(name: str, message: tuple[int, dict], cut: int, flip: tuple[int, int]) -> None:
    """The same message (or the same kind of refusal) from the encoding, the encoding cut
    short, with a byte changed, and with bytes after it."""
    version, body = message
    c = codec(name, version)
    data = c.encode(body)
    compiled = _compiled(name, version)
    fast = c._struct
    assert fast.read is not compiled.read  # the fast path is in place
    position, xor = flip
    corrupted = bytearray(data)
    corrupted[position % len(corrupted)] ^= xor
    for variant in (data, data[: max(0, len(data) - cut)], bytes(corrupted), data + b"\x00\x01"):
        assert _decode(fast.read, variant) == _decode(compiled.read, variant)


@_SETTINGS
@given(message=_flexible("FetchResponse"))
def test_property_fetch_response_encodes_as_compiled(message: tuple[int, dict]) -> None:
    _check_encodes_as_compiled("FetchResponse", message)


@_SETTINGS
@given(message=_flexible("FetchRequest"))
def test_property_fetch_request_encodes_as_compiled(message: tuple[int, dict]) -> None:
    _check_encodes_as_compiled("FetchRequest", message)


_TOPIC_ID = uuid.UUID("6a1c2a7e-3b0f-4d55-9a40-0c1de3f1b2a9")


def _refuse(buf: Any, pos: int) -> Any:
    raise AssertionError("the fast path handed this to the compiled codec")


def _follower_request(version: int) -> dict:
    """What a follower (and a consumer, without the replica state) sends: one partition
    whose offset moved, nothing forgotten or one forgotten partition."""
    return {
        "replica_id": 2,
        "replica_state": {"replica_id": 2, "replica_epoch": -1},
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 10 << 20,
        "isolation_level": 1,
        "session_id": 77,
        "session_epoch": 12,
        "topics": [
            {
                "topic": "events",
                "topic_id": _TOPIC_ID,
                "partitions": [
                    {
                        "partition": 3,
                        "current_leader_epoch": 4,
                        "fetch_offset": 1 << 40,
                        "last_fetched_epoch": 4,
                        "log_start_offset": 0,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [{"topic": "old", "topic_id": _TOPIC_ID, "partitions": [0, 5]}],
        "rack_id": "rack-a",
    }


def _leader_response() -> dict:
    partition = {
        "partition_index": 3,
        "error_code": 0,
        "high_watermark": 1 << 40,
        "last_stable_offset": 1 << 40,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": bytes(range(200)),
    }
    aborted = partition | {"partition_index": 4, "aborted_transactions": [{"producer_id": 9, "first_offset": 10}]}
    empty = partition | {"partition_index": 5, "records": b"", "error_code": 1}
    topic = {"topic": "events", "topic_id": _TOPIC_ID, "partitions": [partition, aborted, empty]}
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 77, "responses": [topic], "node_endpoints": []}


@pytest.mark.parametrize("version", range(12, 18))
def test_a_replication_round_trip_takes_the_fast_paths(version: int) -> None:
    """The follower's request and the leader's usual answer are written and read without
    the compiled codec, to the same bytes and dicts."""
    request = _encode(fetch_request_writer(version, _refuse), _follower_request(version))
    assert request is not None and request == _encode(
        _compiled("FetchRequest", version).write, _follower_request(version)
    )
    fast_read = fetch_request_reader(version, _refuse)
    assert fast_read(memoryview(request), 0) == _compiled("FetchRequest", version).read(memoryview(request), 0)
    body = _leader_response()
    fast_write = fetch_response_writer(version, _refuse)
    encoded = _encode(fast_write, body)
    assert encoded is not None and encoded == _encode(_compiled("FetchResponse", version).write, body)
    fast_response = fetch_response_reader(version, _refuse)
    assert fast_response(memoryview(encoded), 0) == _compiled("FetchResponse", version).read(memoryview(encoded), 0)


@pytest.mark.parametrize("version", range(12, 18))
def test_a_response_with_a_current_leader_goes_to_the_compiled_codec(version: int) -> None:
    """KIP-951's current leader (a tagged field) and node endpoints: written by the compiled
    writer, read back by the compiled reader, the same bytes and dicts either way."""
    body = _leader_response()
    body["responses"][0]["partitions"][0]["current_leader"] = {"leader_id": 1, "leader_epoch": 5}
    if version >= 16:
        body["node_endpoints"] = [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]
    c = codec("FetchResponse", version)
    compiled = _compiled("FetchResponse", version)
    encoded = _encode(c._struct.write, body)
    assert encoded is not None and encoded == _encode(compiled.write, body)
    decoded, _ = c._struct.read(memoryview(encoded), 0)
    assert decoded == compiled.read(memoryview(encoded), 0)[0]
    assert decoded["responses"][0]["partitions"][0]["current_leader"] == {"leader_id": 1, "leader_epoch": 5}
