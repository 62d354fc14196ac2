"""The hand-written produce-path codecs (loglake.protocol.fast) against the compiled ones:
the same dicts from the same bytes, the same bytes from the same dicts, and the same refusal
of bytes the compiled codec refuses."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loglake.protocol import ProtocolDecodeError, codec
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
    version, body = message
    c = codec("ProduceRequest", version)
    data = c.encode(body)
    compiled = _compiled("ProduceRequest", version)
    fast = c._struct
    assert fast.read is not compiled.read  # the fast path is in place
    position, xor = flip
    corrupted = bytearray(data)
    if corrupted:
        corrupted[position % len(corrupted)] ^= xor
    for variant in (data, data[: max(0, len(data) - cut)], bytes(corrupted), data + b"\x00\x01"):
        assert _decode(fast.read, variant) == _decode(compiled.read, variant)


@_SETTINGS
@given(message=message_strategy("ProduceResponse"))
def test_property_produce_response_encodes_as_compiled(message: tuple[int, dict]) -> None:
    version, body = message
    fast = codec("ProduceResponse", version)._struct
    compiled = _compiled("ProduceResponse", version)
    assert fast.write is not compiled.write
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
