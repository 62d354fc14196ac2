"""The `__consumer_offsets` records of consumer-protocol (KIP-848) groups, byte for byte as Kafka writes them.

Keys are classic structs (int16 key version, then int16-length strings); the key version
names the record type, as for the classic records in `records`:

    3 ConsumerGroupMetadata              (group)          value: epoch
    4 ConsumerGroupPartitionMetadata     (group)          value: subscribed topics' metadata
    5 ConsumerGroupMemberMetadata        (group, member)  value: subscription, client, assignor
    6 ConsumerGroupTargetAssignmentMetadata (group)       value: assignment epoch
    7 ConsumerGroupTargetAssignmentMember (group, member) value: target partitions
    8 ConsumerGroupCurrentMemberAssignment (group, member) value: epochs, state, partitions

Values are flexible (KIP-482) version 0 structs: int16 value version, compact strings and
arrays (unsigned varint length + 1, 0 for null), uuids as 16 bytes, and a tagged field
section closing every struct (one 0 byte when empty). A null value is a tombstone. The one
tagged field written is the member record's ClassicMemberMetadata (tag 0), present for a
member that uses the classic protocol inside a consumer group: its session timeout and
the (name, metadata) protocols of its JoinGroup.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from loglake.protocol.types import read_unsigned_varint, write_tagged_fields
from loglake.record.struct_codec import StructReader, StructWriter
from loglake.record.varint import encode_unsigned_varint

GROUP_METADATA_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_ASSIGNMENT_METADATA_KEY = 6
TARGET_ASSIGNMENT_MEMBER_KEY = 7
CURRENT_MEMBER_ASSIGNMENT_KEY = 8
_GROUP_KEYS = (GROUP_METADATA_KEY, PARTITION_METADATA_KEY, TARGET_ASSIGNMENT_METADATA_KEY)
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_ASSIGNMENT_MEMBER_KEY, CURRENT_MEMBER_ASSIGNMENT_KEY)
VALUE_VERSION = 0

# Assignments keyed by topic id, as Kafka keeps them: a topic recreated under the same name is another topic.
Partitions = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class ConsumerGroupKey:
    """Any of the six keys: `kind` is the key version, `member_id` is None for group-level ones."""

    kind: int
    group_id: str
    member_id: str | None = None


@dataclass(frozen=True)
class GroupMetadataValue:
    epoch: int


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]  # racks per partition are written empty: no rack-aware assignor here


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a classic member (JoinGroup/SyncGroup/Heartbeat) of a consumer group needs beyond
    a consumer member's fields: its session timeout and its protocols in preference order."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None  # tagged field 0; None for a consumer-protocol member


@dataclass(frozen=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True)
class TargetAssignmentMemberValue:
    partitions: Partitions


@dataclass(frozen=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's byte: 0 stable, 1 unrevoked partitions, 2 unreleased partitions
    assigned: Partitions
    pending_revocation: Partitions


ConsumerGroupValue = (
    GroupMetadataValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)

_KIND_OF_VALUE: dict[type, int] = {
    GroupMetadataValue: GROUP_METADATA_KEY,
    PartitionMetadataValue: PARTITION_METADATA_KEY,
    MemberMetadataValue: MEMBER_METADATA_KEY,
    TargetAssignmentMetadataValue: TARGET_ASSIGNMENT_METADATA_KEY,
    TargetAssignmentMemberValue: TARGET_ASSIGNMENT_MEMBER_KEY,
    CurrentMemberAssignmentValue: CURRENT_MEMBER_ASSIGNMENT_KEY,
}


def kind_of(value: ConsumerGroupValue) -> int:
    return _KIND_OF_VALUE[type(value)]


def encode_key(key: ConsumerGroupKey) -> bytes:
    w = StructWriter().int16(key.kind).string(key.group_id)
    if key.kind in _MEMBER_KEYS:
        w.string(key.member_id or "")
    return w.getvalue()


def decode_key(data: bytes) -> ConsumerGroupKey | None:
    """The key, or None for a version that is not a consumer group record (classic or newer)."""
    r = StructReader(data)
    kind = r.int16()
    if kind in _GROUP_KEYS:
        return ConsumerGroupKey(kind, r.string())
    if kind in _MEMBER_KEYS:
        return ConsumerGroupKey(kind, r.string(), r.string())
    return None


class _FlexWriter:
    """Compact (flexible version) encoding of the few field types these values use; a value
    starts with its version, a nested struct (`version` None) does not."""

    def __init__(self, version: int | None = VALUE_VERSION) -> None:
        self._parts: list[bytes] = [] if version is None else [version.to_bytes(2, "big")]

    def raw(self, data: bytes) -> _FlexWriter:
        self._parts.append(data)
        return self

    def int8(self, v: int) -> _FlexWriter:
        return self.raw(v.to_bytes(1, "big", signed=True))

    def int32(self, v: int) -> _FlexWriter:
        return self.raw(v.to_bytes(4, "big", signed=True))

    def length(self, n: int | None) -> _FlexWriter:
        return self.raw(encode_unsigned_varint(0 if n is None else n + 1))

    def string(self, v: str | None) -> _FlexWriter:
        if v is None:
            return self.length(None)
        data = v.encode()
        return self.length(len(data)).raw(data)

    def bytes_(self, v: bytes) -> _FlexWriter:
        return self.length(len(v)).raw(v)

    def uuid(self, v: uuid.UUID) -> _FlexWriter:
        return self.raw(v.bytes)

    def no_tags(self) -> _FlexWriter:
        return self.tags({})

    def tags(self, fields: dict[int, bytes]) -> _FlexWriter:
        """The tagged field section: tag -> the field's bytes (written in ascending tag order)."""
        out: list[bytes] = []
        write_tagged_fields(out, sorted(fields.items()))
        return self.raw(b"".join(out))

    def partitions(self, value: Partitions) -> _FlexWriter:
        # Sorted so that the same assignment always encodes to the same bytes.
        self.length(len(value))
        for topic_id in sorted(value):
            self.uuid(topic_id).length(len(value[topic_id]))
            for p in sorted(value[topic_id]):
                self.int32(p)
            self.no_tags()
        return self

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class _FlexReader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise ValueError("truncated consumer group record")
        out = bytes(self._data[self._pos : self._pos + n])
        self._pos += n
        return out

    def int8(self) -> int:
        return int.from_bytes(self._take(1), "big", signed=True)

    def int16(self) -> int:
        return int.from_bytes(self._take(2), "big", signed=True)

    def int32(self) -> int:
        return int.from_bytes(self._take(4), "big", signed=True)

    def length(self) -> int | None:
        n, self._pos = read_unsigned_varint(self._data, self._pos)
        return None if n == 0 else n - 1

    def nullable_string(self) -> str | None:
        n = self.length()
        return None if n is None else self._take(n).decode()

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise ValueError("null where a string is required")
        return v

    def bytes_(self) -> bytes:
        n = self.length()
        if n is None:
            raise ValueError("null where bytes are required")
        return self._take(n)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def count(self) -> int:
        return self.length() or 0

    def skip_tags(self) -> None:
        # Tagged fields a newer Kafka wrote are skipped, not failed on.
        self.tags()

    def tags(self) -> dict[int, bytes]:
        """The tagged field section: tag -> the field's bytes."""
        out = {}
        for _ in range(self.count_raw()):
            tag = self.count_raw()
            out[tag] = self._take(self.count_raw())
        return out

    def count_raw(self) -> int:
        n, self._pos = read_unsigned_varint(self._data, self._pos)
        return n

    def partitions(self) -> Partitions:
        out: Partitions = {}
        for _ in range(self.count()):
            topic_id = self.uuid()
            out[topic_id] = frozenset(self.int32() for _ in range(self.count()))
            self.skip_tags()
        return out


