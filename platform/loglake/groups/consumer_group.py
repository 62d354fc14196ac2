"""Consumer-protocol (KIP-848) groups: the model, independent of any transport.

What a consumer group is (`ConsumerGroup`, its `ConsumerGroupMember`s, their reconciliation
`MemberState`), its settings (`ConsumerGroupConfig`, the migration policy), the requests
and answers of ConsumerGroupHeartbeat and of classic members (`HeartbeatRequest`,
`HeartbeatResult`, `ClassicJoinRequest`, ...), ConsumerGroupDescribe's description, and
Kafka's checks of OffsetCommit and OffsetFetch against such a group.

The state machine that changes these groups (ConsumerGroupHeartbeat, classic members,
online migration, timers) is `loglake.groups.consumer_groups.ConsumerGroups`; one step of
a member towards its target assignment is `loglake.groups.consumer_reconciliation`.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from loglake.errors import ErrorCode
from loglake.groups.assignors import CONSUMER_PROTOCOL_TYPE
from loglake.groups.consumer_records import (
    ClassicMemberMetadata,
    ConsumerGroupKey,
    ConsumerGroupValue,
    CurrentMemberAssignmentValue,
    MemberMetadataValue,
    Partitions,
    TopicMetadata,
    encode_key,
    encode_value,
    kind_of,
)
from loglake.groups.server_assignors import SERVER_ASSIGNORS
from loglake.internal_topics import INTERNAL_TOPICS

Record = tuple[bytes, "bytes | None"]
TopicSnapshot = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partition count)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """A member's reconciliation state; the value is the byte the current-assignment record stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # waiting for the member to give up partitions
    UNRELEASED_PARTITIONS = 2  # waiting for other members to give up partitions of its target


class ConsumerGroupState(str, enum.Enum):
    """The value is the name ConsumerGroupDescribe and ListGroups report."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class MigrationPolicy(str, enum.Enum):
    """group.consumer.migration.policy: which online conversions of a group with members are
    allowed (an Empty group converts either way whatever the policy, as in Kafka)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"  # classic group -> consumer group, when a consumer member joins
    DOWNGRADE = "downgrade"  # consumer group -> classic group, when its last consumer member leaves
    DISABLED = "disabled"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    # loglake's (see ConsumerGroups._interval_ms): the interval of a member waiting for
    # partitions other members still hold, and of the member a new one takes from first.
    unreleased_heartbeat_interval_ms: int = 50
    first_giver_heartbeat_interval_ms: int = 625
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    max_size: int = 2**31 - 1
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ConsumerGroupConfig:
        base = cls()
        assignors = base.assignors
        if "group.consumer.assignors" in props:
            assignors = tuple(a.strip() for a in props["group.consumer.assignors"].split(",") if a.strip())
            unknown = [a for a in assignors if a not in SERVER_ASSIGNORS]
            if unknown or not assignors:
                raise ValueError(f"group.consumer.assignors: unknown assignors {unknown}")
        heartbeat_interval_ms = int(props.get("group.consumer.heartbeat.interval.ms", base.heartbeat_interval_ms))
        config = cls(
            session_timeout_ms=int(props.get("group.consumer.session.timeout.ms", base.session_timeout_ms)),
            heartbeat_interval_ms=heartbeat_interval_ms,
            unreleased_heartbeat_interval_ms=int(
                props.get(
                    "loglake.group.consumer.unreleased.heartbeat.interval.ms", base.unreleased_heartbeat_interval_ms
                )
            ),
            # By default an eighth of the interval (its default: 625 ms of 5 s).
            first_giver_heartbeat_interval_ms=int(
                props.get("loglake.group.consumer.first.giver.heartbeat.interval.ms", heartbeat_interval_ms // 8)
            ),
            assignors=assignors,
            max_size=int(props.get("group.consumer.max.size", base.max_size)),
            migration_policy=_migration_policy(props.get("group.consumer.migration.policy", base.migration_policy)),
        )
        # Kafka's bounds (group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms)
        # keep a broker from handing out timeouts that fence members on every hiccup.
        for name, value, low, high in (
            ("session.timeout", config.session_timeout_ms, 45_000, 60_000),
            ("heartbeat.interval", config.heartbeat_interval_ms, 5_000, 15_000),
        ):
            low = int(props.get(f"group.consumer.min.{name}.ms", low))
            high = int(props.get(f"group.consumer.max.{name}.ms", high))
            if not low <= value <= high:
                raise ValueError(f"group.consumer.{name}.ms={value} is outside [{low}, {high}]")
        for name, value in (
            ("unreleased", config.unreleased_heartbeat_interval_ms),
            ("first.giver", config.first_giver_heartbeat_interval_ms),
        ):
            if value < 1:
                raise ValueError(f"loglake.group.consumer.{name}.heartbeat.interval.ms must be at least 1")
        if config.heartbeat_interval_ms >= config.session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms")
        return config


def _migration_policy(name: str) -> MigrationPolicy:
    try:
        return MigrationPolicy(name.strip().lower())  # case-insensitive, as Kafka validates it
    except ValueError:
        allowed = ", ".join(p.value for p in MigrationPolicy)
        raise ValueError(f"group.consumer.migration.policy={name!r} is not one of {allowed}") from None


@dataclass(frozen=True)
class TopicPartitions:
    """One topic's partitions as ConsumerGroupHeartbeat carries them (owned in, assigned out)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat; None (or -1 for the timeout) means "unchanged since the last heartbeat"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: tuple[TopicPartitions, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None  # None: unchanged, keep the current one
    records: tuple[Record, ...] = ()
    # The group became a classic group (its last consumer member left): that group's metadata
    # record (the last of `records`), for the caller to host it.
    downgraded: Record | None = None


@dataclass(frozen=True)
class ClassicMember:
    """A member as a classic group holds it: its JoinGroup's protocols (name, metadata) in
    preference order and its assignment (ConsumerProtocol Assignment bytes)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True)
