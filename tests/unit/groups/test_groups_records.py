"""__consumer_offsets key/value formats: exact bytes, round trips, older versions."""

from __future__ import annotations

import struct

import pytest

from loglake.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_offset_commit_key_bytes() -> None:
    key = OffsetCommitKey("g", "topic", 7)
    data = encode_key(key)
    assert data == struct.pack(">h", 1) + _s("g") + _s("topic") + struct.pack(">i", 7)
    assert decode_key(data) == key
    # Version 0 keys (Kafka < 0.10) have the same fields.
    assert decode_key(struct.pack(">h", 0) + data[2:]) == key


def test_group_metadata_key_bytes() -> None:
    data = encode_key(GroupMetadataKey("my-group"))
    assert data == struct.pack(">h", 2) + _s("my-group")
    assert decode_key(data) == GroupMetadataKey("my-group")


def test_unknown_key_version_is_skipped() -> None:
    assert decode_key(struct.pack(">h", 3) + _s("g")) is None


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(offset=42, leader_epoch=5, metadata="meta", commit_timestamp=1_000)
    data = encode_offset_commit_value(value)
    assert data == struct.pack(">hqi", 3, 42, 5) + _s("meta") + struct.pack(">q", 1_000)
    assert decode_offset_commit_value(data) == value


def test_offset_commit_value_older_versions() -> None:
    v0 = struct.pack(">hq", 0, 9) + _s("") + struct.pack(">q", 123)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, -1, "", 123)
    v1 = struct.pack(">hq", 1, 9) + _s("m") + struct.pack(">qq", 123, 456)
    assert decode_offset_commit_value(v1) == OffsetCommitValue(9, -1, "m", 123, expire_timestamp=456)
    with pytest.raises(ValueError):
        decode_offset_commit_value(struct.pack(">h", 4) + v0[2:])


def _member(member_id: str, instance: str | None = None) -> MemberMetadataValue:
    return MemberMetadataValue(member_id, instance, "client", "/10.0.0.1", 30_000, 10_000, b"\x00sub", b"\x00asg")


def test_group_metadata_value_v3_bytes() -> None:
    value = GroupMetadataValue("consumer", 3, "range", "m1", 1_234, (_member("m1"), _member("m2", "static-2")))
    data = encode_group_metadata_value(value)
    member1 = (
        _s("m1")
        + struct.pack(">h", -1)
        + _s("client")
        + _s("/10.0.0.1")
        + struct.pack(">ii", 30_000, 10_000)
        + struct.pack(">i", 4)
        + b"\x00sub"
        + struct.pack(">i", 4)
        + b"\x00asg"
    )
    head = struct.pack(">h", 3) + _s("consumer") + struct.pack(">i", 3) + _s("range") + _s("m1")
    assert data.startswith(head + struct.pack(">qi", 1_234, 2) + member1)
    assert decode_group_metadata_value(data) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 4, None, None, 99, ())
    data = encode_group_metadata_value(value)
    assert data == struct.pack(">h", 3) + _s("consumer") + struct.pack(">ihhqi", 4, -1, -1, 99, 0)
    assert decode_group_metadata_value(data) == value


def test_group_metadata_value_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    data = (
        struct.pack(">h", 0)
        + _s("consumer")
        + struct.pack(">i", 1)
        + _s("range")
        + _s("m1")
        + struct.pack(">i", 1)
        + _s("m1")
        + _s("client")
        + _s("host")
        + struct.pack(">i", 10_000)
        + struct.pack(">i", 1)
        + b"s"
        + struct.pack(">i", 1)
        + b"a"
    )
    value = decode_group_metadata_value(data)
    assert value.current_state_timestamp == -1
    assert value.members == (MemberMetadataValue("m1", None, "client", "host", 10_000, 10_000, b"s", b"a"),)


def test_truncated_value_raises() -> None:
    data = encode_offset_commit_value(OffsetCommitValue(1, -1, "x", 2))
    with pytest.raises(ValueError):
        decode_offset_commit_value(data[:-1])
