"""Consumer-protocol (KIP-848) groups: the ConsumerGroupHeartbeat state machine, independent
of any transport (the groups it changes are `loglake.groups.consumer_group`'s model).

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

    expired = groups.expire(now_ms, topics)       # at groups.next_deadline_ms(): .records
    error = groups.validate_offset_commit(group_id, member_id, member_epoch, False, api_version)
    description = groups.describe(group_id, topics)

`now_ms` is a monotonic clock (the members' session and rebalance timers, as Kafka's timer
wheel): a step of the wall clock must not fence every member at once. The one wall-clock
time written, the state timestamp of a downgraded group's record, comes from `wall_clock_ms`.

`heartbeat` follows Kafka's consumerGroupHeartbeat: validate, get or create the member,
persist a changed subscription and bump the group epoch, recompute the target assignment
when the group epoch moved past the assignment epoch, then reconcile the member one step
towards its target (revoke first, assign only released partitions).

If the append fails the coordinator must not answer success; it should reload the
partition (the in-memory state is ahead of the log), as Kafka reverts its timeline.

Classic members and online migration (Kafka 4's, under group.consumer.migration.policy):
a consumer group may hold members that speak the classic protocol. Their member record
carries ClassicMemberMetadata (session timeout, JoinGroup protocols); they are assigned by
the server assignor and reconciled like consumer members, but only when they (re)join:

    result, records = groups.classic_join(ClassicJoinRequest(...), topics, now_ms)
    sync = groups.classic_sync(group_id, member_id, instance_id, generation, type, name, topics, now_ms)
    error = groups.classic_heartbeat(group_id, member_id, instance_id, generation, now_ms)
    left, records = groups.classic_leave(group_id, identities, topics)

JoinGroup answers the member epoch as the generation; SyncGroup answers the current
assignment as a ConsumerProtocol Assignment; Heartbeat answers REBALANCE_IN_PROGRESS
when the member must rejoin (the group epoch moved past it, it must revoke, or partitions
it waits for were released), after which it must rejoin within its rebalance timeout.

Upgrade: `heartbeat(request, topics, now_ms, classic=snapshot)` with the classic group of
that id (non-empty, consumer protocol type) converts it first: its members become classic
members, Stable at the classic generation with their last assignment. Downgrade: when the
last consumer-protocol member leaves or is fenced and classic members remain, every record
of the group is tombstoned and followed by the group metadata record of the classic group
that takes its place (each member assigned its target), also handed back on its own
(`HeartbeatResult.downgraded`, `ExpiryResult.downgraded`) for the coordinator to host the
group as loading that record would, and rebalance it. The conversions themselves (which
records, which classic group) are `loglake.groups.consumer_migration`'s.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from loglake.errors import ErrorCode
from loglake.groups.api import JoinResult, LeaveGroupResult, MemberIdentity, MemberLeaveResult, SyncResult
from loglake.groups.assignors import CONSUMER_PROTOCOL_TYPE, decode_subscription
from loglake.groups.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ClassicGroupSnapshot,
    ClassicJoinRequest,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupDescription,
    ConsumerGroupMember,
    ConsumerGroupMemberDescription,
    ExpiryResult,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    Record,
    TopicPartitions,
    TopicSnapshot,
    consumer_record,
    current_assignment_value,
    member_metadata_value,
    validate_offset_commit,
)
from loglake.groups.consumer_migration import (
    UpgradeRefused,
    classic_assignment,
    downgrade_protocol,
    downgraded_group_record,
    partitions_by_id,
    upgrade_records,
)
from loglake.groups.consumer_reconciliation import reconcile
from loglake.groups.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    PARTITION_METADATA_KEY,
    TARGET_ASSIGNMENT_MEMBER_KEY,
    TARGET_ASSIGNMENT_METADATA_KEY,
    ClassicMemberMetadata,
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
)
from loglake.groups.server_assignors import SERVER_ASSIGNORS, AssignmentSpec

_T = TypeVar("_T")


class _Fail(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _new_member_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): url-safe base64 of 16 random bytes, no padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _to_topic_partitions(parts: Partitions) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(t, tuple(sorted(parts[t]))) for t in sorted(parts))


def _is_subset(owned: tuple[TopicPartitions, ...] | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    return all(set(tp.partitions) <= assigned.get(tp.topic_id, frozenset()) for tp in owned)


@dataclass
class _Deadlines:
    """A member's timers; it is fenced when any of them passes."""

    session_ms: int
    rebalance: tuple[int, int] | None = None  # (deadline, the member epoch it must have left by then)
    join_ms: int | None = None  # a classic member told to rejoin must have rejoined by then
    sync_ms: int | None = None  # a classic member that joined must have sent SyncGroup by then

    def _times(self) -> list[int]:
        rebalance = None if self.rebalance is None else self.rebalance[0]
        return [t for t in (self.session_ms, self.join_ms, self.sync_ms, rebalance) if t is not None]

    def due(self, now_ms: int, member_epoch: int) -> bool:
        if self.rebalance is not None and self.rebalance[1] != member_epoch:
            self.rebalance = None  # it moved on from that epoch in time
        return any(t <= now_ms for t in self._times())

    def must_rejoin(self, deadline_ms: int) -> None:
        """A classic member told to rejoin: by `deadline_ms`, or the deadline it was first given."""
        if self.join_ms is None:
            self.join_ms = deadline_ms

    def next_ms(self) -> int:
        return min(self._times())