class ClassicGroupSnapshot:
    """A classic group with members, as an upgrade takes it."""

    group_id: str
    protocol_type: str
    generation: int
    protocol_name: str | None
    members: tuple[ClassicMember, ...]


@dataclass(frozen=True)
class ClassicJoinRequest:
    """A JoinGroup: to a classic group, or to a consumer group with members (the member joins
    it as a classic member)."""

    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True


@dataclass(frozen=True)
class ExpiryResult:
    records: tuple[Record, ...] = ()
    downgraded: tuple[Record, ...] = ()  # as HeartbeatResult.downgraded, one per group


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None  # set while it uses the classic protocol

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def subscribed_topics(self, topics: Iterable[str]) -> set[str]:
        """Its topic names plus the names in `topics` its regex matches in full (Kafka's RE2J `matches`)."""
        names = set(self.subscribed_topic_names)
        if self.subscribed_topic_regex:
            pattern = re.compile(self.subscribed_topic_regex)
            # Internal topics are never matched by a regex, as in Kafka.
            names.update(t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t))
        return names

    def held(self) -> set[tuple[uuid.UUID, int]]:
        """The partitions it holds: assigned or pending revocation."""
        return {(t, p) for parts in (self.assigned, self.pending_revocation) for t, ps in parts.items() for p in ps}


