"""The consumer-protocol (KIP-848) groups a coordinator serves (the consumer half of Kafka's
GroupMetadataManager, around `ConsumerGroups`): per loaded partition its groups and the
timer that fences their members at `next_deadline_ms()`, and the log writes of their calls.

Every call appends the records it returns and answers only once they are written; a failed
append reloads the partition (the in-memory groups are then ahead of the log), as Kafka
reverts its timeline.

Online migration as in Kafka 4 (group.consumer.migration.policy): a consumer heartbeat
joining a classic group with members upgrades it (the classic group's tombstone, then the
consumer group's records; members waiting in JoinGroup or SyncGroup are told
REBALANCE_IN_PROGRESS) or, where the policy or the group forbids it, gets
GROUP_ID_NOT_FOUND; a downgrade (the last consumer-protocol member left or was fenced) hands
the classic group record it wrote to the `ClassicGroupManager`, which hosts the group and
rebalances it. JoinGroup, SyncGroup, Heartbeat and LeaveGroup to a consumer group with
members are served here (the member is a classic member of the consumer group).

The caller (the `GroupCoordinator`) has checked that the group's partition is served here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from loglake.errors import ErrorCode
from loglake.groups.api import GroupState, JoinResult, LeaveGroupResult, MemberIdentity, SyncResult
from loglake.groups.classic_manager import ClassicGroupManager
from loglake.groups.consumer_group import (
    ClassicJoinRequest,
    ConsumerGroup,
    ConsumerGroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    Record,
    TopicSnapshot,
)
from loglake.groups.consumer_groups import ConsumerGroups
from loglake.groups.records import GroupMetadataKey, encode_key
from loglake.groups.runtime import BackgroundTasks, GroupLog, cancel
from loglake.internal_topics import PartitionLoads

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class ConsumerGroupManager:
    """`topics` answers the cluster's topics that consumer groups subscribe to and are
    assigned from; `reload` loads a partition again after a failed append; `timer_ms` is the
    monotonic clock of the members' session and rebalance timers."""

    def __init__(
        self,
        log: GroupLog,
        classic: ClassicGroupManager,
        partitions: PartitionLoads,
        topics: Callable[[], TopicSnapshot],
        timer_ms: Callable[[], int],
        tasks: BackgroundTasks,
        reload: Callable[[int], Awaitable[None]],
    ) -> None:
        self._log = log
        self._classic = classic
        self._partitions = partitions
        self._topics = topics
        self._timer_ms = timer_ms
        self._tasks = tasks
        self._reload = reload
        # Per loaded partition: its consumer-protocol groups and their expiry timer.
        self._groups: dict[int, ConsumerGroups] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}

    # ---------------------------------------------------------------- loading

    def load(self, partition: int, groups: ConsumerGroups) -> None:
        """Serve the groups replayed from `partition`: their members' timers start now."""
        self._groups[partition] = groups
        groups.on_loaded(self._timer_ms())
        self._schedule_expiry(partition)

    def unload(self, partition: int) -> None:
        self._groups.pop(partition, None)
        cancel(self._timers.pop(partition, None))

    # ---------------------------------------------------------------- lookups

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id, if its partition is loaded here and it is one."""
        groups = self._groups.get(self._log.partition_for(group_id))
        return None if groups is None else groups.groups.get(group_id)

    def all_groups(self) -> dict[str, ConsumerGroup]:
        return {gid: g for groups in self._groups.values() for gid, g in groups.groups.items()}

    def describe(self, group_id: str) -> ConsumerGroupDescription:
        return self._groups[self._log.partition_for(group_id)].describe(group_id, self._topics())

    # ---------------------------------------------------------------- ConsumerGroupHeartbeat

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: answered once the records it changed are in the log."""
        partition = self._log.partition_for(request.group_id)
        groups = self._groups[partition]
        classic = None if request.group_id in groups.groups else self._classic.group(request.group_id)
        # A classic group with members may be upgraded (or the member is refused).
        members = None if classic is None or classic.state is GroupState.EMPTY else self._classic.snapshot(classic)
        result = groups.heartbeat(request, self._topics(), self._timer_ms(), members)
        records = list(result.records)
        if classic is not None and result.error is ErrorCode.NONE and records:
            # The member created the consumer group: the classic group it replaces goes
            # (Kafka's tombstone; its offsets stay, held by a fresh Empty classic group).
            if classic.generation_id > 0:
                records.insert(0, (encode_key(GroupMetadataKey(request.group_id)), None))
            self._classic.retire(classic)
        if result.downgraded is not None:
            self._classic.host_downgraded(result.downgraded)
        error = await self._append(partition, records)
        if error is not ErrorCode.NONE:
            return HeartbeatResult(error)
        self._schedule_expiry(partition)
        return replace(result, records=())

    # ---------------------------------------------------------------- classic members

    async def classic_join(self, request: ClassicJoinRequest) -> JoinResult:
        return await self._call(
            request.group_id,
            lambda groups, topics, now: groups.classic_join(request, topics, now),
            lambda error: JoinResult(error, member_id=request.member_id),
        )

    async def classic_sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        return await self._call(
            group_id,
            lambda groups, topics, now: (
                groups.classic_sync(
                    group_id, member_id, group_instance_id, generation_id, protocol_type, protocol_name, topics, now
                ),
                (),
            ),
            SyncResult,
        )

    async def classic_heartbeat(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        return await self._call(
            group_id,
            lambda groups, topics, now: (
                groups.classic_heartbeat(group_id, member_id, group_instance_id, generation_id, now),
                (),
            ),
            lambda error: error,
        )

    async def classic_leave(self, group_id: str, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        return await self._call(
            group_id,
            lambda groups, topics, now: groups.classic_leave(group_id, members, topics),
            LeaveGroupResult,
        )

    async def _call(
        self,
        group_id: str,
        call: Callable[[ConsumerGroups, TopicSnapshot, int], tuple[_T, Sequence[Record]]],
        failed: Callable[[ErrorCode], _T],
    ) -> _T:
        """One classic member's request to the consumer group: its answer once the records it
        wrote are in the log (`failed(error)` if they could not be), its timers rescheduled."""
        partition = self._log.partition_for(group_id)
        result, records = call(self._groups[partition], self._topics(), self._timer_ms())
        error = await self._append(partition, list(records))
        self._schedule_expiry(partition)
        return result if error is ErrorCode.NONE else failed(error)

    # ---------------------------------------------------------------- deletion

    async def delete(self, group_id: str) -> ErrorCode:
        """Writes an Empty consumer group's tombstones (NON_EMPTY_GROUP if it has members)."""
        partition = self._log.partition_for(group_id)
        error, records = self._groups[partition].delete_group(group_id)
        if error is ErrorCode.NONE:
            error = await self._append(partition, records)
        return error

    async def delete_empty_groups(self) -> None:
        """Kafka's cleanupGroupMetadata for consumer groups: those without members whose
        offsets are all gone (expired or deleted) go."""
        for group_id in list(self.all_groups()):
            group = self.group(group_id)  # looked up again: the loop awaits
            holder = self._classic.group(group_id)
            if group is not None and not group.members and (holder is None or not holder.has_offsets()):
                error = await self.delete(group_id)
                if error is not ErrorCode.NONE:
                    log.warning("group %s: deleting the empty consumer group failed: %s", group_id, error.name)

    # ---------------------------------------------------------------- the log and timers

    async def _append(self, partition: int, records: list[Record]) -> ErrorCode:
        """Appends what a ConsumerGroups call returned. On failure the groups already hold
        state the log does not: the partition is loaded again before the caller answers, as
        Kafka reverts its timeline."""
        if not records:
            return ErrorCode.NONE
        error = await self._log.append(partition, records, for_offsets=False)
        if error is not ErrorCode.NONE and partition in self._partitions.owned:
            log.warning(
                "__consumer_offsets-%d: consumer group records not written (%s), reloading", partition, error.name
            )
            try:
                await self._reload(partition)
            except Exception:  # the broker's next leadership change loads it again
                log.exception("reloading __consumer_offsets-%d failed", partition)
        return error

    def _schedule_expiry(self, partition: int) -> None:
        cancel(self._timers.pop(partition, None))
        groups = self._groups.get(partition)
        deadline = None if groups is None else groups.next_deadline_ms()
        if deadline is not None:
            delay = max(deadline - self._timer_ms(), 0) / 1000
            self._timers[partition] = asyncio.get_running_loop().call_later(delay, self._on_deadline, partition)

    def _on_deadline(self, partition: int) -> None:
        self._timers.pop(partition, None)
        groups = self._groups.get(partition)
        if groups is None:
            return
        expired = groups.expire(self._timer_ms(), self._topics())
        for record in expired.downgraded:
            self._classic.host_downgraded(record)
        records = list(expired.records)
        if records:
            self._tasks.spawn(self._append_expired(partition, records))
        self._schedule_expiry(partition)

    async def _append_expired(self, partition: int, records: list[Record]) -> None:
        error = await self._append(partition, records)
        if error is not ErrorCode.NONE:
            log.warning("__consumer_offsets-%d: fencing expired members failed: %s", partition, error.name)