def _updated(
    member: ConsumerGroupMember,
    instance_id: str | None,
    rack_id: str | None,
    rebalance_timeout_ms: int,
    client_id: str,
    client_host: str,
    **changes: Any,  # other fields of ConsumerGroupMember, checked by replace()
) -> ConsumerGroupMember:
    """`member` as a heartbeat or JoinGroup describes it: its instance id, rack and rebalance
    timeout where given (None, -1: unchanged), its client, and the other `changes`."""
    return replace(
        member,
        instance_id=member.instance_id if instance_id is None else instance_id,
        rack_id=member.rack_id if rack_id is None else rack_id,
        rebalance_timeout_ms=member.rebalance_timeout_ms if rebalance_timeout_ms == -1 else rebalance_timeout_ms,
        client_id=client_id,
        client_host=client_host,
        **changes,
    )


class ConsumerGroups:
    """The consumer-protocol groups of one __consumer_offsets partition, with their timers."""

    def __init__(
        self,
        config: ConsumerGroupConfig,
        new_member_id: Callable[[], str] = _new_member_id,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self._new_member_id = new_member_id
        self._wall_clock_ms = wall_clock_ms
        self._deadlines: dict[tuple[str, str], _Deadlines] = {}
        self._out: list[Record] | None = None  # records of the call in progress
        self._downgraded: list[Record] = []  # classic group records of the groups the call downgraded

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
                classic=value.classic,
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

    def _emit(self, record: Record) -> None:
        """Writes a record: collects it for the caller and applies it by replaying its bytes."""
        assert self._out is not None
        self._out.append(record)
        self.replay(*record)

    def _write(self, group_id: str, value: ConsumerGroupValue, member_id: str | None = None) -> None:
        self._emit(consumer_record(group_id, value, member_id))

    def _tombstone(self, group_id: str, kind: int, member_id: str | None = None) -> None:
        self._emit((encode_key(ConsumerGroupKey(kind, group_id, member_id)), None))

    def _write_member(self, group_id: str, m: ConsumerGroupMember) -> None:
        self._write(group_id, member_metadata_value(m), m.member_id)

    def _write_current(self, group_id: str, m: ConsumerGroupMember) -> None:
        self._write(group_id, current_assignment_value(m), m.member_id)

    def _remove_member(self, group_id: str, member_id: str) -> None:
        # Kafka's order: current assignment, target assignment, then the member itself.
        for kind in (CURRENT_MEMBER_ASSIGNMENT_KEY, TARGET_ASSIGNMENT_MEMBER_KEY, MEMBER_METADATA_KEY):
            self._tombstone(group_id, kind, member_id)
        self._deadlines.pop((group_id, member_id), None)

    def _replace_member(self, group: ConsumerGroup, replaced: ConsumerGroupMember, member: ConsumerGroupMember) -> None:
        """A static member's new incarnation takes over the old one's entry and target."""
        target = group.target.get(replaced.member_id, {})
        self._remove_member(group.group_id, replaced.member_id)
        self._write_member(group.group_id, member)
        self._write(group.group_id, TargetAssignmentMemberValue(target), member.member_id)
        self._write_current(group.group_id, member)

    def _collect(
        self, call: Callable[[], _T], failed: Callable[[_Fail], _T]
    ) -> tuple[_T, tuple[Record, ...], tuple[Record, ...]]:
        """Runs one state-changing call: (its answer, the records it wrote, the groups it downgraded)."""
        self._out, self._downgraded = [], []
        try:
            result = call()
        except _Fail as fail:
            assert not self._out, "validation must precede every record"
            result = failed(fail)
        out = (result, tuple(self._out), tuple(self._downgraded))
        self._out, self._downgraded = None, []
        return out

    # ---- heartbeat ----

    def heartbeat(
        self,
        request: HeartbeatRequest,
        topics: TopicSnapshot,
        now_ms: int,
        classic: ClassicGroupSnapshot | None = None,
    ) -> HeartbeatResult:
        """ConsumerGroupHeartbeat. `classic` is the classic group with members of the same id, if
        there is one: a joining member upgrades it into a consumer group (as Kafka's
        convertToConsumerGroup) when the migration policy allows it, or gets GROUP_ID_NOT_FOUND."""

        def call() -> HeartbeatResult:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                self._validate(request)
                return self._leave(request, topics, now_ms)
            return self._heartbeat(request, topics, now_ms, classic)

        result, records, downgraded = self._collect(call, lambda fail: HeartbeatResult(fail.code, fail.message))
        return replace(result, records=records, downgraded=downgraded[0] if downgraded else None)

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
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        joining: bool,
        request: HeartbeatRequest | None,
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(the member, the static member it replaces if any), or raises Kafka's error.

        `request` is the consumer heartbeat whose epoch is checked; None for a classic JoinGroup,
        which has no epoch and may take over an instance id without waiting for its release."""
        if not joining:
            member = self._named_member(group, member_id, instance_id)
            if request is not None:
                self._check_epoch(member, request)
            return member, None
        # A (re)join is always accepted, whatever the epoch: a fenced member rejoins under its
        # own member id (KAFKA-19233), and a join whose response was lost is simply sent again.
        existing = group.static_member(instance_id)
        if existing is None:
            return group.members.get(member_id, ConsumerGroupMember(member_id)), None
        if (
            request is not None
            and existing.classic is None
            and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
        ):
            # Between consumer members the departed instance must have left (epoch -2) first;
            # an instance coming back with the other protocol replaces it at once, as in Kafka.
            raise _Fail(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"Instance id {instance_id} is still owned by member {existing.member_id}.",
            )
        # The rejoining instance takes over the departed one's assignment under its new member id.
        return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing

    def _check_size(self, group: ConsumerGroup, member_id: str) -> None:
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise _Fail(
                ErrorCode.GROUP_MAX_SIZE_REACHED, f"The group has reached its maximum size {self.config.max_size}."
            )

    def _heartbeat(
        self, request: HeartbeatRequest, topics: TopicSnapshot, now_ms: int, classic: ClassicGroupSnapshot | None
    ) -> HeartbeatResult:
        self._validate(request)
        gid = request.group_id
        group = self.groups.get(gid)
        upgrade: list[Record] = []
        if group is None:
            if request.member_epoch != 0:
                why = "not found" if classic is None else "is not a consumer group"
                raise _Fail(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} {why}.")
            if classic is None:
                group = ConsumerGroup(gid)
            else:
                try:
                    upgrade = upgrade_records(classic, topics, self.config)
                except UpgradeRefused as refused:
                    raise _Fail(ErrorCode.GROUP_ID_NOT_FOUND, str(refused)) from None
                group = self._replayed(gid, upgrade)  # to look the member up before writing anything
        member_id = request.member_id or self._new_member_id()
        self._check_size(group, member_id)
        member, replaced = self._find_member(group, member_id, request.instance_id, request.member_epoch == 0, request)
        # Nothing can fail from here on.
        if upgrade:
            for record in upgrade:
                self._emit(record)
            group = self.groups[gid]
            for m in group.members.values():
                self._deadlines[(gid, m.member_id)] = _Deadlines(now_ms + self._session_ms(m))
        self.groups[gid] = group

        if replaced is not None:
            self._replace_member(group, replaced, member)

        updated = _updated(
            member,
            request.instance_id,
            request.rack_id,
            request.rebalance_timeout_ms,
            request.client_id,
            request.client_host,
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=tuple(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            # An empty regex clears it.
            subscribed_topic_regex=(request.subscribed_topic_regex or None)
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            classic=None,  # it speaks the consumer protocol now
        )
        before, current = self._update_member(group, member, updated, topics, request.owned_partitions)
        deadlines = self._deadlines.setdefault((gid, member_id), _Deadlines(0))
        deadlines.session_ms = now_ms + self.config.session_timeout_ms
        deadlines.join_ms = deadlines.sync_ms = None
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
            heartbeat_interval_ms=self._interval_ms(group, current),
            assignment=_to_topic_partitions(current.assigned) if full or changed else None,
        )

    def _interval_ms(self, group: ConsumerGroup, member: ConsumerGroupMember) -> int:
        """The heartbeat interval to answer `member` with. A partition that moves waits for
        its owner's next heartbeat (to be revoked) and then for its new owner's (to be
        assigned); two loglake rules, beyond Kafka's, shorten both waits for a new member:
        - a member waiting for partitions that other members still hold heartbeats every
          loglake.group.consumer.unreleased.heartbeat.interval.ms, so that it picks each
          up almost as soon as it is released;
        - the member a new member would take its first partition from (`first_giver`)
          heartbeats every loglake.group.consumer.first.giver.heartbeat.interval.ms, so
          that it gives it up within a fraction of the interval."""
        interval = self.config.heartbeat_interval_ms
        if member.state is MemberState.UNRELEASED_PARTITIONS and group.waits_on_unreleased(member):
            return min(self.config.unreleased_heartbeat_interval_ms, interval)
        if member.member_id == group.first_giver():
            return min(self.config.first_giver_heartbeat_interval_ms, interval)
        return interval

    def _update_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        topics: TopicSnapshot,
        owned: tuple[TopicPartitions, ...] | None,
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember]:
        """Kafka's steps of a heartbeat (or of a classic member's JoinGroup): persist the member
        if it changed (a changed subscription bumps the group epoch), recompute the target
        assignment once the group epoch moved past it, then move the member one step towards
        its target given the partitions it reports owning (`owned`). Answers the member
        before and after that step."""
        gid = group.group_id
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

        current = before = group.members[updated.member_id]
        if not current.is_reconciled_to(group.assignment_epoch):
            current = reconcile(
                current,
                group.assignment_epoch,
                group.target.get(current.member_id, {}),
                # Its own partitions do not block it.
                {tp: e for tp, e in group.partition_epochs().items() if tp not in current.held()},
                owned,
            )
            if current != before:
                self._write_current(gid, current)
        return before, current

    # ---- online migration ----

    def _downgrade(self, group: ConsumerGroup, leaving_id: str, protocol: str, topics: TopicSnapshot) -> None:
        """Kafka's convertToClassicGroup: tombstones for every record of the group, then the
        group metadata record of the classic group of the remaining members, which the caller
        hosts and rebalances."""
        gid = group.group_id
        record = downgraded_group_record(group, leaving_id, protocol, topics, self._wall_clock_ms())
        ids = list(group.members)
        # Kafka's createGroupTombstoneRecords order.
        for kind in (CURRENT_MEMBER_ASSIGNMENT_KEY, TARGET_ASSIGNMENT_MEMBER_KEY):
            for mid in ids:
                self._tombstone(gid, kind, mid)
        self._tombstone(gid, TARGET_ASSIGNMENT_METADATA_KEY)
        for mid in ids:
            self._tombstone(gid, MEMBER_METADATA_KEY, mid)
            self._deadlines.pop((gid, mid), None)
        self._tombstone(gid, PARTITION_METADATA_KEY)
        self._tombstone(gid, GROUP_METADATA_KEY)
        self._emit(record)  # not a consumer group record: replaying it changes nothing here
        self._downgraded.append(record)

    def _replayed(self, group_id: str, records: Iterable[Record]) -> ConsumerGroup:
        scratch = ConsumerGroups(self.config)
        for key, value in records:
            scratch.replay(key, value)
        return scratch.groups[group_id]

    def _maybe_update_subscription_metadata(self, group: ConsumerGroup, topics: TopicSnapshot) -> bool:
        names = group.subscribed_topics(topics)
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

    # ---- classic members (JoinGroup, SyncGroup, Heartbeat, LeaveGroup to a consumer group) ----

    def classic_join(
        self, request: ClassicJoinRequest, topics: TopicSnapshot, now_ms: int
    ) -> tuple[JoinResult, tuple[Record, ...]]:
        """A JoinGroup to this consumer group, which has members (Kafka's
        classicGroupJoinToConsumerGroup): the member joins or rejoins as a classic member, its
        subscription and owned partitions read from its first protocol's metadata, and is
        reconciled like a consumer member. It is answered at once, with its member epoch as
        the generation, no leader and no member list: its assignment comes with SyncGroup."""

        def failed(fail: _Fail) -> JoinResult:
            return JoinResult(fail.code, member_id=request.member_id)

        result, records, _ = self._collect(lambda: self._classic_join(request, topics, now_ms), failed)
        return result, records

    def _classic_join(self, request: ClassicJoinRequest, topics: TopicSnapshot, now_ms: int) -> JoinResult:
        gid = request.group_id
        group = self.groups[gid]
        member_id = request.member_id or self._new_member_id()
        self._check_size(group, member_id)
        names = [name for name, _ in request.protocols]
        if not group.supports_classic_protocols(request.protocol_type, names):
            raise _Fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if not request.member_id and request.instance_id is None and request.require_known_member_id:
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except ValueError:
            # Kafka fails such a join with an IllegalStateException, i.e. UNKNOWN_SERVER_ERROR.
            raise _Fail(ErrorCode.UNKNOWN_SERVER_ERROR, "Malformed embedded consumer protocol.") from None
        joining = request.instance_id is None or not request.member_id
        member, replaced = self._find_member(group, member_id, request.instance_id, joining, None)
        # Nothing can fail from here on.
        if replaced is not None:
            self._replace_member(group, replaced, member)
        updated = _updated(
            member,
            request.instance_id,
            subscription.rack_id,
            request.rebalance_timeout_ms,
            request.client_id,
            request.client_host,
            subscribed_topic_names=subscription.topics,
            classic=ClassicMemberMetadata(request.session_timeout_ms, request.protocols),
        )
        owned = _to_topic_partitions(partitions_by_id(subscription.owned_partitions, topics))
        _, current = self._update_member(group, member, updated, topics, owned)
        deadlines = self._deadlines.setdefault((gid, member_id), _Deadlines(0))
        deadlines.session_ms = now_ms + request.session_timeout_ms
        deadlines.join_ms = deadlines.rebalance = None
        deadlines.sync_ms = now_ms + request.rebalance_timeout_ms
        return JoinResult(ErrorCode.NONE, current.member_epoch, CONSUMER_PROTOCOL_TYPE, names[0], "", member_id)

    def classic_sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        topics: TopicSnapshot,
        now_ms: int,
    ) -> SyncResult:
        """A classic member's SyncGroup (Kafka's classicGroupSyncToConsumerGroup): its current
        assignment as a ConsumerProtocol Assignment, or REBALANCE_IN_PROGRESS when the group
        moved on since it joined (it must rejoin), or Kafka's member errors."""
        try:
            group, member = self._classic_member(group_id, member_id, instance_id, generation_id)
            assert member.classic is not None
            name, metadata = member.classic.protocols[0]
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != name
            ):
                raise _Fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id} joined with protocol {name}.")
            deadlines = self._deadlines.setdefault((group_id, member.member_id), _Deadlines(0))
            # A member revoking partitions has rejoined already; it syncs, revokes, then rejoins.
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                deadlines.must_rejoin(now_ms + member.rebalance_timeout_ms)
                raise _Fail(ErrorCode.REBALANCE_IN_PROGRESS, f"Group {group_id} moved on: rejoin.")
        except _Fail as fail:
            return SyncResult(fail.code)
        deadlines.sync_ms = None
        deadlines.session_ms = now_ms + self._session_ms(member)
        return SyncResult(
            ErrorCode.NONE, protocol_type, protocol_name, classic_assignment(member.assigned, topics, metadata)
        )

    def classic_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int, now_ms: int
    ) -> ErrorCode:
        """A classic member's Heartbeat (Kafka's classicGroupHeartbeatToConsumerGroup): keeps its
        session; REBALANCE_IN_PROGRESS (rejoin within the rebalance timeout) when the group
        epoch moved past its epoch, when it must revoke partitions, or when partitions it
        waited for were released."""
        try:
            group, member = self._classic_member(group_id, member_id, instance_id, generation_id)
        except _Fail as fail:
            return fail.code
        deadlines = self._deadlines.setdefault((group_id, member.member_id), _Deadlines(0))
        deadlines.session_ms = now_ms + self._session_ms(member)
        if (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waits_on_unreleased(member))
        ):
            deadlines.must_rejoin(now_ms + member.rebalance_timeout_ms)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _classic_member(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> tuple[ConsumerGroup, ConsumerGroupMember]:
        """Kafka's validateConsumerGroupMember, then: it uses the classic protocol, at that generation."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} has no members.")
        member = self._named_member(group, member_id, instance_id)
        if member.classic is None:
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        if generation_id != member.member_epoch:
            raise _Fail(
                ErrorCode.ILLEGAL_GENERATION,
                f"The generation id {generation_id} is not the member epoch {member.member_epoch} of {member_id}.",
            )
        return group, member

    @staticmethod
    def _named_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        """The member a classic request names: by instance id if it has one (whose member id, if
        given, must be the holder's), else by member id."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
            return member
        member = group.static_member(instance_id)
        if member is None:
            raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member_id and member.member_id != member_id:
            raise _Fail(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {instance_id} is owned by another member.")
        return member

    def classic_leave(
        self, group_id: str, members: Sequence[MemberIdentity], topics: TopicSnapshot
    ) -> tuple[LeaveGroupResult, tuple[Record, ...]]:
        """LeaveGroup of classic members (Kafka's classicGroupLeaveToConsumerGroup): each named
        member (by instance id alone: an administrator's removal) is removed, and the group epoch
        bumps once; each answered on its own (UNKNOWN_MEMBER_ID for a consumer-protocol member)."""

        def leave() -> LeaveGroupResult:
            group = self.groups[group_id]
            answers = []
            for identity in members:
                try:
                    member = self._named_member(group, identity.member_id, identity.group_instance_id)
                    if member.classic is None:
                        raise _Fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} is not a classic member.")
                except _Fail as fail:
                    answers.append(MemberLeaveResult(identity.member_id, identity.group_instance_id, fail.code))
                    continue
                self._remove_member(group_id, member.member_id)
                answers.append(MemberLeaveResult(member.member_id, identity.group_instance_id, ErrorCode.NONE))
            if self._out:
                self._maybe_update_subscription_metadata(group, topics)
                self._write(group_id, GroupMetadataValue(group.group_epoch + 1))
            return LeaveGroupResult(ErrorCode.NONE, tuple(answers))

        result, records, _ = self._collect(leave, lambda fail: LeaveGroupResult(fail.code))
        return result, records

    # ---- leaving, fencing, timers ----

    def _leave(self, request: HeartbeatRequest, topics: TopicSnapshot, now_ms: int) -> HeartbeatResult:
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
        protocol = downgrade_protocol(group, member_id, self.config.migration_policy)
        if protocol is not None:
            self._downgrade(group, member_id, protocol, topics)
            return
        self._remove_member(group.group_id, member_id)
        self._maybe_update_subscription_metadata(group, topics)
        # The next heartbeat of any member computes the new target assignment.
        self._write(group.group_id, GroupMetadataValue(group.group_epoch + 1))

    def _session_ms(self, member: ConsumerGroupMember) -> int:
        return member.classic.session_timeout_ms if member.classic is not None else self.config.session_timeout_ms

    def on_loaded(self, now_ms: int) -> None:
        """After replaying a partition: every member gets a full session (and a pending
        revocation its rebalance timeout) from now, as Kafka schedules them on load."""
        self._deadlines.clear()
        for group in self.groups.values():
            for m in group.members.values():
                d = self._deadlines[(group.group_id, m.member_id)] = _Deadlines(now_ms + self._session_ms(m))
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    d.rebalance = (now_ms + m.rebalance_timeout_ms, m.member_epoch)

    def next_deadline_ms(self) -> int | None:
        return min((d.next_ms() for d in self._deadlines.values()), default=None)

    def expire(self, now_ms: int, topics: TopicSnapshot) -> ExpiryResult:
        """Fences members whose session expired, that did not revoke within their rebalance
        timeout, or (classic members) did not rejoin or sync in time; answers the records to
        append and the groups that became classic groups."""

        def fence_overdue() -> None:
            for (gid, mid), d in sorted(self._deadlines.items()):
                group = self.groups.get(gid)
                member = group.members.get(mid) if group is not None else None
                if group is None or member is None:
                    self._deadlines.pop((gid, mid), None)
                elif d.due(now_ms, member.member_epoch):
                    self._fence(group, mid, topics)

        _, records, downgraded = self._collect(fence_overdue, lambda fail: None)
        return ExpiryResult(records, downgraded)

    def delete_group(self, group_id: str) -> tuple[ErrorCode, list[Record]]:
        """DeleteGroups: only an empty group; tombstones for everything it wrote."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []

        def tombstones() -> None:
            for kind in (TARGET_ASSIGNMENT_METADATA_KEY, PARTITION_METADATA_KEY, GROUP_METADATA_KEY):
                self._tombstone(group_id, kind)

        _, records, _ = self._collect(tombstones, lambda fail: None)
        return ErrorCode.NONE, list(records)

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
                    m.classic is not None,
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