class ConsumerGroup:
    """One group's persisted state; changed only by `ConsumerGroups.replay`."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target: dict[str, Partitions] = {}

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def partition_epochs(self) -> dict[tuple[uuid.UUID, int], int]:
        """The epoch of the member holding each partition (assigned or pending revocation);
        a partition absent here is free to be given to its new owner."""
        out: dict[tuple[uuid.UUID, int], int] = {}
        for m in self.members.values():
            for parts in (m.assigned, m.pending_revocation):
                for t, ps in parts.items():
                    for p in ps:
                        out[(t, p)] = m.member_epoch
        return out

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for, else the default."""
        counts = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        return max(sorted(counts), key=lambda a: counts[a]) if counts else default

    def subscribed_topics(self, topics: Iterable[str]) -> set[str]:
        """The topics its members subscribe to, by name or (among `topics`) by regex."""
        return {name for m in self.members.values() for name in m.subscribed_topics(topics)}

    def supports_classic_protocols(self, protocol_type: str, names: Sequence[str]) -> bool:
        """Kafka's check of a classic member's JoinGroup: the consumer protocol type, and one of
        its protocols supported by every classic member (any, while there is none)."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        classic = [{name for name, _ in m.classic.protocols} for m in self.members.values() if m.classic]
        return any(all(name in supported for supported in classic) for name in names)

    def first_giver(self) -> str | None:
        """The member a new member's first partition would come from: of those with the most
        partitions in the target assignment, the lowest member id (the uniform assignor
        takes from them in that order); None while no member has any."""
        loads = {mid: sum(map(len, self.target.get(mid, {}).values())) for mid in self.members}
        most = max(loads.values(), default=0)
        return min(mid for mid, n in loads.items() if n == most) if most else None

    def waits_on_unreleased(self, member: ConsumerGroupMember) -> bool:
        """Whether partitions of its target it lacks are still held by other members."""
        held = {tp for m in self.members.values() if m is not member for tp in m.held()}
        target = self.target.get(member.member_id, {})
        return any((t, p) in held for t, ps in target.items() for p in ps - member.assigned.get(t, frozenset()))


@dataclass(frozen=True)
class ConsumerGroupMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartitions, ...]
    target_assignment: tuple[TopicPartitions, ...]
    topic_names: dict[uuid.UUID, str]  # for the topics of both assignments, from the topic snapshot
    uses_classic_protocol: bool = False  # ConsumerGroupDescribe v1's MemberType: 0 classic, 1 consumer


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    error: ErrorCode
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerGroupMemberDescription, ...] = ()


def _epoch_error(member: ConsumerGroupMember) -> ErrorCode:
    # A classic member's epoch is its generation id: a wrong one is an illegal generation.
    return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH


def validate_offset_commit(
    group: ConsumerGroup | None, member_id: str, member_epoch: int, is_transactional: bool, api_version: int
) -> ErrorCode:
    """Kafka's check of an OffsetCommit (or TxnOffsetCommit) against a consumer-protocol group.

    `member_epoch` is the request's generation id / member epoch field. No group: a
    commit with epoch < 0 creates a simple (classic) group, which is the caller's business."""
    if group is None:
        if member_epoch < 0:
            return ErrorCode.NONE
        return ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
    if member_epoch < 0 and not group.members:
        return ErrorCode.NONE  # the admin client or a consumer without group management
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if not is_transactional and member.classic is None and api_version < 9:
        # Only v9+ carries a member epoch; older versions cannot commit for a consumer member.
        return ErrorCode.UNSUPPORTED_VERSION
    return ErrorCode.NONE if member_epoch == member.member_epoch else _epoch_error(member)


def validate_offset_fetch(group: ConsumerGroup | None, member_id: str | None, member_epoch: int) -> ErrorCode:
    """OffsetFetch v9+: a member that names itself must be known and at its current epoch.

    No group is no error: Kafka answers every partition with offset -1."""
    if (member_id is None and member_epoch < 0) or group is None:
        return ErrorCode.NONE
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE if member.member_epoch == member_epoch else _epoch_error(member)


def consumer_record(group_id: str, value: ConsumerGroupValue, member_id: str | None = None) -> Record:
    """A consumer group record (key version 3-8, by the value's kind)."""
    return encode_key(ConsumerGroupKey(kind_of(value), group_id, member_id)), encode_value(value)


def member_metadata_value(m: ConsumerGroupMember) -> MemberMetadataValue:
    return MemberMetadataValue(
        m.instance_id,
        m.rack_id,
        m.client_id,
        m.client_host,
        m.subscribed_topic_names,
        m.subscribed_topic_regex,
        m.rebalance_timeout_ms,
        m.server_assignor,
        m.classic,
    )


def current_assignment_value(m: ConsumerGroupMember) -> CurrentMemberAssignmentValue:
    return CurrentMemberAssignmentValue(
        m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned, m.pending_revocation
    )
