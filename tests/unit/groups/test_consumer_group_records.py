"""Consumer group records: Kafka's key versions and flexible value bytes, the records each
change writes (tombstones on leave and delete), and replay after a failover."""

from __future__ import annotations

import struct
import uuid

import pytest
from consumer_group_support import GROUP, Client, Cluster, converge, group_view, replayed

from loglake.errors import ErrorCode
from loglake.groups.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    PARTITION_METADATA_KEY,
    TARGET_ASSIGNMENT_MEMBER_KEY,
    TARGET_ASSIGNMENT_METADATA_KEY,
    ClassicMemberMetadata,
    ConsumerGroupKey,
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from loglake.groups.records import GroupMetadataKey
from loglake.groups.records import encode_key as encode_classic_key

TID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _c(text: str | None) -> bytes:
    """A compact string: unsigned varint length + 1 (0: null)."""
    if text is None:
        return b"\x00"
    return bytes([len(text) + 1]) + text.encode()


def test_keys() -> None:
    assert encode_key(ConsumerGroupKey(GROUP_METADATA_KEY, "g")) == struct.pack(">h", 3) + _s("g")
    assert encode_key(ConsumerGroupKey(CURRENT_MEMBER_ASSIGNMENT_KEY, "g", "m1")) == struct.pack(">h", 8) + _s(
        "g"
    ) + _s("m1")
    for kind in (3, 4, 6):
        assert decode_key(encode_key(ConsumerGroupKey(kind, "g"))) == ConsumerGroupKey(kind, "g")
    for kind in (5, 7, 8):
        assert decode_key(encode_key(ConsumerGroupKey(kind, "g", "m"))) == ConsumerGroupKey(kind, "g", "m")
    # Classic and offset keys are not ours; the classic decoder likewise skips ours.
    assert decode_key(encode_classic_key(GroupMetadataKey("g"))) is None


def test_value_bytes() -> None:
    assert encode_value(GroupMetadataValue(7)) == struct.pack(">hi", 0, 7) + b"\x00"
    assert encode_value(TargetAssignmentMetadataValue(9)) == struct.pack(">hi", 0, 9) + b"\x00"
    member = MemberMetadataValue("i", None, "cid", "/h", ("a", "b"), "r.*", 30_000, "uniform")
    assert encode_value(member) == (
        struct.pack(">h", 0)
        + _c("i")
        + _c(None)
        + _c("cid")
        + _c("/h")
        + b"\x03"
        + _c("a")
        + _c("b")
        + _c("r.*")
        + struct.pack(">i", 30_000)
        + _c("uniform")
        + b"\x00"
    )
    partitions = PartitionMetadataValue((TopicMetadata(TID, "t", 2),))
    assert (
        encode_value(partitions)
        == struct.pack(">h", 0) + b"\x02" + TID.bytes + _c("t") + struct.pack(">i", 2) + b"\x01\x00" + b"\x00"
    )
    target = TargetAssignmentMemberValue({TID: frozenset({2, 0})})
    assert (
        encode_value(target)
        == struct.pack(">h", 0) + b"\x02" + TID.bytes + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00" + b"\x00"
    )
    current = CurrentMemberAssignmentValue(5, 4, 1, {TID: frozenset({1})}, {})
    assert (
        encode_value(current)
        == struct.pack(">hiib", 0, 5, 4, 1)
        + b"\x02"
        + TID.bytes
        + b"\x02"
        + struct.pack(">i", 1)
        + b"\x00"
        + b"\x01"
        + b"\x00"
    )
    for kind, value in [
        (GROUP_METADATA_KEY, GroupMetadataValue(7)),
        (MEMBER_METADATA_KEY, member),
        (PARTITION_METADATA_KEY, partitions),
        (TARGET_ASSIGNMENT_MEMBER_KEY, target),
        (TARGET_ASSIGNMENT_METADATA_KEY, TargetAssignmentMetadataValue(9)),
        (CURRENT_MEMBER_ASSIGNMENT_KEY, current),
    ]:
        assert decode_value(kind, encode_value(value)) == value


def test_classic_member_metadata_is_the_tagged_field_kafka_writes() -> None:
    classic = ClassicMemberMetadata(45_000, (("range", b"\x00\x01"),))
    value = MemberMetadataValue(None, None, "c", "h", ("t",), None, 30_000, None, classic)
    # Tag 0, a nullable struct: presence byte, session timeout, [name, metadata], empty tags.
    payload = b"\x01" + struct.pack(">i", 45_000) + b"\x02" + _c("range") + b"\x03\x00\x01" + b"\x00" + b"\x00"
    assert encode_value(value) == (
        struct.pack(">h", 0)
        + b"\x00\x00"
        + _c("c")
        + _c("h")
        + b"\x02"
        + _c("t")
        + b"\x00"
        + struct.pack(">i", 30_000)
        + b"\x00"
        + b"\x01\x00"
        + bytes([len(payload)])
        + payload
    )
    assert decode_value(MEMBER_METADATA_KEY, encode_value(value)) == value


