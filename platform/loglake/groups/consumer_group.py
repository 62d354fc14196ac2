"""Consumer-protocol (KIP-848) groups: the model and the ConsumerGroupHeartbeat state machine,
independent of any transport.

One `ConsumerGroups` holds the consumer-protocol groups of one `__consumer_offsets`
partition. Every call that changes state answers the records to append to that partition
(`Record` = key bytes, value bytes or None for a tombstone); the state is already
changed when the call returns, because it is changed only by replaying those very records
(as Kafka's coordinator does), so a coordinator that replays the partition after a
failover rebuilds exactly the same groups. How the group coordinator is meant to drive it:

    groups = ConsumerGroups(ConsumerGroupConfig.from_properties(props))
    for key, value in partition_records:          # loading, before serving
        groups.replay(key, value)                 # False: not a consumer group record
    groups.on_loaded(now_ms)                      # start session / rebalance timers

    result = groups.heartbeat(request, topics, now_ms)   # topics: name -> (topic id, partitions)
    await offsets_log.append(partition, list(result.records))  # then answer the client

    records = groups.expire(now_ms, topics)       # at groups.next_deadline_ms()
    error = groups.validate_offset_commit(group_id, member_id, member_epoch, False, api_version)
    description = groups.describe(group_id, topics)

`heartbeat` follows Kafka's consumerGroupHeartbeat: validate, get or create the member,
persist a changed subscription and bump the group epoch, recompute the target assignment
when the group epoch moved past the assignment epoch, then reconcile the member one step
towards its target (revoke first, assign only released partitions).

If the append fails the coordinator must not answer success; it should reload the
partition (the in-memory state is ahead of the log), as Kafka reverts its timeline.
"""

from __future__ import annotations

import base64
import enum
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

from loglake.errors import ErrorCode
from loglake.groups.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    PARTITION_METADATA_KEY,
    TARGET_ASSIGNMENT_MEMBER_KEY,
    TARGET_ASSIGNMENT_METADATA_KEY,
    ConsumerGroupKey,
    ConsumerGroupValue,
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    Partitions,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    TopicMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    kind_of,
)
from loglake.groups.server_assignors import SERVER_ASSIGNORS, AssignmentSpec
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


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    max_size: int = 2**31 - 1

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ConsumerGroupConfig:
        base = cls()
        assignors = base.assignors
        if "group.consumer.assignors" in props:
            assignors = tuple(a.strip() for a in props["group.consumer.assignors"].split(",") if a.strip())
            unknown = [a for a in assignors if a not in SERVER_ASSIGNORS]
            if unknown or not assignors:
                raise ValueError(f"group.consumer.assignors: unknown assignors {unknown}")
        config = cls(
            session_timeout_ms=int(props.get("group.consumer.session.timeout.ms", base.session_timeout_ms)),
            heartbeat_interval_ms=int(props.get("group.consumer.heartbeat.interval.ms", base.heartbeat_interval_ms)),
            assignors=assignors,
            max_size=int(props.get("group.consumer.max.size", base.max_size)),
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
        if config.heartbeat_interval_ms >= config.session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms")
        return config


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


@dataclass(frozen=True)
class ConsumerGroupDescription:
    group_id: str
    error: ErrorCode
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerGroupMemberDescription, ...] = ()


class _Fail(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _new_member_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): url-safe base64 of 16 random bytes, no padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _to_partitions(owned: Iterable[TopicPartitions]) -> Partitions:
    out: dict[uuid.UUID, set[int]] = {}
    for tp in owned:
        out.setdefault(tp.topic_id, set()).update(tp.partitions)
    return {t: frozenset(ps) for t, ps in out.items() if ps}


def _to_topic_partitions(parts: Partitions) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(t, tuple(sorted(parts[t]))) for t in sorted(parts))


