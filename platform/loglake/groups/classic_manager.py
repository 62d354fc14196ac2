"""Classic group membership (the classic half of Kafka's GroupMetadataManager): JoinGroup,
SyncGroup, Heartbeat and LeaveGroup of classic groups, their rebalances and timers, and
their group metadata records.

A JoinGroup or SyncGroup call waits (awaits) until the rebalance step it belongs to
completes, exactly when Kafka would answer it; timers are `loop.call_later` handles, so it
must be used from one running event loop. Cancelling a waiting call (a client that went
away) does not change the group, as a dropped connection does not in Kafka; the member then
expires by its session or rebalance timeout.

Static members (KIP-345, `group.instance.id`) follow Kafka's rules: a restarted instance
rejoins under a new member id without a rebalance (when its protocols leave the group's
choice unchanged) and keeps its assignment; a request naming an instance id held by
another member id gets FENCED_INSTANCE_ID; a static member that has not rejoined is not
dropped at the end of a join phase, only when its session times out or it leaves.

The manager also holds the classic groups that only store offsets (an Empty group of the id
of a consumer-protocol group, or of "simple" commits), which `OffsetManager` fills, and the
classic side of online migration: a group retired by an upgrade, the classic group a
downgrade hosts. The caller (the `GroupCoordinator`) has checked that the group's partition
is served here and that the id is not a consumer-protocol group's.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

from loglake.errors import ErrorCode
from loglake.groups.api import (
    GroupDescription,
    GroupOverview,
    GroupState,
    JoinGroupMember,
    JoinResult,
    LeaveGroupResult,
    MemberDescription,
    MemberIdentity,
    MemberLeaveResult,
    SyncResult,
)
from loglake.groups.config import GroupConfig
from loglake.groups.consumer_group import ClassicGroupSnapshot, ClassicJoinRequest, ClassicMember, Record
from loglake.groups.group import GroupMetadata, MemberMetadata
from loglake.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    decode_group_metadata_value,
    decode_key,
    encode_group_metadata_value,
    encode_key,
)
from loglake.groups.runtime import BackgroundTasks, GroupLog, cancel, resolve

log = logging.getLogger(__name__)


class ClassicGroupManager:
    """The classic groups of the loaded partitions. `now_ms` is the coordinator's clock;
    writes nobody waits on run as `tasks`."""

    def __init__(self, config: GroupConfig, log: GroupLog, now_ms: Callable[[], int], tasks: BackgroundTasks) -> None:
        self._config = config
        self._log = log
        self._now_ms = now_ms
        self._tasks = tasks
        self._groups: dict[str, GroupMetadata] = {}

    # ---------------------------------------------------------------- the groups

    def group(self, group_id: str) -> GroupMetadata | None:
        return self._groups.get(group_id)

    def groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    def add_empty(self, group_id: str) -> GroupMetadata:
        """A new Empty group (its first commit or join)."""
        group = self._groups[group_id] = GroupMetadata(group_id, GroupState.EMPTY, self._now_ms())
        return group

    def discard(self, group: GroupMetadata) -> bool:
        """Stop serving a Dead group; False if another group of its id took its place meanwhile."""
        if self._groups.get(group.group_id) is not group:
            return False
        del self._groups[group.group_id]
        self._cancel_timers(group)
        return True

    def unload_partition(self, partition: int) -> None:
        """Its groups are no longer served here: their waiting requests get NOT_COORDINATOR."""
        for group_id in [g for g in self._groups if self._log.partition_for(g) == partition]:
            self._on_group_unloaded(self._groups.pop(group_id))

    def overviews(self, excluded: Iterable[str]) -> list[GroupOverview]:
        """ListGroups' view of the groups but `excluded` (those only holding a consumer group's offsets)."""
        skip = set(excluded)
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state)
            for g in self._groups.values()
            if g.group_id not in skip
        ]

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups of one classic group (Dead when unknown)."""
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.NONE, GroupState.DEAD.value)
        # Protocol, member metadata and assignments are only reported for a Stable group.
        protocol = group.protocol_name if group.state is GroupState.STABLE else None
        members = tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol) if protocol is not None else b"",
                m.assignment if protocol is not None else b"",
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id, ErrorCode.NONE, group.state.value, group.protocol_type or "", protocol or "", members
        )

    # ---------------------------------------------------------------- membership

    async def join(self, request: ClassicJoinRequest, supports_skip_assignment: bool) -> JoinResult:
        """JoinGroup (see `GroupCoordinator.join_group`); the session timeout is checked."""
        group_id, member_id = request.group_id, request.member_id
        protocols = list(request.protocols)
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.add_empty(group_id)
        if group.state is GroupState.DEAD:
            # Just deleted or unloaded: the client should look the coordinator up again.
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports_protocols(request.protocol_type, [name for name, _ in protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        new_member = _NewMember(
            request.instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocol_type,
        )
        outcome: JoinResult | asyncio.Future[JoinResult]
        if member_id:
            outcome = self._join_current_member(group, member_id, new_member, protocols)
        elif request.instance_id is not None:
            outcome = self._join_static_unknown_member(group, new_member, protocols, supports_skip_assignment)
        else:
            outcome = self._join_unknown_member(group, new_member, protocols, request.require_known_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        return outcome if isinstance(outcome, JoinResult) else await outcome

    async def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        """SyncGroup (see `GroupCoordinator.sync_group`)."""
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        member_error = group.member_error(member_id, group_instance_id)
        if member_error is not None:
            return SyncResult(member_error)
        member = group.members[member_id]
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            # Already synced (e.g. a retried SyncGroup): answer the current assignment.
            self._remove_pending_sync_member(group, member_id)
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignment.
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        superseded, member.awaiting_sync = member.awaiting_sync, future
        resolve(superseded, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self._remove_pending_sync_member(group, member_id)
        if group.leader_id == member_id:
            assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            self._tasks.spawn(self._store_assignment(group, generation_id, assignment))
        return await future

    def heartbeat(self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None) -> ErrorCode:
        """Heartbeat (see `GroupCoordinator.heartbeat`)."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        member_error = group.member_error(member_id, group_instance_id)
        if member_error is not None:
            return member_error
        member = group.members[member_id]
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        """LeaveGroup (see `GroupCoordinator.leave_group`)."""
        group = self._groups.get(group_id)
        if group is None:
            unknown = ErrorCode.UNKNOWN_MEMBER_ID
            return LeaveGroupResult(
                ErrorCode.NONE, tuple(MemberLeaveResult(m.member_id, m.group_instance_id, unknown) for m in members)
            )
        if group.state is GroupState.DEAD:
            return LeaveGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results = []
        for identity in members:
            member_error: ErrorCode | None = None
            if not identity.member_id:
                static_id = group.static_members.get(identity.group_instance_id or "")
                if static_id is None or identity.group_instance_id is None:
                    member_error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member_and_update_group(group, group.members[static_id])
            elif identity.member_id in group.pending_members:
                self._remove_pending_member(group, identity.member_id)
            else:
                member_error = group.member_error(identity.member_id, identity.group_instance_id)
                if member_error is None:
                    self._remove_member_and_update_group(group, group.members[identity.member_id])
            results.append(
                MemberLeaveResult(identity.member_id, identity.group_instance_id, member_error or ErrorCode.NONE)
            )
        return LeaveGroupResult(ErrorCode.NONE, tuple(results))

    def on_offset_commit(self, group: GroupMetadata, member_id: str) -> None:
        """A member's offset commit counts as a heartbeat; during PreparingRebalance the commit
        is still accepted, the next heartbeat tells the member to rejoin."""
        member = group.members.get(member_id)
        if member is not None and group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

    # ---------------------------------------------------------------- hosting and migration

    def host(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
        """The classic group its group metadata record describes, from now on served here (its
        members must heartbeat within their session); its offsets are the caller's business."""
        group = GroupMetadata(
            group_id,
            GroupState.STABLE if value.members else GroupState.EMPTY,
            None if value.current_state_timestamp == -1 else value.current_state_timestamp,
            generation_id=value.generation,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            member = MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                value.protocol_type,
                [(value.protocol or "", m.subscription)],
                assignment=m.assignment,
            )
            group.add(member, None)
        group.protocol_type = value.protocol_type or None  # "" is how Kafka writes "none"
        group.subscribed_topics = group.compute_subscribed_topics()
        self._groups[group_id] = group
        for member in group.members.values():
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        return group

    @staticmethod
    def snapshot(group: GroupMetadata) -> ClassicGroupSnapshot:
        members = tuple(
            ClassicMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                tuple(m.supported_protocols),
                m.assignment,
            )
            for m in group.members.values()
        )
        return ClassicGroupSnapshot(
            group.group_id, group.protocol_type or "", group.generation_id, group.protocol_name, members
        )

    def retire(self, classic: GroupMetadata) -> None:
        """A consumer group took `classic`'s place: members still waiting in JoinGroup or
        SyncGroup are told to rejoin (as Kafka's convertToConsumerGroup answers them), its
        timers stop, and a fresh Empty classic group holds its offsets (the same ones: a
        commit being written meanwhile lands there too)."""
        for member in classic.members.values():
            join_future, member.awaiting_join = member.awaiting_join, None
            resolve(join_future, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
            sync_future, member.awaiting_sync = member.awaiting_sync, None
            resolve(sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        holder = GroupMetadata(classic.group_id, GroupState.EMPTY, self._now_ms())
        holder.take_offsets_of(classic)
        classic.transition_to(GroupState.DEAD, self._now_ms())
        self._cancel_timers(classic)
        self._groups[classic.group_id] = holder

    def host_downgraded(self, record: Record) -> None:
        """Kafka's convertToClassicGroup, the classic side: the classic group of the record a
        downgrade wrote (Stable at the consumer group's epoch, its members assigned their
        target assignments) takes the place of the Empty group holding the offsets (the same
        ones), exactly as a coordinator loading that record would host it, and it rebalances
        at once."""
        key_bytes, value_bytes = record
        key = decode_key(key_bytes)
        assert isinstance(key, GroupMetadataKey) and value_bytes is not None
        holder = self._groups.get(key.group)
        group = self.host(key.group, decode_group_metadata_value(value_bytes))
        if holder is not None:
            group.take_offsets_of(holder)
            holder.transition_to(GroupState.DEAD, self._now_ms())
            self._cancel_timers(holder)
        self._prepare_rebalance(group)

    # ---------------------------------------------------------------- internals: join phase

    def _join_unknown_member(
        self, group: GroupMetadata, new: _NewMember, protocols: list[tuple[str, bytes]], require_known_member_id: bool
    ) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = new.member_id()
        if require_known_member_id:
            # The id is reserved until the member rejoins with it or its session timeout passes;
            # meanwhile it holds the rebalance back like a member that has not rejoined.
            group.pending_members.add(member_id)
            group.pending_member_timers[member_id] = asyncio.get_running_loop().call_later(
                new.session_timeout_ms / 1000, self._on_pending_member_expired, group, member_id
            )
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        return self._add_member_and_rebalance(group, member_id, new, protocols)

    def _join_static_unknown_member(
        self, group: GroupMetadata, new: _NewMember, protocols: list[tuple[str, bytes]], supports_skip_assignment: bool
    ) -> asyncio.Future[JoinResult]:
        assert new.group_instance_id is not None
        current_id = group.static_members.get(new.group_instance_id)
        if current_id is None:
            return self._add_member_and_rebalance(group, new.member_id(), new, protocols)
        return self._replace_static_member(group, group.members[current_id], new, protocols, supports_skip_assignment)

    def _replace_static_member(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        new: _NewMember,
        protocols: list[tuple[str, bytes]],
        supports_skip_assignment: bool,
    ) -> asyncio.Future[JoinResult]:
        """A known instance joins with no member id (it restarted): Kafka's
        updateStaticMemberAndRebalance. The old member id is fenced at once; in a Stable group
        whose protocol choice stays the same the new id is stored and answered with the
        current generation, without a rebalance."""
        # Requests the previous incarnation still has waiting are answered: it is fenced.
        join_future, member.awaiting_join = member.awaiting_join, None
        resolve(join_future, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member.member_id))
        sync_future, member.awaiting_sync = member.awaiting_sync, None
        resolve(sync_future, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        leader_before = group.leader_id
        previous = _StaticMemberState(
            member.supported_protocols, member.rebalance_timeout_ms, member.session_timeout_ms
        )
        old_member_id = group.replace_static_member(member, new.member_id())
        self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.update_member(member, protocols, new.rebalance_timeout_ms, new.session_timeout_ms, future)
        if group.state is GroupState.STABLE:
            if group.select_protocol() == group.protocol_name:
                self._tasks.spawn(
                    self._store_replaced_static_member(
                        group, member, old_member_id, leader_before, previous, future, supports_skip_assignment
                    )
                )
            else:
                self._maybe_prepare_rebalance(group)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: start over.
            self._prepare_rebalance(group)
        # PreparingRebalance: the member simply waits for the join phase to end.
        return future

    async def _store_replaced_static_member(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        old_member_id: str,
        leader_before: str | None,
        previous: _StaticMemberState,
        future: asyncio.Future[JoinResult],
        supports_skip_assignment: bool,
    ) -> None:
        error = await self._store_group(group, {m.member_id: m.assignment for m in group.members.values()})
        if member.awaiting_join is not future:
            return  # fenced again, or answered by a rebalance, while the log wrote
        member.awaiting_join = None
        if error is not ErrorCode.NONE:
            # The new member id is not durable: give the instance its old id back.
            log.warning("group %s: storing static member %s failed: %s", group.group_id, member.member_id, error.name)
            group.update_member(
                member, previous.protocols, previous.rebalance_timeout_ms, previous.session_timeout_ms, None
            )
            group.replace_static_member(member, old_member_id)
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
            resolve(
                future,
                JoinResult(
                    error, group.generation_id, group.protocol_type, group.protocol_name, leader_before or "", ""
                ),
            )
            return
        if supports_skip_assignment:
            # v9: the leader learns it leads but keeps the current assignment (no assignor run).
            result = self._join_result(group, member)
            resolve(future, replace(result, skip_assignment=result.leader == member.member_id))
            return
        # Before v9 the old leader id is answered, so a restarted leader does not assign
        # (a Stable group would not hand out its new assignment anyway).
        resolve(
            future,
            JoinResult(
                ErrorCode.NONE,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                leader_before or "",
                member.member_id,
            ),
        )

    def _join_current_member(
        self, group: GroupMetadata, member_id: str, new: _NewMember, protocols: list[tuple[str, bytes]]
    ) -> JoinResult | asyncio.Future[JoinResult]:
        if member_id in group.pending_members:
            if new.group_instance_id is not None:
                # Pending ids are only handed to dynamic members (Kafka fails with an internal
                # error here): make the client start over.
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            cancel(group.pending_member_timers.pop(member_id, None))
            return self._add_member_and_rebalance(group, member_id, new, protocols)
        member_error = group.member_error(member_id, new.group_instance_id)
        if member_error is not None:
            return JoinResult(member_error, member_id=member_id)
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        unchanged = member.matches(protocols)
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # It probably lost the JoinGroup answer: send this generation's again.
            return self._join_result(group, member)
        if group.state is GroupState.STABLE and unchanged and group.leader_id != member_id:
            # A follower with nothing new rejoins without disturbing the group. (The leader
            # always triggers a rebalance: that is how it asks for a new assignment.)
            return self._join_result(group, member)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        superseded = group.update_member(member, protocols, new.rebalance_timeout_ms, new.session_timeout_ms, future)
        # Kafka drops a superseded JoinGroup unanswered; answer it so nothing waits forever.
        resolve(superseded, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member_id))
        self._maybe_prepare_rebalance(group)
        return future

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, new: _NewMember, protocols: list[tuple[str, bytes]]
    ) -> asyncio.Future[JoinResult]:
        member = MemberMetadata(
            member_id,
            new.group_instance_id,
            new.client_id,
            new.client_host,
            new.rebalance_timeout_ms,
            new.session_timeout_ms,
            new.protocol_type,
            protocols,
            is_new=True,
        )
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True  # extends the initial delayed join
        group.add(member, future)
        self._schedule_heartbeat_expiration(group, member, self._config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group)
        return future

    def _maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Members waiting in SyncGroup must rejoin instead.
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        cancel(group.sync_timer)
        group.sync_timer = None
        loop = asyncio.get_running_loop()
        if group.state is GroupState.EMPTY:
            # First join of an empty group: wait group.initial.rebalance.delay.ms for others,
            # longer while more keep arriving, up to the rebalance timeout in all.
            delay = self._config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.join_is_initial = True
            group.join_timer = loop.call_later(delay / 1000, self._on_initial_join_expired, group, remaining)
        else:
            group.join_is_initial = False
            group.join_timer = loop.call_later(group.rebalance_timeout_ms / 1000, self._complete_join, group)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now_ms())
        self._try_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        # The initial delayed join always waits its delay out.
        if group.join_timer is not None and not group.join_is_initial and group.has_all_members_joined():
            group.join_timer.cancel()
            self._complete_join(group)

    def _on_initial_join_expired(self, group: GroupMetadata, remaining_ms: int) -> None:
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self._config.group_initial_rebalance_delay_ms, remaining_ms)
            group.join_timer = asyncio.get_running_loop().call_later(
                delay / 1000, self._on_initial_join_expired, group, remaining_ms - delay
            )
        else:
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """End of the join phase (Kafka's onCompleteJoin): drop members that did not rejoin,
        start the next generation and answer every waiting JoinGroup."""
        group.join_timer = None
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        # Static members that did not rejoin stay (their session timeout decides); others go.
        for member in [m for m in group.members.values() if m.awaiting_join is None and m.group_instance_id is None]:
            group.remove(member.member_id)
            cancel(member.heartbeat_timer)
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined: wait another rebalance timeout.
            group.join_is_initial = False
            group.join_timer = asyncio.get_running_loop().call_later(
                group.rebalance_timeout_ms / 1000, self._complete_join, group
            )
            return
        now = self._now_ms()
        group.init_next_generation(now)
        if group.state is GroupState.EMPTY:
            self._tasks.spawn(self._store_group_logged(group, {}))
            return
        for member in group.members.values():
            future, member.awaiting_join = member.awaiting_join, None
            resolve(future, self._join_result(group, member))
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        # Members that never send SyncGroup are removed after the rebalance timeout.
        group.sync_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms / 1000, self._on_sync_expired, group, group.generation_id
        )

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        members: tuple[JoinGroupMember, ...] = ()
        if group.leader_id == member.member_id and group.protocol_name is not None:
            protocol = group.protocol_name
            members = tuple(
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.NONE,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            member.member_id,
            members,
        )

    # ---------------------------------------------------------------- internals: sync phase

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            cancel(group.sync_timer)
            group.sync_timer = None

    def _on_sync_expired(self, group: GroupMetadata, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        if group.pending_sync_members:
            for member_id in list(group.pending_sync_members):
                member = group.members.get(member_id)
                group.remove(member_id)
                if member is not None:
                    cancel(member.heartbeat_timer)
            self._prepare_rebalance(group)

    async def _store_assignment(self, group: GroupMetadata, generation_id: int, assignment: dict[str, bytes]) -> None:
        error = await self._store_group(group, assignment)
        # Members may have come or gone while the log wrote: only finish the generation it was for.
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation_id != generation_id:
            return
        if error is not ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group)
            return
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(GroupState.STABLE, self._now_ms())

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            future, member.awaiting_sync = member.awaiting_sync, None
            if future is None:
                continue
            resolve(
                future,
                SyncResult(
                    error,
                    group.protocol_type if ok else None,
                    group.protocol_name if ok else None,
                    member.assignment,
                ),
            )
            # Its session may have lapsed while it waited: start it afresh.
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)

    # ---------------------------------------------------------------- internals: expiry and removal

    def _schedule_heartbeat_expiration(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        cancel(member.heartbeat_timer)
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._on_heartbeat_expired, group, member
        )

    def _on_heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.state is GroupState.DEAD or group.members.get(member.member_id) is not member:
            return
        # A member waiting in JoinGroup or SyncGroup is alive by definition (the rebalance
        # and sync timeouts deal with it), unless it is new and never completed a join.
        if member.is_new or (member.awaiting_join is None and member.awaiting_sync is None):
            log.info("group %s: member %s session expired", group.group_id, member.member_id)
            self._remove_member_and_update_group(group, member)

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_member_timers.pop(member_id, None)
        if member_id in group.pending_members:
            self._remove_pending_member(group, member_id)

    def _remove_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_members.discard(member_id)
        cancel(group.pending_member_timers.pop(member_id, None))
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        # A new member can time out while its JoinGroup waits: tell it to join again.
        join_future, member.awaiting_join = member.awaiting_join, None
        resolve(join_future, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
        # Kafka leaves a departing member's SyncGroup unanswered; answer it rather than hang.
        sync_future, member.awaiting_sync = member.awaiting_sync, None
        resolve(sync_future, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD, self._now_ms())
        for member in group.members.values():
            join_future, member.awaiting_join = member.awaiting_join, None
            sync_future, member.awaiting_sync = member.awaiting_sync, None
            if previous is GroupState.PREPARING_REBALANCE:
                resolve(join_future, JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
            resolve(sync_future, SyncResult(ErrorCode.NOT_COORDINATOR))
        self._cancel_timers(group)

    def _cancel_timers(self, group: GroupMetadata) -> None:
        cancel(group.join_timer)
        cancel(group.sync_timer)
        group.join_timer = group.sync_timer = None
        for timer in group.pending_member_timers.values():
            timer.cancel()
        group.pending_member_timers.clear()
        for member in group.members.values():
            cancel(member.heartbeat_timer)
            member.heartbeat_timer = None

    # ---------------------------------------------------------------- internals: persistence

    async def _store_group(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> ErrorCode:
        if self._groups.get(group.group_id) is not group:
            # Converted into a consumer group (or unloaded) meanwhile: its record must not
            # follow the conversion's in the log.
            return ErrorCode.NOT_COORDINATOR
        protocol = group.protocol_name
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=-1 if group.current_state_timestamp is None else group.current_state_timestamp,
            members=tuple(
                MemberMetadataValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(protocol) if protocol is not None else b"",
                    assignment.get(m.member_id, b""),
                )
                for m in group.members.values()
            ),
        )
        record = (encode_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value))
        return await self._log.append(self._log.partition_for(group.group_id), [record], for_offsets=False)

    async def _store_group_logged(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> None:
        # Nobody waits on this write (a group that just became Empty); a failure is only logged.
        error = await self._store_group(group, assignment)
        if error is not ErrorCode.NONE:
            log.warning("group %s: storing metadata failed with %s", group.group_id, error.name)


@dataclass(frozen=True)
class _NewMember:
    """The JoinGroup fields that describe the joining client."""

    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str

    def member_id(self) -> str:
        """A fresh member id: the instance id (else the client id), a dash, a UUID, as Kafka."""
        return f"{self.group_instance_id or self.client_id}-{uuid.uuid4()}"


@dataclass(frozen=True)
class _StaticMemberState:
    """What a static member's rejoin changed, restored if storing the new member id fails."""

    protocols: list[tuple[str, bytes]]
    rebalance_timeout_ms: int
    session_timeout_ms: int