def test_decoding_skips_tagged_fields_and_racks_of_newer_writers() -> None:
    # A member record with a tagged field this version does not know (tag 5).
    plain = encode_value(MemberMetadataValue(None, None, "c", "h", ("t",), None, -1, None))
    tagged = plain[:-1] + b"\x01\x05\x03xyz"
    assert decode_value(MEMBER_METADATA_KEY, tagged) == decode_value(MEMBER_METADATA_KEY, plain)
    # Partition metadata with racks.
    with_racks = (
        struct.pack(">h", 0)
        + b"\x02"
        + TID.bytes
        + _c("t")
        + struct.pack(">i", 1)
        + b"\x02"
        + struct.pack(">i", 0)
        + b"\x02"
        + _c("r1")
        + b"\x00"
        + b"\x00"
        + b"\x00"
    )
    assert decode_value(PARTITION_METADATA_KEY, with_racks) == PartitionMetadataValue((TopicMetadata(TID, "t", 1),))
    with pytest.raises(ValueError):
        decode_value(GROUP_METADATA_KEY, struct.pack(">hi", 1, 7) + b"\x00")


def _kinds(records) -> list[tuple[int, bool]]:
    out = []
    for key, value in records:
        k = decode_key(key)
        assert k is not None
        out.append((k.kind, value is None))
    return out


def test_records_of_a_join_and_a_leave() -> None:
    cluster = Cluster(t=2)
    a = Client(cluster)
    joined = a.join()
    assert _kinds(joined.records) == [
        (MEMBER_METADATA_KEY, False),
        (PARTITION_METADATA_KEY, False),
        (GROUP_METADATA_KEY, False),
        (TARGET_ASSIGNMENT_MEMBER_KEY, False),
        (TARGET_ASSIGNMENT_METADATA_KEY, False),
        (CURRENT_MEMBER_ASSIGNMENT_KEY, False),
    ]
    left = a.leave()
    assert _kinds(left.records) == [
        (CURRENT_MEMBER_ASSIGNMENT_KEY, True),
        (TARGET_ASSIGNMENT_MEMBER_KEY, True),
        (MEMBER_METADATA_KEY, True),
        (PARTITION_METADATA_KEY, False),  # no topic subscribed any more
        (GROUP_METADATA_KEY, False),
    ]
    error, records = cluster.groups.delete_group(GROUP)
    assert error is ErrorCode.NONE
    assert _kinds(records) == [
        (TARGET_ASSIGNMENT_METADATA_KEY, True),
        (PARTITION_METADATA_KEY, True),
        (GROUP_METADATA_KEY, True),
    ]
    assert GROUP not in cluster.groups.groups
    assert GROUP not in replayed(cluster.records + records).groups


def test_delete_group_errors() -> None:
    cluster = Cluster(t=2)
    Client(cluster).join()
    assert cluster.groups.delete_group(GROUP) == (ErrorCode.NON_EMPTY_GROUP, [])
    assert cluster.groups.delete_group("nope") == (ErrorCode.GROUP_ID_NOT_FOUND, [])


def test_failover_mid_reconciliation_then_converge() -> None:
    cluster = Cluster(t=6, u=2)
    clients = [Client(cluster, topics=("t", "u")) for _ in range(3)]
    for c in clients:
        c.join()
    clients[0].beat()
    clients[1].beat(subscribed_topic_names=("t",))
    static = Client(cluster, instance_id="s")
    static.join()
    static.leave(epoch=-2)
    # A new coordinator replays the partition, classic records and offsets interleaved.
    fresh = replayed(cluster.records)
    assert group_view(fresh.groups[GROUP]) == group_view(cluster.group())
    assert not fresh.replay(encode_classic_key(GroupMetadataKey("classic")), None)
    cluster.groups = fresh
    fresh.on_loaded(cluster.now_ms)
    # The static member at epoch -2 holds its partitions until its instance comes back.
    restarted = Client(cluster, instance_id="s")
    restarted.join()
    converge(clients + [restarted])
    assert group_view(replayed(cluster.records).groups[GROUP]) == group_view(cluster.group())
