"""Frames and headers: Kafka's header-version rules, file-backed records, malformed input."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
from protocol_values import representative_bodies, versions

from loglake.protocol import (
    MAX_FRAME_SIZE,
    SPEC_VERSIONS,
    ApiKey,
    ProtocolDecodeError,
    UnsupportedVersionError,
    chunks_size,
    codec,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    read_frame_size,
    request_header_version,
    response_header_version,
)
from loglake.protocol.messages import MESSAGES


@pytest.mark.parametrize(
    "api_key,version,request_v,response_v",
    [
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),  # flexible, yet the response header stays v0
        (ApiKey.API_VERSIONS, 99, 2, 0),  # newer than the specs: still parsed as flexible
        (ApiKey.METADATA, 8, 1, 0),
        (ApiKey.METADATA, 9, 2, 1),
        (ApiKey.PRODUCE, 9, 2, 1),
        (ApiKey.FETCH, 11, 1, 0),
        (ApiKey.FETCH, 12, 2, 1),
        (ApiKey.CREATE_TOPICS, 5, 2, 1),
        (ApiKey.CONTROLLED_SHUTDOWN, 0, 0, 0),  # the one user of request header v0
        (ApiKey.CONTROLLED_SHUTDOWN, 1, 1, 0),
        (ApiKey.SASL_HANDSHAKE, 1, 1, 0),  # never flexible
        (9999, 0, 1, 0),  # unknown: header v1, so the correlation id can still be read
    ],
)
def test_header_versions(api_key: int, version: int, request_v: int, response_v: int) -> None:
    assert request_header_version(api_key, version) == request_v
    assert response_header_version(api_key, version) == response_v


def test_spec_versions_cover_the_broker_apis() -> None:
    assert SPEC_VERSIONS[ApiKey.PRODUCE] == (0, 11)
    assert SPEC_VERSIONS[ApiKey.FETCH] == (0, 17)
    assert SPEC_VERSIONS[ApiKey.API_VERSIONS] == (0, 4)
    for key in (ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.OFFSET_FOR_LEADER_EPOCH):
        assert key in SPEC_VERSIONS
    assert is_flexible(ApiKey.METADATA, 9) and not is_flexible(ApiKey.METADATA, 8)


@pytest.mark.parametrize("header_version", [0, 1, 2])
def test_generated_header_specs_agree_with_framing(header_version: int) -> None:
    api_key, version = {0: (ApiKey.CONTROLLED_SHUTDOWN, 0), 1: (ApiKey.METADATA, 1), 2: (ApiKey.METADATA, 9)}[
        header_version
    ]
    header = {"request_api_key": api_key, "request_api_version": version, "correlation_id": 7, "client_id": "c"}
    frame = encode_request(api_key, version, 7, "c", {})
    assert frame[4:].startswith(codec("RequestHeader", header_version).encode(header))
    parsed, pos = decode_request_header(frame[4:])
    assert (parsed.request_api_key, parsed.request_api_version, parsed.correlation_id) == (api_key, version, 7)
    assert parsed.client_id == (None if header_version == 0 else "c")
    assert frame[4 + pos :] == codec(MESSAGES_BY_KEY[api_key] + "Request", version).encode({})


MESSAGES_BY_KEY = {
    spec["apiKey"]: name.removesuffix("Request") for name, spec in MESSAGES.items() if spec["type"] == "request"
}


def test_response_headers() -> None:
    # ApiVersions v3: header v0 (just the correlation id) before a flexible body.
    frame = encode_response(ApiKey.API_VERSIONS, 3, 9, {"api_keys": [{"api_key": 0, "max_version": 9}]})[0]
    assert frame[4:8] == b"\x00\x00\x00\x09"
    assert frame[8:] == codec("ApiVersionsResponse", 3).encode({"api_keys": [{"api_key": 0, "max_version": 9}]})
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    # Metadata v9: header v1 adds an empty tag section.
    frame = encode_response(ApiKey.METADATA, 9, 9, {})[0]
    assert frame[4:9] == b"\x00\x00\x00\x09\x00"
    assert frame[4:9] == codec("ResponseHeader", 1).encode({"correlation_id": 9}) + b""
    assert decode_response(ApiKey.METADATA, 9, frame[4:]) == (9, codec("MetadataResponse", 9).decode(frame[9:]))


def test_null_client_id_and_header_tags() -> None:
    frame = bytearray(encode_request(ApiKey.METADATA, 9, 1, None, {}))
    header, pos = decode_request_header(bytes(frame[4:]))
    assert header.client_id is None
    # An unknown tag in the v2 header is skipped.
    tagged = frame[4:12] + b"\xff\xff" + b"\x01\x05\x01z" + frame[4 + pos :]
    header, body = decode_request(bytes(tagged))
    assert header.correlation_id == 1 and body == codec("MetadataRequest", 9).default()


def test_unsupported_versions_keep_the_header() -> None:
    # A client probing with an ApiVersions newer than ours: header v2, body unreadable.
    payload = struct.pack(">hhi", ApiKey.API_VERSIONS, 99, 77) + b"\x00\x03cli\x00" + b"\x05new!"
    with pytest.raises(UnsupportedVersionError) as e:
        decode_request(payload)
    assert e.value.header is not None and e.value.header.correlation_id == 77
    assert e.value.header.client_id == "cli" and e.value.api_version == 99
    with pytest.raises(UnsupportedVersionError) as e:
        decode_request(struct.pack(">hhi", 9999, 0, 5) + b"\xff\xff")
    assert e.value.header is not None and e.value.header.correlation_id == 5 and e.value.api_key == 9999


def test_frame_size() -> None:
    assert read_frame_size(b"\x00\x00\x01\x00") == 256
    for bad in (b"\xff\xff\xff\xff", struct.pack(">i", MAX_FRAME_SIZE + 1), b"\x00\x01"):
        with pytest.raises(ProtocolDecodeError):
            read_frame_size(bad)
    with pytest.raises(ProtocolDecodeError):
        read_frame_size(b"\x00\x00\x00\x10", max_size=8)


@dataclass(frozen=True)
class FileSlice:
    """What the storage layer hands over for a fetch: a range of a segment file."""

    fd: int
    position: int
    size: int


def _fetch_body(slices: list) -> dict:
    return {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": i, "high_watermark": 10, "records": s} for i, s in enumerate(slices)
                ],
            }
        ]
    }


@pytest.mark.parametrize("version", [4, 12, 16])
def test_fetch_response_sends_records_from_files(tmp_path: Path, version: int) -> None:
    segment = tmp_path / "00000000000000000000.log"
    content = bytes(range(256)) * 40
    segment.write_bytes(content)
    with open(segment, "rb") as f:
        slices = [
            FileSlice(f.fileno(), 100, 3000),
            b"in-memory",
            FileSlice(f.fileno(), 5000, 17),
            None,
            FileSlice(f.fileno(), 0, 0),
        ]
        chunks = encode_response(ApiKey.FETCH, version, 3, _fetch_body(slices))
        assert [type(c) for c in chunks] == [bytes, FileSlice, bytes, FileSlice, bytes]
        assert struct.unpack(">i", chunks[0][:4])[0] == chunks_size(chunks) - 4  # type: ignore[index]

        a, b = socket.socketpair()
        with a, b:
            for chunk in chunks:  # what the broker's writer does
                if isinstance(chunk, FileSlice):
                    sent = 0
                    while sent < chunk.size:
                        sent += os.sendfile(a.fileno(), chunk.fd, chunk.position + sent, chunk.size - sent)
                else:
                    a.sendall(chunk)
            a.shutdown(socket.SHUT_WR)
            received = b"".join(iter(lambda: b.recv(65536), b""))
    assert len(received) == chunks_size(chunks)
    expected = [content[100:3100], b"in-memory", content[5000:5017], None, b""]
    correlation_id, body = decode_response(ApiKey.FETCH, version, received[4:])
    assert correlation_id == 3
    assert [None if p["records"] is None else bytes(p["records"]) for p in body["responses"][0]["partitions"]] == (
        expected
    )
    # and kafka-python reads the same frame
    theirs = KpFetchResponse.decode(received, version=version, header=True, framed=True)
    assert [p.records for p in theirs.responses[0].partitions] == expected


def _truncation_cases() -> list[tuple[str, int]]:
    return [(name, v) for name in MESSAGES for v in (versions(name)[0], versions(name)[-1])]


def test_every_truncation_is_a_decode_error() -> None:
    for name, version in _truncation_cases():
        c = codec(name, version)
        data = c.encode(representative_bodies(name, version)[0])
        for end in range(len(data)):
            with pytest.raises(ProtocolDecodeError):
                c.decode(data[:end])


def test_truncated_frames_are_decode_errors() -> None:
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", representative_bodies("ProduceRequest", 9)[0])
    payload = frame[4:]
    for end in range(len(payload)):
        with pytest.raises(ProtocolDecodeError):
            decode_request(payload[:end])
    response = encode_response(ApiKey.METADATA, 12, 1, representative_bodies("MetadataResponse", 12)[0])[0]
    for end in range(4, len(response)):
        with pytest.raises(ProtocolDecodeError):
            decode_response(ApiKey.METADATA, 12, response[4:end])


def test_malformed_values_are_decode_errors() -> None:
    c = codec("ApiVersionsRequest", 3)
    with pytest.raises(ProtocolDecodeError, match="ApiVersionsRequest v3"):
        c.decode(b"\x03\xff\xfe\x01\x00")  # not UTF-8
    with pytest.raises(ProtocolDecodeError):
        c.decode(b"\x01\x01\x02\x00\x05ab")  # a tag section promising more than there is
    with pytest.raises(ProtocolDecodeError):
        # Metadata v1 with a topic count of 2^31-1 in a 10-byte frame: refused before allocating.
        codec("MetadataRequest", 1).decode(b"\x7f\xff\xff\xff" + b"\x00" * 6)
    with pytest.raises(ProtocolDecodeError, match="tagged field 1"):
        # FinalizedFeaturesEpoch (tag 1, int64) sent in 9 bytes
        codec("ApiVersionsResponse", 3).decode(b"\x00\x00\x01\x00\x00\x00\x00" + b"\x01\x01\x09" + b"\x00" * 9)


GARBAGE_TARGETS = ["ProduceRequest", "FetchRequest", "MetadataResponse", "CreateTopicsRequest", "JoinGroupRequest"]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(GARBAGE_TARGETS), st.data(), st.binary(max_size=120))
def test_garbage_decodes_or_raises_decode_error(name: str, data: st.DataObject, garbage: bytes) -> None:
    version = data.draw(st.sampled_from(versions(name)))
    try:
        codec(name, version).decode(garbage)
    except ProtocolDecodeError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=80))
def test_garbage_frames_decode_or_raise_decode_error(garbage: bytes) -> None:
    for payload in (
        garbage,
        struct.pack(">hh", ApiKey.FETCH, 12) + garbage,
        struct.pack(">hh", ApiKey.API_VERSIONS, 3) + garbage,
    ):
        try:
            decode_request(payload)
        except ProtocolDecodeError:
            pass


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_corrupted_bytes_decode_or_raise_decode_error(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(GARBAGE_TARGETS))
    version = data.draw(st.sampled_from(versions(name)))
    encoded = bytearray(codec(name, version).encode(representative_bodies(name, version)[0]))
    for _ in range(data.draw(st.integers(1, 4))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    try:
        codec(name, version).decode(bytes(encoded))
    except ProtocolDecodeError:
        pass
