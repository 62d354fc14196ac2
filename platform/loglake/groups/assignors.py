"""Kafka's consumer protocol: subscription / assignment bytes and the range and roundrobin assignors.

The coordinator treats member metadata and assignments as opaque bytes; only the
group's leader reads them. The broker's HTTP consumer instances are group members
driven server-side, so when one of them is elected leader it computes the assignment
here, exactly as the Java consumer would, and a group may mix them with Java clients.

Wire formats (`ConsumerProtocolSubscription` / `ConsumerProtocolAssignment`):

    Subscription => version:int16 [topics:string] user_data:nullable bytes
                    (v1+) [owned_partitions: topic:string [partitions:int32]]
                    (v2+) generation_id:int32   (v3+) rack_id:nullable string
    Assignment   => version:int16 [assigned_partitions: topic:string [partitions:int32]]
                    user_data:nullable bytes

Decoding reads the fields of the versions it knows and ignores anything after them,
as the Java client does for newer versions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from loglake.groups.api import JoinGroupMember, TopicPartition

CONSUMER_PROTOCOL_TYPE = "consumer"
_SUBSCRIPTION_MAX_VERSION = 3
_ASSIGNMENT_MAX_VERSION = 3


@dataclass(frozen=True)
class Subscription:
    """A member's subscription. `group_instance_id` is not encoded: like the Java client's
    Subscription it comes from the JoinGroup member list and orders members for assignors."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


class _Buffer:
    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        if self._pos + size > len(self._data):
            raise ValueError("truncated consumer protocol bytes")
        (value,) = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += size
        return value

    def int16(self) -> int:
        return self._unpack(">h", 2)

    def int32(self) -> int:
        return self._unpack(">i", 4)

    def _raw(self, n: int) -> bytes:
        if self._pos + n > len(self._data):
            raise ValueError("truncated consumer protocol bytes")
        raw = self._data[self._pos : self._pos + n]
        self._pos += n
        return raw

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._raw(n).decode()

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise ValueError("null topic name")
        return s

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self._raw(n)

    def array_length(self) -> int:
        n = self.int32()
        if n < 0:
            raise ValueError("null array in consumer protocol bytes")
        return n

    def topic_partitions(self) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        for _ in range(self.array_length()):
            topic = self.string()
            out.extend(TopicPartition(topic, self.int32()) for _ in range(self.array_length()))
        return out


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def _nullable_bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + bytes(b)


