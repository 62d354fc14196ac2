"""Message bodies: round trips for every message and version, defaults, tagged fields, records."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_values import all_pairs, assert_holds, message_strategy, representative_bodies

from loglake.protocol import ProtocolDecodeError, ProtocolEncodeError, UnsupportedVersionError, codec
from loglake.protocol.messages import MESSAGES
from loglake.protocol.schema import request_codec, response_codec


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_every_version_round_trips(name: str) -> None:
    for message, version in all_pairs():
        if message != name:
            continue
        c = codec(name, version)
        for body in representative_bodies(name, version):
            data = c.encode(body)
            decoded = c.decode(data)
            assert_holds(decoded, body, f"{name} v{version}")
            # The decoded form (with every default filled in) encodes to the same bytes.
            assert c.encode(decoded) == data
        assert c.decode(c.encode({})) == c.default()


@pytest.mark.parametrize("name", sorted(MESSAGES))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_property(name: str, data: st.DataObject) -> None:
    version, body = data.draw(message_strategy(name))
    c = codec(name, version)
    encoded = c.encode(body)
    decoded = c.decode(encoded)
    assert_holds(decoded, body)
    assert c.encode(decoded) == encoded


def test_missing_fields_take_spec_defaults() -> None:
    fetch = codec("FetchRequest", 12).decode(codec("FetchRequest", 12).encode({}))
    assert fetch["replica_id"] == -1
    assert fetch["max_bytes"] == 0x7FFFFFFF
    assert fetch["session_epoch"] == -1
    assert fetch["cluster_id"] is None  # tagged, left out, default null
    assert fetch["topics"] == [] and fetch["forgotten_topics_data"] == []
    assert fetch["replica_state"] == {"replica_id": -1, "replica_epoch": -1}  # a field of v15+: default
    assert fetch["rack_id"] == ""


def test_fields_outside_the_version_are_ignored_on_encode_and_default_on_decode() -> None:
    c = codec("MetadataRequest", 3)
    body = {"topics": [{"name": "a", "topic_id": uuid.uuid4()}], "include_cluster_authorized_operations": True}
    assert c.encode(body) == codec("MetadataRequest", 3).encode({"topics": [{"name": "a"}]})
    decoded = c.decode(c.encode(body))
    assert decoded["topics"][0]["topic_id"] == uuid.UUID(int=0)
    assert decoded["include_cluster_authorized_operations"] is False


def test_flexible_encoding_is_compact_with_tag_sections() -> None:
    # ApiVersionsRequest v3: compact strings (length + 1 as a varint) and an empty tag section.
    data = codec("ApiVersionsRequest", 3).encode({"client_software_name": "ab", "client_software_version": "1"})
    assert data == b"\x03ab\x021\x00"
    assert codec("ApiVersionsRequest", 2).encode({"client_software_name": "ab"}) == b""


def test_tagged_fields_are_written_only_when_not_default() -> None:
    c = codec("ApiVersionsResponse", 3)
    plain = c.encode({"error_code": 0, "api_keys": []})
    assert plain == b"\x00\x00\x01\x00\x00\x00\x00\x00"
    tagged = c.encode({"finalized_features_epoch": 5, "zk_migration_ready": True, "finalized_features": []})
    # two tags, in ascending order: 1 (int64, 8 bytes) and 3 (bool, 1 byte)
    assert tagged.endswith(b"\x02\x01\x08" + (5).to_bytes(8, "big") + b"\x03\x01\x01")
    decoded = c.decode(tagged)
    assert decoded["finalized_features_epoch"] == 5 and decoded["zk_migration_ready"] is True


def test_nested_tagged_struct_round_trips_and_default_struct_is_omitted() -> None:
    c = codec("FetchResponse", 12)
    partition = {"partition_index": 1, "records": b"x", "current_leader": {"leader_id": 3}}
    data = c.encode({"responses": [{"topic": "t", "partitions": [partition]}]})
    decoded = c.decode(data)["responses"][0]["partitions"][0]
    assert decoded["current_leader"] == {"leader_id": 3, "leader_epoch": -1}
    assert decoded["diverging_epoch"] == {"epoch": -1, "end_offset": -1}
    # A struct equal to its default is not sent: same bytes as leaving it out.
    partition_default = dict(partition, current_leader={"leader_id": -1, "leader_epoch": -1})
    del partition["current_leader"]
    assert c.encode({"responses": [{"topic": "t", "partitions": [partition_default]}]}) == c.encode(
        {"responses": [{"topic": "t", "partitions": [partition]}]}
    )


def test_unknown_tagged_fields_are_skipped() -> None:
    c = codec("ApiVersionsRequest", 3)
    # tag 9 (unknown, 3 bytes), then the section ends; both strings empty.
    data = b"\x01\x01" + b"\x01\x09\x03abc"
    assert c.decode(data) == {"client_software_name": "", "client_software_version": ""}


def test_unknown_tag_in_nested_struct_is_skipped() -> None:
    c = codec("MetadataRequest", 9)
    topic = b"\x02t" + b"\x01\x07\x02zz"  # name "t", then one unknown tag 7 of 2 bytes
    data = b"\x02" + topic + b"\x01\x00\x00" + b"\x00"
    body = c.decode(data)
    assert body["topics"] == [{"topic_id": uuid.UUID(int=0), "name": "t"}]
    assert body["allow_auto_topic_creation"] is True


def test_produce_records_are_a_view_of_the_frame() -> None:
    c = codec("ProduceRequest", 9)
    batch = bytes(range(256)) * 4
    data = c.encode(
        {
            "acks": -1,
            "timeout_ms": 100,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
        }
    )
    records = c.decode(data)["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and records.obj is data  # no copy
    assert records == batch


def test_null_records_and_nullable_arrays() -> None:
    c = codec("FetchResponse", 4)
    data = c.encode({"responses": [{"topic": "t", "partitions": [{"records": None, "aborted_transactions": None}]}]})
    p = c.decode(data)["responses"][0]["partitions"][0]
    assert p["records"] is None and p["aborted_transactions"] is None
    assert codec("MetadataRequest", 1).decode(codec("MetadataRequest", 1).encode({"topics": None}))["topics"] is None


def test_non_nullable_null_is_an_encode_error() -> None:
    with pytest.raises(ProtocolEncodeError, match="MetadataRequest v0"):
        codec("MetadataRequest", 0).encode({"topics": None})
    with pytest.raises(ProtocolEncodeError):
        codec("ProduceResponse", 3).encode({"responses": [{"name": None}]})
    with pytest.raises(ProtocolEncodeError):
        codec("HeartbeatResponse", 0).encode({"error_code": 1 << 20})


def test_records_not_in_memory_need_encode_into() -> None:
    class Ref:
        size = 10

    c = codec("FetchResponse", 12)
    body = {"responses": [{"topic": "t", "partitions": [{"records": Ref()}]}]}
    with pytest.raises(ProtocolEncodeError, match="encode_into"):
        c.encode(body)
    out: list = []
    c.encode_into(out, body)
    assert sum(1 for p in out if isinstance(p, Ref)) == 1


def test_versions_and_keys_outside_the_specs() -> None:
    with pytest.raises(UnsupportedVersionError) as e:
        codec("FetchRequest", 18)
    assert e.value.api_key == 1 and e.value.api_version == 18
    with pytest.raises(UnsupportedVersionError):
        request_codec(9999, 0)
    assert isinstance(UnsupportedVersionError("x", 0, 0), ProtocolDecodeError)
    assert response_codec(3, 12) is codec("MetadataResponse", 12)  # compiled once


def test_codec_plans_are_cached() -> None:
    assert codec("ProduceRequest", 9) is codec("ProduceRequest", 9)


def test_nullable_struct_is_a_marker_byte_then_the_struct() -> None:
    c = response_codec(68, 1)  # ConsumerGroupHeartbeatResponse.Assignment
    head = {"throttle_time_ms": 0, "error_code": 0, "member_id": "m", "member_epoch": 3, "heartbeat_interval_ms": 5}
    null = c.encode({**head, "assignment": None})
    assert null.endswith(b"\xff\x00")  # -1, then the empty tag section
    assert c.decode(null)["assignment"] is None
    topic = uuid.uuid4()
    assignment = {"topic_partitions": [{"topic_id": topic, "partitions": [0, 2]}]}
    present = c.encode({**head, "assignment": assignment})
    assert present[len(null) - 2] == 1
    decoded = c.decode(present)["assignment"]["topic_partitions"]
    assert [(t["topic_id"], list(t["partitions"])) for t in decoded] == [(topic, [0, 2])]
