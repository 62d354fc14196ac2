"""The records of `__consumer_offsets`, byte for byte as Kafka writes them.

Each record's key and value start with a big-endian int16 schema version, then the
fields in order: int16/int32/int64 big-endian, strings as int16 length + UTF-8 (length -1
for a null string), bytes as int32 length + bytes. Key version 0 or 1 is an
`OffsetCommitKey`, version 2 a `GroupMetadataKey`. We write the versions Kafka 2.3-3.x
writes (key 1 / value 3 for offsets, value 1 for one with an explicit expiry, key 2 / value 3
for groups, whose members carry their group.instance.id) and read values back
to version 0, so a topic copied from a Kafka cluster loads too. A null value is a
tombstone: compaction then drops the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from loglake.record.struct_codec import StructReader, StructWriter

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1: none (also what versions 0-2 imply)
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None  # only version 1 records carry one


@dataclass(frozen=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # -1: unknown (also what versions 0-1 imply)
    members: tuple[MemberMetadataValue, ...]


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        w = StructWriter().int16(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic)
        return w.int32(key.partition).getvalue()
    return StructWriter().int16(GROUP_METADATA_KEY_VERSION).string(key.group).getvalue()


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key, or None for a key version this coordinator does not know.

    Kafka 3.5+ skips unknown key versions too (records of newer coordinators), rather
    than failing the whole partition load.
    """
    r = StructReader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp is not None:
        # Only version 1 carries an explicit expiry (OffsetCommit v2-v4 retention), as Kafka writes it.
        w = StructWriter().int16(1).int64(value.offset).string(value.metadata).int64(value.commit_timestamp)
        return w.int64(value.expire_timestamp).getvalue()
    w = StructWriter().int16(OFFSET_COMMIT_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
    return w.string(value.metadata).int64(value.commit_timestamp).getvalue()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = StructReader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unknown offset commit value version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else None
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = StructWriter().int16(GROUP_METADATA_VALUE_VERSION).string(value.protocol_type).int32(value.generation)
    w.string(value.protocol).string(value.leader).int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
        w.int32(m.rebalance_timeout).int32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment)
    return w.getvalue()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = StructReader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unknown group metadata value version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.int32()):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else None
        session_timeout = r.int32()
        members.append(
            MemberMetadataValue(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                # version 0 had no rebalance timeout: Kafka used the session timeout for both
                session_timeout if rebalance_timeout is None else rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))