_CLASSIC_MEMBER_METADATA_TAG = 0


def _encode_classic(classic: ClassicMemberMetadata) -> bytes:
    w = _FlexWriter(version=None).raw(b"\x01")  # a nullable tagged struct starts with its presence
    w.int32(classic.session_timeout_ms).length(len(classic.protocols))
    for name, metadata in classic.protocols:
        w.string(name).bytes_(metadata).no_tags()
    return w.no_tags().getvalue()


def _decode_classic(data: bytes) -> ClassicMemberMetadata | None:
    r = _FlexReader(data)
    if r.count_raw() == 0:
        return None
    session_timeout_ms = r.int32()
    protocols = []
    for _ in range(r.count()):
        protocols.append((r.string(), r.bytes_()))
        r.skip_tags()
    r.skip_tags()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def encode_value(value: ConsumerGroupValue) -> bytes:
    w = _FlexWriter()
    if isinstance(value, GroupMetadataValue):
        w.int32(value.epoch)
    elif isinstance(value, PartitionMetadataValue):
        w.length(len(value.topics))
        for t in value.topics:
            w.uuid(t.topic_id).string(t.name).int32(t.num_partitions).length(0).no_tags()
    elif isinstance(value, MemberMetadataValue):
        w.string(value.instance_id).string(value.rack_id).string(value.client_id).string(value.client_host)
        w.length(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            w.string(name)
        w.string(value.subscribed_topic_regex).int32(value.rebalance_timeout_ms).string(value.server_assignor)
        if value.classic is not None:
            return w.tags({_CLASSIC_MEMBER_METADATA_TAG: _encode_classic(value.classic)}).getvalue()
    elif isinstance(value, TargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        w.partitions(value.partitions)
    else:
        w.int32(value.member_epoch).int32(value.previous_member_epoch).int8(value.state)
        w.partitions(value.assigned).partitions(value.pending_revocation)
    return w.no_tags().getvalue()


def decode_value(kind: int, data: bytes) -> ConsumerGroupValue:
    r = _FlexReader(data)
    version = r.int16()
    if version != VALUE_VERSION:
        raise ValueError(f"unknown consumer group record value version {version} (key {kind})")
    value: ConsumerGroupValue
    if kind == GROUP_METADATA_KEY:
        value = GroupMetadataValue(r.int32())
    elif kind == PARTITION_METADATA_KEY:
        topics = []
        for _ in range(r.count()):
            topic = TopicMetadata(r.uuid(), r.string(), r.int32())
            for _ in range(r.count()):  # per-partition racks: read past them
                r.int32()
                for _ in range(r.count()):
                    r.string()
                r.skip_tags()
            r.skip_tags()
            topics.append(topic)
        value = PartitionMetadataValue(tuple(topics))
    elif kind == MEMBER_METADATA_KEY:
        instance_id, rack_id, client_id, client_host = r.nullable_string(), r.nullable_string(), r.string(), r.string()
        names = tuple(r.string() for _ in range(r.count()))
        regex, rebalance_timeout_ms, assignor = r.nullable_string(), r.int32(), r.nullable_string()
        classic = r.tags().get(_CLASSIC_MEMBER_METADATA_TAG)
        return MemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            names,
            regex,
            rebalance_timeout_ms,
            assignor,
            None if classic is None else _decode_classic(classic),
        )
    elif kind == TARGET_ASSIGNMENT_METADATA_KEY:
        value = TargetAssignmentMetadataValue(r.int32())
    elif kind == TARGET_ASSIGNMENT_MEMBER_KEY:
        value = TargetAssignmentMemberValue(r.partitions())
    elif kind == CURRENT_MEMBER_ASSIGNMENT_KEY:
        value = CurrentMemberAssignmentValue(r.int32(), r.int32(), r.int8(), r.partitions(), r.partitions())
    else:
        raise ValueError(f"not a consumer group record key: {kind}")
    r.skip_tags()
    return value