def _is_subset(owned: tuple[TopicPartitions, ...] | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    return all(set(tp.partitions) <= assigned.get(tp.topic_id, frozenset()) for tp in owned)


def _owns_any(owned: tuple[TopicPartitions, ...] | None, parts: Partitions) -> bool:
    """Whether the member still reports any of `parts`; not reporting at all counts as owning."""
    if owned is None:
        return True
    return any(set(tp.partitions) & parts.get(tp.topic_id, frozenset()) for tp in owned)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Partitions,
    partition_epochs: Mapping[tuple[uuid.UUID, int], int],
    owned: tuple[TopicPartitions, ...] | None,
) -> ConsumerGroupMember:
    """One step of Kafka's CurrentAssignmentBuilder: the member's next current assignment."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epochs, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # it has not acknowledged the revocation yet
        # Revocation acked: the member moves on (its epoch advances) towards the latest target.
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epochs, owned)
    return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epochs, owned)


def _next_assignment(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Partitions,
    partition_epochs: Mapping[tuple[uuid.UUID, int], int],
    owned: tuple[TopicPartitions, ...] | None,
) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, frozenset())
        have = member.assigned.get(t, frozenset())
        keep = have & want
        # Another member still holding a partition (any epoch) blocks handing it over.
        free = frozenset(p for p in want - keep if (t, p) not in partition_epochs)
        unreleased = unreleased or len(free) < len(want - keep)
        for parts, value in ((assigned, keep), (revoke, have - keep), (to_assign, free)):
            if value:
                parts[t] = value
    if revoke and _owns_any(owned, revoke):
        # Revoke first, staying in the current epoch: it keeps consuming what it keeps.
        return _with_epoch(member, member_epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoke)
    for t, ps in to_assign.items():
        assigned[t] = assigned.get(t, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state, assigned, {})


def _with_epoch(
    member: ConsumerGroupMember, epoch: int, state: MemberState, assigned: Partitions, pending: Partitions
) -> ConsumerGroupMember:
    # Kafka's updateMemberEpoch: the previous epoch only moves when the epoch does.
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_member_epoch
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        assigned=assigned,
        pending_revocation=pending,
    )


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
    if not is_transactional and api_version < 9:
        # Only v9+ carries a member epoch; older versions cannot commit for a consumer member.
        return ErrorCode.UNSUPPORTED_VERSION
    if member_epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE


def validate_offset_fetch(group: ConsumerGroup | None, member_id: str | None, member_epoch: int) -> ErrorCode:
    """OffsetFetch v9+: a member that names itself must be known and at its current epoch.

    No group is no error: Kafka answers every partition with offset -1."""
    if (member_id is None and member_epoch < 0) or group is None:
        return ErrorCode.NONE
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE if member.member_epoch == member_epoch else ErrorCode.STALE_MEMBER_EPOCH


@dataclass
class _Deadlines:
    session_ms: int
    rebalance: tuple[int, int] | None = None  # (deadline, the member epoch it must have left by then)


class ConsumerGroups:
    """The consumer-protocol groups of one __consumer_offsets partition, with their timers."""

    def __init__(self, config: ConsumerGroupConfig, new_member_id: Callable[[], str] = _new_member_id) -> None:
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self._new_member_id = new_member_id
        self._deadlines: dict[tuple[str, str], _Deadlines] = {}
        self._out: list[Record] | None = None  # records of the call in progress

    # ---- replay: the only place the groups change ----

    def replay(self, key: bytes, value: bytes | None) -> bool:
        """Applies one record; False when it is not a consumer group record (classic, offsets)."""
        k = decode_key(key)
        if k is None:
            return False
        self._apply(k, None if value is None else decode_value(k.kind, value))
        return True

    def _apply(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        group = self.groups.get(key.group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[key.group_id] = ConsumerGroup(key.group_id)
        mid = key.member_id or ""
        if isinstance(value, GroupMetadataValue):
            group.group_epoch = value.epoch
        elif isinstance(value, PartitionMetadataValue):
            group.subscription_metadata = {t.name: t for t in value.topics}
        elif isinstance(value, TargetAssignmentMetadataValue):
            group.assignment_epoch = value.assignment_epoch
        elif isinstance(value, TargetAssignmentMemberValue):
            group.target[mid] = value.partitions
        elif isinstance(value, MemberMetadataValue):
            old = group.members.get(mid, ConsumerGroupMember(mid))
            group.members[mid] = replace(
                old,
                instance_id=value.instance_id,
                rack_id=value.rack_id,
                client_id=value.client_id,
                client_host=value.client_host,
                subscribed_topic_names=value.subscribed_topic_names,
                subscribed_topic_regex=value.subscribed_topic_regex,
                rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor,
            )
        elif isinstance(value, CurrentMemberAssignmentValue):
            old = group.members.get(mid, ConsumerGroupMember(mid))
            group.members[mid] = replace(
                old,
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=MemberState(value.state),
                assigned=value.assigned,
                pending_revocation=value.pending_revocation,
            )
        elif key.kind == GROUP_METADATA_KEY:  # tombstones from here on
            del self.groups[key.group_id]
        elif key.kind == PARTITION_METADATA_KEY:
            group.subscription_metadata = {}
        elif key.kind == TARGET_ASSIGNMENT_METADATA_KEY:
            group.assignment_epoch = 0
        elif key.kind == TARGET_ASSIGNMENT_MEMBER_KEY:
            group.target.pop(mid, None)
        elif key.kind == MEMBER_METADATA_KEY:
            group.members.pop(mid, None)
        elif key.kind == CURRENT_MEMBER_ASSIGNMENT_KEY and mid in group.members:
            group.members[mid] = replace(
                group.members[mid],
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned={},
                pending_revocation={},
            )

    def _emit(self, group_id: str, kind: int, member_id: str | None, value: ConsumerGroupValue | None) -> None:
        """Writes a record: encodes it, collects it for the caller, and applies it by replaying its bytes."""
        assert self._out is not None
        key = encode_key(ConsumerGroupKey(kind, group_id, member_id))
        data = None if value is None else encode_value(value)
        self._out.append((key, data))
        self.replay(key, data)

    def _write(self, group_id: str, value: ConsumerGroupValue, member_id: str | None = None) -> None:
        self._emit(group_id, kind_of(value), member_id, value)

    def _write_member(self, group_id: str, m: ConsumerGroupMember) -> None:
        self._write(
            group_id,
            MemberMetadataValue(
                m.instance_id,
                m.rack_id,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                m.subscribed_topic_regex,
                m.rebalance_timeout_ms,
                m.server_assignor,
            ),
            m.member_id,
        )

    def _write_current(self, group_id: str, m: ConsumerGroupMember) -> None:
        value = CurrentMemberAssignmentValue(
            m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned, m.pending_revocation
        )
        self._write(group_id, value, m.member_id)

    def _remove_member(self, group_id: str, member_id: str) -> None:
        # Kafka's order: current assignment, target assignment, then the member itself.
        for kind in (CURRENT_MEMBER_ASSIGNMENT_KEY, TARGET_ASSIGNMENT_MEMBER_KEY, MEMBER_METADATA_KEY):
            self._emit(group_id, kind, member_id, None)
        self._deadlines.pop((group_id, member_id), None)

    # ---- heartbeat ----

    def heartbeat(self, request: HeartbeatRequest, topics: TopicSnapshot, now_ms: int) -> HeartbeatResult:
        self._out = []
        try:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                self._validate(request)
                result = self._leave(request, topics)
            else:
                result = self._heartbeat(request, topics, now_ms)
        except _Fail as fail:
            assert not self._out, "validation must precede every record"
            result = HeartbeatResult(fail.code, fail.message)
        records, self._out = tuple(self._out), None
        return replace(result, records=records)

    def _validate(self, request: HeartbeatRequest) -> None:
        """Kafka's request checks, before anything is looked up."""

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise _Fail(ErrorCode.INVALID_REQUEST, message)

        require(request.group_id != "", "GroupId can't be empty.")
        require(request.instance_id != "", "InstanceId can't be empty.")
        require(request.rack_id != "", "RackId can't be empty.")
        epoch = request.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            require(request.member_id != "", "MemberId can't be empty.")
        elif epoch == 0:
            require(request.rebalance_timeout_ms != -1, "RebalanceTimeoutMs must be provided in first request.")
            require(request.owned_partitions == (), "TopicPartitions must be empty when (re-)joining.")
            require(
                bool(request.subscribed_topic_names) or bool(request.subscribed_topic_regex),
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            require(request.member_id != "", "MemberId can't be empty.")
            require(request.instance_id is not None, "InstanceId can't be null.")
        else:
            require(False, "MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise _Fail(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.config.assignors)}.",
            )
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as exc:
                raise _Fail(ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex is invalid: {exc}") from exc

    def _check_epoch(self, member: ConsumerGroupMember, request: HeartbeatRequest) -> None:
        epoch = request.member_epoch
        if epoch == 0:
            # A (re)join is always accepted: a fenced member rejoins under its own member id
            # (KAFKA-19233), and a join whose response was lost is simply sent again.
            return
        if epoch > member.member_epoch or (
            epoch < member.member_epoch
            # The previous epoch is accepted with owned partitions within the assignment:
            # the response that bumped the epoch may have been lost.
            and (epoch != member.previous_member_epoch or not _is_subset(request.owned_partitions, member.assigned))
        ):
            raise _Fail(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The member epoch {epoch} is not the one known by the group coordinator "
                f"({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )

    def _find_member(
        self, group: ConsumerGroup, request: HeartbeatRequest, member_id: str
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(the member, the static member it replaces if any), or raises Kafka's error."""
        joining = request.member_epoch == 0
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
                member = ConsumerGroupMember(member_id)
            self._check_epoch(member, request)
            return member, None
        existing = group.static_member(request.instance_id)
        if joining:
            if existing is None:
                return group.members.get(member_id, ConsumerGroupMember(member_id)), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _Fail(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Instance id {request.instance_id} is still owned by member {existing.member_id}.",
                )
            # The rejoining instance takes over the departed one's assignment under its new member id.
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _Fail(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {request.instance_id} is owned by another member.")
        self._check_epoch(existing, request)
        return existing, None

    def _heartbeat(self, request: HeartbeatRequest, topics: TopicSnapshot, now_ms: int) -> HeartbeatResult:
        self._validate(request)
        gid = request.group_id
        group = self.groups.get(gid)
        if group is None:
            if request.member_epoch != 0:
                raise _Fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
            group = ConsumerGroup(gid)
        member_id = request.member_id or self._new_member_id()
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise _Fail(
                ErrorCode.GROUP_MAX_SIZE_REACHED, f"The group has reached its maximum size {self.config.max_size}."
            )
        member, replaced = self._find_member(group, request, member_id)
        self.groups[gid] = group  # nothing can fail from here on

        if replaced is not None:
            target = group.target.get(replaced.member_id, {})
            self._remove_member(gid, replaced.member_id)
            self._write_member(gid, member)
            self._write(gid, TargetAssignmentMemberValue(target), member.member_id)
            self._write_current(gid, member)

        updated = replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=tuple(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            # An empty regex clears it.
            subscribed_topic_regex=(request.subscribed_topic_regex or None)
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=request.client_id,
            client_host=request.client_host,
        )
        bump = False
        if updated != member or member.member_id not in group.members:
            self._write_member(gid, updated)
            bump = (
                updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex
            )
        # Unlike Kafka (which refreshes on an interval), the topic snapshot is checked at every
        # heartbeat: new topics matching a regex and added partitions bump the epoch at once.
        bump = self._maybe_update_subscription_metadata(group, topics) or bump
        if bump:
            self._write(gid, GroupMetadataValue(group.group_epoch + 1))
        if group.group_epoch > group.assignment_epoch:
            self._update_target_assignment(group)

        current = group.members[member_id]
        before = current
        if not current.is_reconciled_to(group.assignment_epoch):
            current = reconcile(
                current,
                group.assignment_epoch,
                group.target.get(member_id, {}),
                # Its own partitions do not block it.
                {tp: e for tp, e in group.partition_epochs().items() if tp not in self._held_by(current)},
                request.owned_partitions,
            )
            if current != before:
                self._write_current(gid, current)
        deadlines = self._deadlines.setdefault((gid, member_id), _Deadlines(0))
        deadlines.session_ms = now_ms + self.config.session_timeout_ms
        if current.state is MemberState.UNREVOKED_PARTITIONS:
            if current != before or deadlines.rebalance is None:
                deadlines.rebalance = (now_ms + current.rebalance_timeout_ms, current.member_epoch)
        else:
            deadlines.rebalance = None

        full = request.member_epoch == 0 or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned_partitions is not None
        )
        changed = current.assigned != member.assigned
        return HeartbeatResult(
            ErrorCode.NONE,
            member_id=member_id,
            member_epoch=current.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=_to_topic_partitions(current.assigned) if full or changed else None,
        )

    @staticmethod
    def _held_by(member: ConsumerGroupMember) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for parts in (member.assigned, member.pending_revocation) for t, ps in parts.items() for p in ps}

    def _maybe_update_subscription_metadata(
        self, group: ConsumerGroup, topics: TopicSnapshot, without: str | None = None
    ) -> bool:
        names: set[str] = set()
        for m in group.members.values():
            if m.member_id != without:
                names |= m.subscribed_topics(topics)
        metadata = {n: TopicMetadata(topics[n][0], n, topics[n][1]) for n in sorted(names) if n in topics}
        if metadata == group.subscription_metadata:
            return False
        self._write(group.group_id, PartitionMetadataValue(tuple(metadata.values())))
        return True

    def _update_target_assignment(self, group: ConsumerGroup) -> None:
        ids = {name: t.topic_id for name, t in group.subscription_metadata.items()}
        specs = {
            m.member_id: AssignmentSpec(m.instance_id, frozenset(ids[n] for n in m.subscribed_topics(ids) if n in ids))
            for m in group.members.values()
        }
        counts = {t.topic_id: t.num_partitions for t in group.subscription_metadata.values()}
        assignor = SERVER_ASSIGNORS[group.preferred_assignor(self.config.assignors[0])]
        new_target = assignor.assign(specs, counts, group.target)
        for member_id in sorted(new_target):
            if new_target[member_id] != group.target.get(member_id, {}):
                self._write(group.group_id, TargetAssignmentMemberValue(new_target[member_id]), member_id)
        self._write(group.group_id, TargetAssignmentMetadataValue(group.group_epoch))

    # ---- leaving, fencing, timers ----

    def _leave(self, request: HeartbeatRequest, topics: TopicSnapshot) -> HeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            raise _Fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} not found.")
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of the group.")
        else:
            member = group.static_member(request.instance_id)
            if member is None:
                raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
            if member.member_id != request.member_id:
                raise _Fail(
                    ErrorCode.FENCED_INSTANCE_ID, f"Instance id {request.instance_id} is owned by another member."
                )
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # A static member keeps its place and assignment (epoch -2) until its session
                # expires or its instance rejoins: a restart does not move its partitions.
                self._write_current(
                    group.group_id, replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
                )
                return HeartbeatResult(ErrorCode.NONE, member_id=member.member_id, member_epoch=-2)
        self._fence(group, member.member_id, topics)
        return HeartbeatResult(ErrorCode.NONE, member_id=member.member_id, member_epoch=request.member_epoch)

    def _fence(self, group: ConsumerGroup, member_id: str, topics: TopicSnapshot) -> None:
        self._remove_member(group.group_id, member_id)
        self._maybe_update_subscription_metadata(group, topics)
        # The next heartbeat of any member computes the new target assignment.
        self._write(group.group_id, GroupMetadataValue(group.group_epoch + 1))

    def on_loaded(self, now_ms: int) -> None:
        """After replaying a partition: every member gets a full session (and a pending
        revocation its rebalance timeout) from now, as Kafka schedules them on load."""
        self._deadlines.clear()
        for group in self.groups.values():
            for m in group.members.values():
                d = self._deadlines[(group.group_id, m.member_id)] = _Deadlines(now_ms + self.config.session_timeout_ms)
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    d.rebalance = (now_ms + m.rebalance_timeout_ms, m.member_epoch)

    def next_deadline_ms(self) -> int | None:
        times = [d.session_ms for d in self._deadlines.values()]
        times += [d.rebalance[0] for d in self._deadlines.values() if d.rebalance is not None]
        return min(times, default=None)

    def expire(self, now_ms: int, topics: TopicSnapshot) -> list[Record]:
        """Fences members whose session expired, or that did not revoke within their
        rebalance timeout; answers the records to append."""
        self._out = []
        for (gid, mid), d in sorted(self._deadlines.items()):
            group = self.groups.get(gid)
            member = group.members.get(mid) if group is not None else None
            if group is None or member is None:
                self._deadlines.pop((gid, mid), None)
                continue
            session_over = d.session_ms <= now_ms
            revocation_over = d.rebalance is not None and d.rebalance[0] <= now_ms
            if revocation_over and d.rebalance is not None and d.rebalance[1] != member.member_epoch:
                d.rebalance, revocation_over = None, False  # it moved on from that epoch in time
            if session_over or revocation_over:
                self._fence(group, mid, topics)
        records, self._out = self._out, None
        return records

    def delete_group(self, group_id: str) -> tuple[ErrorCode, list[Record]]:
        """DeleteGroups: only an empty group; tombstones for everything it wrote."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        self._out = []
        for kind in (TARGET_ASSIGNMENT_METADATA_KEY, PARTITION_METADATA_KEY, GROUP_METADATA_KEY):
            self._emit(group_id, kind, None, None)
        records, self._out = self._out, None
        return ErrorCode.NONE, records

    # ---- reads ----

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, is_transactional: bool, api_version: int
    ) -> ErrorCode:
        return validate_offset_commit(self.groups.get(group_id), member_id, member_epoch, is_transactional, api_version)

    def describe(self, group_id: str, topics: TopicSnapshot) -> ConsumerGroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return ConsumerGroupDescription(group_id, ErrorCode.GROUP_ID_NOT_FOUND)
        names = {topic_id: name for name, (topic_id, _) in topics.items()}
        members = []
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            target = group.target.get(m.member_id, {})
            members.append(
                ConsumerGroupMemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.rack_id,
                    m.member_epoch,
                    m.client_id,
                    m.client_host,
                    m.subscribed_topic_names,
                    m.subscribed_topic_regex,
                    _to_topic_partitions(m.assigned),
                    _to_topic_partitions(target),
                    {t: names[t] for t in set(m.assigned) | set(target) if t in names},
                )
            )
        return ConsumerGroupDescription(
            group_id,
            ErrorCode.NONE,
            group.state.value,
            group.group_epoch,
            group.assignment_epoch,
            group.preferred_assignor(self.config.assignors[0]),
            tuple(members),
        )