def _topic_partitions(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [struct.pack(">i", len(by_topic))]
    for topic, nums in by_topic.items():
        parts.append(_string(topic))
        parts.append(struct.pack(f">i{len(nums)}i", len(nums), *nums))
    return b"".join(parts)


def _check_version(version: int, max_version: int) -> None:
    if not 0 <= version <= max_version:
        raise ValueError(f"consumer protocol version {version} not in 0..{max_version}")


def encode_subscription(subscription: Subscription, version: int = 0) -> bytes:
    _check_version(version, _SUBSCRIPTION_MAX_VERSION)
    parts = [struct.pack(">hi", version, len(subscription.topics))]
    parts.extend(_string(t) for t in subscription.topics)
    parts.append(_nullable_bytes(subscription.user_data))
    if version >= 1:
        parts.append(_topic_partitions(subscription.owned_partitions))
    if version >= 2:
        parts.append(struct.pack(">i", subscription.generation_id))
    if version >= 3:
        parts.append(_string(subscription.rack_id))
    return b"".join(parts)


def decode_subscription(data: bytes) -> Subscription:
    buf = _Buffer(data)
    version = buf.int16()
    if version < 0:
        raise ValueError(f"negative consumer protocol version {version}")
    topics = tuple(buf.string() for _ in range(buf.array_length()))
    user_data = buf.nullable_bytes()
    owned = tuple(buf.topic_partitions()) if version >= 1 else ()
    generation_id = buf.int32() if version >= 2 else -1
    rack_id = buf.nullable_string() if version >= 3 else None
    return Subscription(topics, user_data, owned, generation_id, rack_id)


def encode_assignment(assignment: Assignment, version: int = 0) -> bytes:
    # Versions 1-3 only changed what the client does with it, not the bytes.
    _check_version(version, _ASSIGNMENT_MAX_VERSION)
    return struct.pack(">h", version) + _topic_partitions(assignment.partitions) + _nullable_bytes(assignment.user_data)


def decode_assignment(data: bytes) -> Assignment:
    buf = _Buffer(data)
    version = buf.int16()
    if version < 0:
        raise ValueError(f"negative consumer protocol version {version}")
    partitions = tuple(buf.topic_partitions())
    return Assignment(partitions, buf.nullable_bytes())


def _java_order(s: str) -> bytes:
    # Java compares strings by UTF-16 code unit; big-endian UTF-16 bytes sort the same way.
    return s.encode("utf-16-be")


def _sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Members in the order of the Java client's MemberInfo: static members (by instance id) first."""

    def key(member_id: str) -> tuple[int, bytes]:
        instance_id = subscriptions[member_id].group_instance_id
        return (0, _java_order(instance_id)) if instance_id is not None else (1, _java_order(member_id))

    return sorted(subscriptions, key=key)


class PartitionAssignor(Protocol):
    name: str

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        """Partitions per member id; topics missing from `partitions_per_topic` are skipped."""
        ...


class RangeAssignor:
    """Per topic, contiguous ranges over the sorted subscribers; the first ones get one extra.

    Kafka's example: C0 and C1 subscribed to t0 and t1 of 3 partitions each get
    C0: [t0p0, t0p1, t1p0, t1p1] and C1: [t0p2, t1p2].
    """

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        consumers_per_topic: dict[str, list[str]] = {}
        for member_id in _sorted_members(subscriptions):
            for topic in dict.fromkeys(subscriptions[member_id].topics):
                consumers_per_topic.setdefault(topic, []).append(member_id)
        for topic in sorted(consumers_per_topic, key=_java_order):
            num_partitions = partitions_per_topic.get(topic)
            if num_partitions is None:
                continue
            consumers = consumers_per_topic[topic]
            per_consumer, extra = divmod(num_partitions, len(consumers))
            for i, member_id in enumerate(consumers):
                start = per_consumer * i + min(i, extra)
                length = per_consumer + (1 if i < extra else 0)
                assignment[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return assignment


class RoundRobinAssignor:
    """All partitions sorted by topic then number, dealt in turn to the sorted members,
    skipping members not subscribed to a partition's topic.

    Kafka's example: C0 and C1 subscribed to t0 and t1 of 3 partitions each get
    C0: [t0p0, t0p2, t1p1] and C1: [t0p1, t1p0, t1p2].
    """

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        members = _sorted_members(subscriptions)
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics}, key=_java_order)
        turn = 0
        for topic in topics:
            for partition in range(partitions_per_topic.get(topic, 0)):
                # Some member is subscribed to every topic listed, so this terminates.
                while topic not in subscriptions[members[turn % len(members)]].topics:
                    turn += 1
                assignment[members[turn % len(members)]].append(TopicPartition(topic, partition))
                turn += 1
        return assignment


ASSIGNORS: dict[str, PartitionAssignor] = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor())}


def assign_group(
    protocol_name: str, members: Sequence[JoinGroupMember], partitions_per_topic: Mapping[str, int]
) -> dict[str, bytes]:
    """The SyncGroup assignments a leader sends, from its JoinGroup response's member list.

    `protocol_name` is the group's chosen protocol ("range" or "roundrobin");
    `partitions_per_topic` the partition counts of the subscribed topics that exist.
    """
    assignor = ASSIGNORS.get(protocol_name)
    if assignor is None:
        raise ValueError(f"no assignor named {protocol_name!r}")
    subscriptions = {
        m.member_id: replace(decode_subscription(m.metadata), group_instance_id=m.group_instance_id) for m in members
    }
    assigned = assignor.assign(partitions_per_topic, subscriptions)
    return {member_id: encode_assignment(Assignment(tuple(tps))) for member_id, tps in assigned.items()}
