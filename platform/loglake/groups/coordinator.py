"""Kafka's (classic) group coordinator over asyncio: membership, rebalances, committed offsets.

One `GroupCoordinator` per broker serves the groups whose `__consumer_offsets` partition
(`partition_for(group_id)`) it has loaded. The broker calls `load_partition` /
`unload_partition` as it gains or loses leadership of those partitions; requests for
any other group answer NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading).

A JoinGroup or SyncGroup call waits (awaits) until the rebalance step it belongs to
completes, exactly when Kafka would answer it; timers are `loop.call_later` handles,
so a coordinator must be used from one running event loop. Cancelling a waiting call
(a client that went away) does not change the group, as a dropped connection does not
in Kafka; the member then expires by its session or rebalance timeout.

Persistence goes through `OffsetsLog` (an `InternalTopicLog`): offsets and group metadata are appended as
records in Kafka's own formats (`loglake.groups.records`), and loading a partition
replays them (last value per key wins, a null value deletes).

Static members (KIP-345, `group.instance.id`) follow Kafka's rules: a restarted instance
rejoins under a new member id without a rebalance (when its protocols leave the group's
choice unchanged) and keeps its assignment; a request naming an instance id held by
another member id gets FENCED_INSTANCE_ID; a static member that has not rejoined is not
dropped at the end of a join phase, only when its session times out or it leaves.

Transactional offset commits (TxnOffsetCommit) are written as Kafka writes them: a batch
of the producer's transaction in the group's `__consumer_offsets` partition. They are held
per producer id and become the group's offsets only when the transaction's COMMIT marker
reaches that partition (`complete_txn`); an ABORT drops them. A coordinator loading the
partition replays them the same way, and keeps those whose transaction is still open.

Consumer-protocol (KIP-848) groups are hosted alongside: a group id is either a classic
group or a consumer group. The consumer groups of each loaded partition live in a
`ConsumerGroups` (`loglake.groups.consumer_group`), rebuilt from their records (key
versions 3-8) when the partition loads; ConsumerGroupHeartbeat appends the records it
returns and answers only once they are written, and a failed append reloads the partition
(the in-memory groups are then ahead of the log). A timer per partition fences members at
`next_deadline_ms()`. A consumer group's committed offsets are kept, as a classic group's
are, in an Empty `GroupMetadata` of the same id that only holds offsets. Empty groups
convert either way as in Kafka: a consumer heartbeat joining an Empty classic group writes
the classic group's tombstone, a JoinGroup to an Empty consumer group writes the consumer
group's tombstones.

Groups with members migrate online as in Kafka 4 (group.consumer.migration.policy):
JoinGroup, SyncGroup, Heartbeat and LeaveGroup to a consumer group with members are served
by its `ConsumerGroups` (the member is a classic member of the consumer group, whatever the
policy); a consumer heartbeat joining a classic group with members upgrades it (the classic
group's tombstone, then the consumer group's records; members waiting in JoinGroup or
SyncGroup are told REBALANCE_IN_PROGRESS) or, where the policy or the group forbids it,
gets GROUP_ID_NOT_FOUND; when the last consumer-protocol member of a consumer group leaves
or is fenced and classic members remain, the group is downgraded: its tombstones, then the
group metadata record of the classic group that takes its place and starts a rebalance.

Deliberately left out: group.max.size (classic), and the downgrade Kafka makes when a
classic static member replaces the last consumer-protocol member (the group then stays a
consumer group of classic members until its next conversion).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Coroutine, Iterable, Iterator, Mapping, Sequence, TypeVar

from loglake.errors import ErrorCode
from loglake.internal_topics import (
    OFFSETS_TOPIC,
    InternalTopicLog,
    PartitionLoads,
    TransactionalRecord,
    TransactionMarker,
    map_append_error,
    partition_for_key,
)
from loglake.groups.api import (
    CONSUMER_GROUP_TYPE,
    GroupDescription,
    GroupOverview,
    GroupState,
    JoinGroupMember,
    JoinResult,
    LeaveGroupResult,
    ListGroupsResult,
    MemberDescription,
    MemberIdentity,
    MemberLeaveResult,
    OffsetAndMetadata,
    OffsetCommitData,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionOffset,
    SyncResult,
    TopicPartition,
)
from loglake.groups.assignors import CONSUMER_PROTOCOL_TYPE
from loglake.groups.consumer_group import (
    ClassicGroupSnapshot,
    ClassicJoinRequest,
    ClassicMember,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupDescription,
    ConsumerGroups,
    HeartbeatRequest,
    HeartbeatResult,
    Record,
    TopicSnapshot,
    validate_offset_commit,
    validate_offset_fetch,
)
from loglake.groups.group import GroupMetadata, MemberMetadata
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

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The group coordinator's name for its InternalTopicLog over __consumer_offsets.
OffsetsLog = InternalTopicLog
# The newest OffsetCommit version (v9 carries KIP-848 member epochs); callers outside the
# Kafka protocol (the HTTP consumer, offset resets) commit as it.
LATEST_OFFSET_COMMIT_VERSION = 9


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the coordinator uses, with Kafka's defaults."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (a constant there).
    new_member_join_timeout_ms: int = 300_000
    # The group.consumer.* settings of consumer-protocol (KIP-848) groups.
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> GroupConfig:
        """From server.properties names; offsets.retention.minutes as Kafka reads it."""
        base = cls()

        def get(name: str, default: int) -> int:
            return int(props[name]) if name in props else default

        retention_ms = base.offsets_retention_ms
        if "offsets.retention.minutes" in props:
            retention_ms = int(props["offsets.retention.minutes"]) * 60_000
        return cls(
            group_min_session_timeout_ms=get("group.min.session.timeout.ms", base.group_min_session_timeout_ms),
            group_max_session_timeout_ms=get("group.max.session.timeout.ms", base.group_max_session_timeout_ms),
            group_initial_rebalance_delay_ms=get(
                "group.initial.rebalance.delay.ms", base.group_initial_rebalance_delay_ms
            ),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions", base.offsets_topic_num_partitions),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes", base.offset_metadata_max_bytes),
            offsets_retention_ms=retention_ms,
            offsets_retention_check_interval_ms=get(
                "offsets.retention.check.interval.ms", base.offsets_retention_check_interval_ms
            ),
            consumer=ConsumerGroupConfig.from_properties(props),
        )


def _utf16_length(s: str) -> int:
    # Kafka bounds metadata by Java's String.length(), i.e. UTF-16 code units, not bytes.
    return len(s.encode("utf-16-le")) // 2


def offsets_partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition holding a group: abs(hashCode) % partitions, as Kafka."""
    return partition_for_key(group_id, num_partitions)


class GroupCoordinator:
    """Serves the groups of the `__consumer_offsets` partitions it has loaded.

    Active from construction; `start()` only adds the periodic offset expiry, `stop()`
    unloads everything and answers later requests COORDINATOR_NOT_AVAILABLE.
    `clock` returns seconds (like time.time); timestamps are in ms from it. `topics`
    answers the cluster's topics (name -> (topic id, partition count)) that consumer groups
    subscribe to and are assigned from.
    """

    def __init__(
        self,
        config: GroupConfig,
        offsets_log: InternalTopicLog,
        clock: Callable[[], float] = time.time,
        topics: Callable[[], TopicSnapshot] = dict,
    ) -> None:
        self._config = config
        self._log = offsets_log
        self._clock = clock
        self._topics = topics
        self._groups: dict[str, GroupMetadata] = {}
        # Per loaded partition: its consumer-protocol groups and their expiry timer.
        self._consumer_groups: dict[int, ConsumerGroups] = {}
        self._consumer_timers: dict[int, asyncio.TimerHandle] = {}
        self._partitions = PartitionLoads(OFFSETS_TOPIC)
        self._active = True
        self._tasks: set[asyncio.Task[None]] = set()
        self._expiry_task: asyncio.Task[None] | None = None
        # Producer id -> group id -> offsets of its open transaction (TxnOffsetCommit).
        self._pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetCommitData]]] = {}
        # Offset commits being written (write id -> group id and partitions), and a condition
        # notified as each ends: a stable OffsetFetch waits for those in flight when it came.
        self._commits_in_flight: dict[int, tuple[str, frozenset[TopicPartition]]] = {}
        self._commit_write_ids = itertools.count()
        self._commit_writes = asyncio.Condition()

    # ---------------------------------------------------------------- lifecycle

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group: abs(hashCode) % partitions, as Kafka."""
        return offsets_partition_for(group_id, self._config.offsets_topic_num_partitions)

    async def start(self) -> None:
        """Start expiring offsets every offsets.retention.check.interval.ms."""
        if self._expiry_task is None:
            self._expiry_task = asyncio.get_running_loop().create_task(self._expire_periodically())

    async def stop(self) -> None:
        """Stop the expiry task, unload every partition and refuse further requests."""
        self._active = False
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            await asyncio.gather(self._expiry_task, return_exceptions=True)
            self._expiry_task = None
        for partition in sorted(self._partitions.all()):
            self.unload_partition(partition)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def load_partition(self, partition: int, leader_epoch: int = 0) -> None:
        """Become coordinator for the groups of `partition`: replay it, then serve them
        (`leader_epoch` is not needed: group records carry no coordinator epoch).

        Meanwhile their requests answer COORDINATOR_LOAD_IN_PROGRESS. An unload during
        the replay abandons it. A record that does not decode is logged and skipped (one bad
        record must not take every group of the partition offline); errors reading the log
        propagate, leaving the partition unowned.
        """
        offsets: dict[tuple[str, TopicPartition], OffsetCommitValue] = {}
        groups: dict[str, GroupMetadataValue] = {}
        consumer_groups = ConsumerGroups(self._config.consumer)
        # Producer id -> the offset records of its transaction, until its marker.
        open_txns: dict[int, list[tuple[bytes, bytes | None]]] = {}

        def apply(key_bytes: bytes, value_bytes: bytes | None) -> None:
            key = decode_key(key_bytes)
            if key is None:
                # Key versions 3-8: a consumer group's records (other unknown ones are skipped).
                consumer_groups.replay(key_bytes, value_bytes)
            elif isinstance(key, OffsetCommitKey):
                tp_key = (key.group, TopicPartition(key.topic, key.partition))
                if value_bytes is None:
                    offsets.pop(tp_key, None)
                else:
                    offsets[tp_key] = decode_offset_commit_value(value_bytes)
            elif isinstance(key, GroupMetadataKey):
                if value_bytes is None:
                    groups.pop(key.group, None)
                else:
                    groups[key.group] = decode_group_metadata_value(value_bytes)

        def on_transaction(entry: TransactionalRecord | TransactionMarker) -> None:
            if isinstance(entry, TransactionalRecord):
                open_txns.setdefault(entry.producer_id, []).append((entry.key, entry.value))
                return
            committed = open_txns.pop(entry.producer_id, [])
            if entry.commit:
                for key_bytes, value_bytes in committed:
                    apply(key_bytes, value_bytes)

        if await self._partitions.load(partition, self._log, apply, on_transaction):
            self._install_loaded(groups, offsets)
            self._hold_open_txn_offsets(open_txns)
            self._consumer_groups[partition] = consumer_groups
            consumer_groups.on_loaded(self.now_ms())
            self._schedule_consumer_expiry(partition)
            self._partitions.mark_owned(partition)

    def _hold_open_txn_offsets(self, open_txns: dict[int, list[tuple[bytes, bytes | None]]]) -> None:
        """Transactional offsets whose transaction has no marker yet: held until it comes."""
        for producer_id, records in open_txns.items():
            for key_bytes, value_bytes in records:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetCommitKey) and value_bytes is not None:
                    value = decode_offset_commit_value(value_bytes)
                    data = OffsetCommitData(
                        value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp
                    )
                    tp = TopicPartition(key.topic, key.partition)
                    self._pending_txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})[tp] = data

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating the groups of `partition`; their waiting requests get NOT_COORDINATOR."""
        self._partitions.unload(partition)
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            self._on_group_unloaded(self._groups.pop(group_id))
        self._consumer_groups.pop(partition, None)
        _cancel(self._consumer_timers.pop(partition, None))

    # ---------------------------------------------------------------- membership

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        *,
        group_instance_id: str | None = None,
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = False,
    ) -> JoinResult:
        """JoinGroup. `member_id` "" for a new member; `protocols` as (name, metadata) in
        preference order. `require_known_member_id` is JoinGroup v4+: a new dynamic member
        first gets MEMBER_ID_REQUIRED with its id and must join again with it (a static one,
        with `group_instance_id`, joins at once). `supports_skip_assignment` is JoinGroup v9.
        v0 requests pass their session timeout as `rebalance_timeout_ms`.
        """
        error = self._validate(group_id)
        if error is not None:
            return JoinResult(error, member_id=member_id)
        if not (
            self._config.group_min_session_timeout_ms <= session_timeout_ms <= self._config.group_max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                # It joins the consumer group as a classic member (whatever the migration policy).
                request = ClassicJoinRequest(
                    group_id,
                    member_id,
                    group_instance_id,
                    client_id,
                    client_host,
                    session_timeout_ms,
                    rebalance_timeout_ms,
                    protocol_type,
                    tuple(protocols),
                    require_known_member_id,
                )
                return await self._join_consumer_group(request)
            # An Empty consumer group becomes a classic one, as Kafka converts it.
            error = await self._delete_consumer_group(group_id)
            if error is not ErrorCode.NONE:
                return JoinResult(error, member_id=member_id)
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = GroupMetadata(group_id, GroupState.EMPTY, self.now_ms())
            self._groups[group_id] = group
        if group.state is GroupState.DEAD:
            # Just deleted or unloaded: the client should look the coordinator up again.
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        new_member = _NewMember(
            group_instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type
        )
        outcome: JoinResult | asyncio.Future[JoinResult]
        if member_id:
            outcome = self._join_current_member(group, member_id, new_member, protocols)
        elif group_instance_id is not None:
            outcome = self._join_static_unknown_member(group, new_member, protocols, supports_skip_assignment)
        else:
            outcome = self._join_unknown_member(group, new_member, protocols, require_known_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        return outcome if isinstance(outcome, JoinResult) else await outcome

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        """SyncGroup. The leader passes every member's assignment (missing ones get b"");
        the others pass {}. Waits until the leader's assignment is stored.
        `protocol_type` / `protocol_name` are SyncGroup v5's optional checks.
        """
        error = self._validate(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance's state was lost with the old coordinator: make the member rejoin.
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if error is not None:
            return SyncResult(error)
        if self._consumer_group(group_id) is not None:
            partition = self.partition_for(group_id)
            result = self._consumer_groups[partition].classic_sync(
                group_id,
                member_id,
                group_instance_id,
                generation_id,
                protocol_type,
                protocol_name,
                self._topics(),
                self.now_ms(),
            )
            self._schedule_consumer_expiry(partition)
            return result
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
        _resolve(superseded, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self._remove_pending_sync_member(group, member_id)
        if group.leader_id == member_id:
            assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
            self._spawn(self._store_assignment(group, generation_id, assignment))
        return await future

    async def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, *, group_instance_id: str | None = None
    ) -> ErrorCode:
        """Heartbeat: keeps the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
        error = self._validate(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # the group is still loading: answer blindly, as Kafka does
        if error is not None:
            return error
        if self._consumer_group(group_id) is not None:
            partition = self.partition_for(group_id)
            error = self._consumer_groups[partition].classic_heartbeat(
                group_id, member_id, group_instance_id, generation_id, self.now_ms()
            )
            self._schedule_consumer_expiry(partition)
            return error
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

    async def leave_group(self, group_id: str, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        """LeaveGroup: v0-v2 name one member, v3+ a batch (each answered separately). A member
        named by instance id alone (member id "") is the static member holding it, which is
        how an administrator removes one."""
        error = self._validate(group_id)
        if error is not None:
            return LeaveGroupResult(error)
        if self._consumer_group(group_id) is not None:
            partition = self.partition_for(group_id)
            result, records = self._consumer_groups[partition].classic_leave(group_id, members, self._topics())
            error = await self._append_consumer_records(partition, list(records))
            self._schedule_consumer_expiry(partition)
            return result if error is ErrorCode.NONE else LeaveGroupResult(error)
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

    # ---------------------------------------------------------------- offsets

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommitData],
        *,
        group_instance_id: str | None = None,
        api_version: int = LATEST_OFFSET_COMMIT_VERSION,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit. Members of a group pass their id and generation (and instance id if
        static); a "simple" commit (generation -1) is allowed while the group has no members,
        and creates the group if needed. Durable in __consumer_offsets when it returns NONE.
        A consumer group's member passes its member epoch as `generation_id`, checked as
        Kafka checks it for the request's `api_version`.
        """
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            error = validate_offset_commit(consumer_group, member_id, generation_id, False, api_version)
            if error is not ErrorCode.NONE:
                return {tp: error for tp in offsets}
            generation_id = -1  # its offsets go to the Empty classic group that holds them
        group, error = self._group_to_commit(group_id, generation_id)
        if group is None:
            return {tp: error for tp in offsets}
        if consumer_group is None:
            error = self._validate_offset_commit(group, member_id, group_instance_id, generation_id)
            if error is not None:
                return {tp: error for tp in offsets}
        member = group.members.get(member_id)
        if member is not None and group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A commit counts as a heartbeat; during PreparingRebalance the commit is still
            # accepted, the next heartbeat tells the member to rejoin.
            self._schedule_heartbeat_expiration(group, member, member.session_timeout_ms)
        return await self._store_offsets(group, offsets)

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommitData],
        *,
        group_instance_id: str | None = None,
        api_version: int = LATEST_OFFSET_COMMIT_VERSION,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: write the offsets in the producer's transaction and hold them;
        its COMMIT marker makes them the group's (`complete_txn`). The transaction
        coordinator has checked the producer; the member and generation are checked as for
        OffsetCommit (generation -1: a producer outside the group, KIP-447's older clients)."""
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None and (generation_id >= 0 or member_id):
            error = validate_offset_commit(consumer_group, member_id, generation_id, True, api_version)
            if error is not ErrorCode.NONE:
                return {tp: error for tp in offsets}
        group, error = self._group_to_commit(group_id, -1 if consumer_group is not None else generation_id)
        if group is None:
            return {tp: error for tp in offsets}
        if consumer_group is None and (generation_id >= 0 or member_id):
            error = self._validate_offset_commit(group, member_id, group_instance_id, generation_id)
            if error is not None:
                return {tp: error for tp in offsets}
        now = self.now_ms()
        max_length = self._config.offset_metadata_max_bytes
        valid = {
            tp: replace(data, commit_timestamp=now if data.commit_timestamp == -1 else data.commit_timestamp)
            for tp, data in offsets.items()
            if _utf16_length(data.metadata or "") <= max_length
        }
        if valid:
            records = [
                (
                    encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
                    encode_offset_commit_value(
                        OffsetCommitValue(
                            d.offset, d.leader_epoch, d.metadata or "", d.commit_timestamp, d.expire_timestamp
                        )
                    ),
                )
                for tp, d in valid.items()
            ]
            error = await self._append(
                self.partition_for(group_id), records, for_offsets=True, producer=(producer_id, producer_epoch)
            )
            if error is not ErrorCode.NONE:
                return {tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}
            self._pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(valid)
        return {tp: ErrorCode.NONE if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}

    def complete_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        """The producer's COMMIT/ABORT marker was written on `__consumer_offsets-partition`:
        its held offsets of the groups there become the groups' or are dropped."""
        by_group = self._pending_txn_offsets.get(producer_id, {})
        for group_id in [g for g in by_group if self.partition_for(g) == partition]:
            offsets = by_group.pop(group_id)
            group = self._groups.get(group_id)
            if commit and group is not None and group.state is not GroupState.DEAD:
                group.offsets.update(
                    (
                        tp,
                        OffsetAndMetadata(
                            d.offset, d.leader_epoch, d.metadata or "", d.commit_timestamp, d.expire_timestamp
                        ),
                    )
                    for tp, d in offsets.items()
                )
        if not by_group:
            self._pending_txn_offsets.pop(producer_id, None)

    def _group_to_commit(self, group_id: str, generation_id: int) -> tuple[GroupMetadata | None, ErrorCode]:
        """The group an offset commit goes to, created for a "simple" commit (generation
        -1); or None and why not."""
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return None, error
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A member of a generation this coordinator never had (e.g. an old one).
                return None, ErrorCode.ILLEGAL_GENERATION
            group = GroupMetadata(group_id, GroupState.EMPTY, self.now_ms())
            self._groups[group_id] = group
        return group, ErrorCode.NONE

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        member: tuple[str | None, int] | None = None,
    ) -> OffsetFetchResult:
        """OffsetFetch: the given partitions, or every committed one when `partitions` is None.

        Answered whatever the group's state (groups may use Kafka only to store offsets);
        a partition with no commit gets offset -1. With `require_stable` (v7+; clients
        reading committed data set it) it answers once the commits being written to those
        partitions are done, and UNSTABLE_OFFSET_COMMIT for a partition with offsets of an
        open transaction, as Kafka 4's coordinator. (Kafka's earlier one also answered
        UNSTABLE_OFFSET_COMMIT during a plain commit's write; librdkafka can then start the
        partition from auto.offset.reset instead of the committed offset.)
        `member` is v9's (member id, member epoch): a consumer group's member must be at its
        current epoch (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID otherwise).
        """
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return OffsetFetchResult(error)
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None and member is not None:
            member_error = validate_offset_fetch(consumer_group, *member)
            if member_error is not ErrorCode.NONE:
                return OffsetFetchResult(member_error)
        if require_stable:
            wanted_set = None if partitions is None else frozenset(partitions)
            in_flight = {
                write_id
                for write_id, (written_group, written) in self._commits_in_flight.items()
                if written_group == group_id and (wanted_set is None or written & wanted_set)
            }
            async with self._commit_writes:
                await self._commit_writes.wait_for(lambda: not in_flight & self._commits_in_flight.keys())
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return OffsetFetchResult(ErrorCode.NONE, {tp: PartitionOffset(-1, -1, "") for tp in partitions or ()})
        wanted = sorted(group.offsets) if partitions is None else list(partitions)
        result = {}
        for tp in wanted:
            committed = group.offsets.get(tp)
            if require_stable and self._has_pending_txn_offset(group_id, tp):
                result[tp] = PartitionOffset(-1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
            elif committed is None:
                result[tp] = PartitionOffset(-1, -1, "")
            else:
                result[tp] = PartitionOffset(committed.offset, committed.leader_epoch, committed.metadata)
        return OffsetFetchResult(ErrorCode.NONE, result)

    def _has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in by_group.get(group_id, ()) for by_group in self._pending_txn_offsets.values())

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Expire offsets past offsets.retention.ms (see `GroupMetadata.remove_expired_offsets`;
        a consumer-protocol group keeps those of the topics its members subscribe to), write
        their tombstones, and drop Empty groups, classic or consumer, left with no offsets
        (Kafka's cleanupGroupMetadata). Returns how many offsets expired.
        """
        now = self.now_ms() if now_ms is None else now_ms
        retention = self._config.offsets_retention_ms
        topics = self._topics()

        def expire(group: GroupMetadata) -> list[TopicPartition]:
            consumer_group = self._consumer_group(group.group_id)
            subscribed = None if consumer_group is None else consumer_group.subscribed_topics(topics)
            return group.remove_expired_offsets(now, retention, subscribed)

        expired = await self._cleanup_groups(list(self._groups.values()), expire)
        for group_id in [gid for groups in self._consumer_groups.values() for gid in groups.groups]:
            group = self._consumer_group(group_id)  # looked up again: the loop awaits
            holder = self._groups.get(group_id)
            if group is not None and not group.members and (holder is None or not holder.has_offsets()):
                error = await self._delete_consumer_group(group_id)
                if error is not ErrorCode.NONE:
                    log.warning("group %s: deleting the empty consumer group failed: %s", group_id, error.name)
        return expired

    async def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> OffsetDeleteResult:
        """OffsetDelete (KIP-496): remove committed offsets and write their tombstones.

        An Empty group loses any of them; a classic consumer group with members, or a
        KIP-848 consumer group, keeps those of topics a member subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC); other groups with members answer NON_EMPTY_GROUP.
        Partitions without a commit answer NONE, as Kafka does.
        """
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return OffsetDeleteResult(error)
        group = self._groups.get(group_id)
        consumer_group = self._consumer_group(group_id)
        if consumer_group is not None:
            subscribed = set(consumer_group.subscription_metadata)  # empty without members
        elif group is None or group.state is GroupState.DEAD:
            return OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND)
        elif group.state is GroupState.EMPTY:
            subscribed = set()
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = {tp.topic for tp in partitions if group.is_subscribed_to(tp.topic)}
        else:
            return OffsetDeleteResult(ErrorCode.NON_EMPTY_GROUP)
        errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC for tp in partitions if tp.topic in subscribed}
        deletable = [tp for tp in partitions if tp.topic not in subscribed]
        if deletable and group is not None:
            await self._cleanup_groups([group], lambda g: g.remove_offsets(deletable))
        errors.update((tp, ErrorCode.NONE) for tp in deletable)
        return OffsetDeleteResult(ErrorCode.NONE, errors)

    # ---------------------------------------------------------------- consumer protocol (KIP-848)

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: answered once the records it changed are in the log."""
        error = self._validate(request.group_id, allow_empty_id=True)  # "" is INVALID_REQUEST, as in Kafka
        if error is not None:
            return HeartbeatResult(error)
        partition = self.partition_for(request.group_id)
        groups = self._consumer_groups[partition]
        classic = None if request.group_id in groups.groups else self._groups.get(request.group_id)
        # A classic group with members may be upgraded (or the member is refused).
        members = None if classic is None or classic.state is GroupState.EMPTY else self._classic_snapshot(classic)
        result = groups.heartbeat(request, self._topics(), self.now_ms(), members)
        records = list(result.records)
        if classic is not None and result.error is ErrorCode.NONE and records:
            # The member created the consumer group: the classic group it replaces goes
            # (Kafka's tombstone; its offsets stay, held by a fresh Empty classic group).
            if classic.generation_id > 0:
                records.insert(0, (encode_key(GroupMetadataKey(request.group_id)), None))
            self._retire_classic_group(classic)
        if result.downgraded is not None:
            self._host_downgraded(result.downgraded)
        error = await self._append_consumer_records(partition, records)
        if error is not ErrorCode.NONE:
            return HeartbeatResult(error)
        self._schedule_consumer_expiry(partition)
        return replace(result, records=())

    async def consumer_group_describe(self, group_ids: Sequence[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe, one description per id in order (GROUP_ID_NOT_FOUND for a
        classic or unknown group)."""
        topics = self._topics()
        out = []
        for group_id in group_ids:
            error = self._validate(group_id)
            if error is not None:
                out.append(ConsumerGroupDescription(group_id, error))
            else:
                out.append(self._consumer_groups[self.partition_for(group_id)].describe(group_id, topics))
        return out

    def _consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id, if its partition is loaded here and it is one."""
        groups = self._consumer_groups.get(self.partition_for(group_id))
        return None if groups is None else groups.groups.get(group_id)

    async def _delete_consumer_group(self, group_id: str) -> ErrorCode:
        """Writes an Empty consumer group's tombstones (NON_EMPTY_GROUP if it has members)."""
        partition = self.partition_for(group_id)
        error, records = self._consumer_groups[partition].delete_group(group_id)
        if error is ErrorCode.NONE:
            error = await self._append_consumer_records(partition, records)
        return error

    async def _join_consumer_group(self, request: ClassicJoinRequest) -> JoinResult:
        partition = self.partition_for(request.group_id)
        result, records = self._consumer_groups[partition].classic_join(request, self._topics(), self.now_ms())
        error = await self._append_consumer_records(partition, list(records))
        self._schedule_consumer_expiry(partition)
        return result if error is ErrorCode.NONE else JoinResult(error, member_id=request.member_id)

    @staticmethod
    def _classic_snapshot(group: GroupMetadata) -> ClassicGroupSnapshot:
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

    def _retire_classic_group(self, classic: GroupMetadata) -> None:
        """A consumer group took `classic`'s place: members still waiting in JoinGroup or
        SyncGroup are told to rejoin (as Kafka's convertToConsumerGroup answers them), its
        timers stop, and a fresh Empty classic group holds its offsets (the same ones: a
        commit being written meanwhile lands there too)."""
        for member in classic.members.values():
            join_future, member.awaiting_join = member.awaiting_join, None
            _resolve(join_future, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
            sync_future, member.awaiting_sync = member.awaiting_sync, None
            _resolve(sync_future, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        holder = GroupMetadata(classic.group_id, GroupState.EMPTY, self.now_ms())
        holder.offsets, holder.pending_offset_commits = classic.offsets, classic.pending_offset_commits
        classic.transition_to(GroupState.DEAD, self.now_ms())
        self._cancel_timers(classic)
        self._groups[classic.group_id] = holder

    def _host_downgraded(self, record: Record) -> None:
        """Kafka's convertToClassicGroup, the classic side: the classic group of the record a
        downgrade wrote (Stable at the consumer group's epoch, its members assigned their
        target assignments) takes the place of the Empty group holding the offsets (the same
        ones), exactly as a coordinator loading that record would host it, and it rebalances
        at once."""
        key_bytes, value_bytes = record
        key = decode_key(key_bytes)
        assert isinstance(key, GroupMetadataKey) and value_bytes is not None
        holder = self._groups.get(key.group)
        group = self._host_classic_group(key.group, decode_group_metadata_value(value_bytes))
        if holder is not None:
            group.offsets, group.pending_offset_commits = holder.offsets, holder.pending_offset_commits
            holder.transition_to(GroupState.DEAD, self.now_ms())
            self._cancel_timers(holder)
        self._prepare_rebalance(group)

    async def _append_consumer_records(self, partition: int, records: list[Record]) -> ErrorCode:
        """Appends what a ConsumerGroups call returned. On failure the groups already hold
        state the log does not: the partition is loaded again before the caller answers, as
        Kafka reverts its timeline."""
        if not records:
            return ErrorCode.NONE
        error = await self._append(partition, records, for_offsets=False)
        if error is not ErrorCode.NONE and partition in self._partitions.owned:
            log.warning(
                "__consumer_offsets-%d: consumer group records not written (%s), reloading", partition, error.name
            )
            self.unload_partition(partition)
            try:
                await self.load_partition(partition)
            except Exception:  # noqa: BLE001 - the broker's next leadership change loads it again
                log.exception("reloading __consumer_offsets-%d failed", partition)
        return error

    def _schedule_consumer_expiry(self, partition: int) -> None:
        _cancel(self._consumer_timers.pop(partition, None))
        groups = self._consumer_groups.get(partition)
        deadline = None if groups is None else groups.next_deadline_ms()
        if deadline is not None:
            delay = max(deadline - self.now_ms(), 0) / 1000
            self._consumer_timers[partition] = asyncio.get_running_loop().call_later(
                delay, self._on_consumer_deadline, partition
            )

    def _on_consumer_deadline(self, partition: int) -> None:
        self._consumer_timers.pop(partition, None)
        groups = self._consumer_groups.get(partition)
        if groups is None:
            return
        expired = groups.expire(self.now_ms(), self._topics())
        for record in expired.downgraded:
            self._host_downgraded(record)
        records = list(expired.records)
        if records:
            self._spawn(self._append_expired(partition, records))
        self._schedule_consumer_expiry(partition)

    async def _append_expired(self, partition: int, records: list[Record]) -> None:
        error = await self._append_consumer_records(partition, records)
        if error is not ErrorCode.NONE:
            log.warning("__consumer_offsets-%d: fencing expired members failed: %s", partition, error.name)

    # ---------------------------------------------------------------- administration

    async def list_groups(self, states: Collection[str] | None = None) -> ListGroupsResult:
        """ListGroups: this coordinator's groups, optionally only those in `states` (v4+,
        compared case-insensitively as Kafka does).

        The error is COORDINATOR_LOAD_IN_PROGRESS while any partition loads (with the
        groups known so far), as Kafka answers.
        """
        if not self._active:
            return ListGroupsResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._partitions.any_loading else ErrorCode.NONE
        wanted = {s.lower() for s in states or ()}
        consumer = {gid: g for groups in self._consumer_groups.values() for gid, g in groups.groups.items()}
        overviews = [
            GroupOverview(g.group_id, g.protocol_type or "", g.state)
            for g in self._groups.values()
            if g.group_id not in consumer  # the classic group only holding a consumer group's offsets
        ]
        overviews += [
            GroupOverview(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state, CONSUMER_GROUP_TYPE) for g in consumer.values()
        ]
        return ListGroupsResult(error, tuple(o for o in overviews if not wanted or o.state.value.lower() in wanted))

    def committed_offsets(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(group id, partition, committed offset) of every group this coordinator owns
        (the broker's consumer-lag metrics, read at scrape time)."""
        for group_id, group in list(self._groups.items()):
            for tp, committed in list(group.offsets.items()):
                yield group_id, tp, committed.offset

    async def describe_groups(self, group_ids: Sequence[str]) -> list[GroupDescription]:
        """DescribeGroups, one description per id in order."""
        return [self._describe(group_id) for group_id in group_ids]

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: only Empty groups (NON_EMPTY_GROUP otherwise); their offsets and
        metadata get tombstones. A consumer group's records are written off first, then the
        classic group holding its offsets goes as an Empty classic group does."""
        errors: dict[str, ErrorCode] = {}
        deletable = []
        for group_id in dict.fromkeys(group_ids):
            error = self._validate(group_id, allow_empty_id=True)
            if error is None and self._consumer_group(group_id) is not None:
                deleted = await self._delete_consumer_group(group_id)
                if deleted is not ErrorCode.NONE or group_id not in self._groups:
                    errors[group_id] = deleted  # NONE: it never committed an offset
                    continue
            group = self._groups.get(group_id)
            if error is not None:
                errors[group_id] = error
            elif group is None or group.state is GroupState.DEAD:
                errors[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is GroupState.EMPTY:
                group.transition_to(GroupState.DEAD, self.now_ms())
                deletable.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if deletable:
            await self._cleanup_groups(deletable, GroupMetadata.remove_all_offsets)
            errors.update((g.group_id, ErrorCode.NONE) for g in deletable)
        return errors

    # ---------------------------------------------------------------- internals: validation

    def now_ms(self) -> int:
        """The coordinator's clock in ms (commit and expiry timestamps come from it)."""
        return int(self._clock() * 1000)

    def _validate(self, group_id: str, allow_empty_id: bool = False) -> ErrorCode | None:
        # Offset APIs, DescribeGroups and DeleteGroups accept "" as a group id, as Kafka does.
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.INVALID_GROUP_ID
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if self._partitions.is_loading(partition):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._partitions.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _validate_offset_commit(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return None  # an admin client or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            member_error = group.member_error(member_id, group_instance_id)
            if member_error is not None:
                return member_error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            if group.state is GroupState.COMPLETING_REBALANCE:
                # The member has its JoinGroup answer but not its assignment yet.
                return ErrorCode.REBALANCE_IN_PROGRESS
            return None
        return ErrorCode.UNKNOWN_MEMBER_ID  # once a group has members, only they commit

    def _describe(self, group_id: str) -> GroupDescription:
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return GroupDescription(group_id, error, "")
        group = self._groups.get(group_id)
        # A consumer group is no classic group: Kafka describes it as it describes an unknown
        # one (ConsumerGroupDescribe describes it).
        if group is None or self._consumer_group(group_id) is not None:
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
        _resolve(join_future, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member.member_id))
        sync_future, member.awaiting_sync = member.awaiting_sync, None
        _resolve(sync_future, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
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
                self._spawn(
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
            _resolve(
                future,
                JoinResult(
                    error, group.generation_id, group.protocol_type, group.protocol_name, leader_before or "", ""
                ),
            )
            return
        if supports_skip_assignment:
            # v9: the leader learns it leads but keeps the current assignment (no assignor run).
            result = self._join_result(group, member)
            _resolve(future, replace(result, skip_assignment=result.leader == member.member_id))
            return
        # Before v9 the old leader id is answered, so a restarted leader does not assign
        # (a Stable group would not hand out its new assignment anyway).
        _resolve(
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
            _cancel(group.pending_member_timers.pop(member_id, None))
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
        _resolve(superseded, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member_id))
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
        _cancel(group.sync_timer)
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
        group.transition_to(GroupState.PREPARING_REBALANCE, self.now_ms())
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
            _cancel(member.heartbeat_timer)
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined: wait another rebalance timeout.
            group.join_is_initial = False
            group.join_timer = asyncio.get_running_loop().call_later(
                group.rebalance_timeout_ms / 1000, self._complete_join, group
            )
            return
        now = self.now_ms()
        group.init_next_generation(now)
        if group.state is GroupState.EMPTY:
            self._spawn(self._store_group_logged(group, {}))
            return
        for member in group.members.values():
            future, member.awaiting_join = member.awaiting_join, None
            _resolve(future, self._join_result(group, member))
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
            _cancel(group.sync_timer)
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
                    _cancel(member.heartbeat_timer)
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
        group.transition_to(GroupState.STABLE, self.now_ms())

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
            _resolve(
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
        _cancel(member.heartbeat_timer)
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
        _cancel(group.pending_member_timers.pop(member_id, None))
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        # A new member can time out while its JoinGroup waits: tell it to join again.
        join_future, member.awaiting_join = member.awaiting_join, None
        _resolve(join_future, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
        # Kafka leaves a departing member's SyncGroup unanswered; answer it rather than hang.
        sync_future, member.awaiting_sync = member.awaiting_sync, None
        _resolve(sync_future, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        _cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        previous = group.state
        group.transition_to(GroupState.DEAD, self.now_ms())
        for member in group.members.values():
            join_future, member.awaiting_join = member.awaiting_join, None
            sync_future, member.awaiting_sync = member.awaiting_sync, None
            if previous is GroupState.PREPARING_REBALANCE:
                _resolve(join_future, JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
            _resolve(sync_future, SyncResult(ErrorCode.NOT_COORDINATOR))
        self._cancel_timers(group)

    def _cancel_timers(self, group: GroupMetadata) -> None:
        _cancel(group.join_timer)
        _cancel(group.sync_timer)
        group.join_timer = group.sync_timer = None
        for timer in group.pending_member_timers.values():
            timer.cancel()
        group.pending_member_timers.clear()
        for member in group.members.values():
            _cancel(member.heartbeat_timer)
            member.heartbeat_timer = None

    # ---------------------------------------------------------------- internals: persistence

    async def _append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        for_offsets: bool,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        try:
            await self._log.append(partition, records, producer)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the client's error code
            log.warning("append to __consumer_offsets-%d failed: %r", partition, exc)
            return map_append_error(
                exc, ErrorCode.INVALID_COMMIT_OFFSET_SIZE if for_offsets else ErrorCode.UNKNOWN_SERVER_ERROR
            )
        return ErrorCode.NONE

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
        return await self._append(self.partition_for(group.group_id), [record], for_offsets=False)

    async def _store_group_logged(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> None:
        # Nobody waits on this write (a group that just became Empty); a failure is only logged.
        error = await self._store_group(group, assignment)
        if error is not ErrorCode.NONE:
            log.warning("group %s: storing metadata failed with %s", group.group_id, error.name)

    async def _store_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetCommitData]
    ) -> dict[TopicPartition, ErrorCode]:
        now = self.now_ms()
        max_length = self._config.offset_metadata_max_bytes
        valid = {}
        for tp, data in offsets.items():
            metadata = data.metadata or ""
            if _utf16_length(metadata) <= max_length:
                commit_timestamp = now if data.commit_timestamp == -1 else data.commit_timestamp
                valid[tp] = OffsetAndMetadata(
                    data.offset, data.leader_epoch, metadata, commit_timestamp, data.expire_timestamp
                )
        if not valid:
            return {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}
        records: list[tuple[bytes, bytes | None]] = [
            (
                encode_key(OffsetCommitKey(group.group_id, tp.topic, tp.partition)),
                encode_offset_commit_value(
                    OffsetCommitValue(o.offset, o.leader_epoch, o.metadata, o.commit_timestamp, o.expire_timestamp)
                ),
            )
            for tp, o in valid.items()
        ]
        group.pending_offset_commits.update(valid.keys())
        write_id = next(self._commit_write_ids)
        self._commits_in_flight[write_id] = (group.group_id, frozenset(valid))
        error: ErrorCode | None = None  # still None if the write raised (cancelled)
        try:
            error = await self._append(self.partition_for(group.group_id), records, for_offsets=True)
        finally:
            group.pending_offset_commits.subtract(valid.keys())
            for tp in valid:
                if group.pending_offset_commits[tp] <= 0:
                    del group.pending_offset_commits[tp]
            live = self._groups.get(group.group_id)
            # Not for a group deleted or unloaded meanwhile; a group converted meanwhile shares its offsets.
            if error is ErrorCode.NONE and live is not None and live.offsets is group.offsets:
                live.offsets.update(valid)
            del self._commits_in_flight[write_id]
            async with self._commit_writes:
                self._commit_writes.notify_all()
        return {tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}

    async def _cleanup_groups(
        self, groups: list[GroupMetadata], remove_offsets: Callable[[GroupMetadata], list[TopicPartition]]
    ) -> int:
        """Remove offsets (deletion or expiry), retire Empty groups left without offsets, and
        append the tombstones. Like Kafka, a failed tombstone write is only logged: the
        next expiry pass or coordinator takes care of what is left."""
        tombstones: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        removed = 0
        now = self.now_ms()
        for group in groups:
            removed_offsets = remove_offsets(group)
            removed += len(removed_offsets)
            partition = self.partition_for(group.group_id)
            tombstones[partition].extend(
                (encode_key(OffsetCommitKey(group.group_id, tp.topic, tp.partition)), None) for tp in removed_offsets
            )
            if group.state is GroupState.EMPTY and not group.has_offsets():
                group.transition_to(GroupState.DEAD, now)
            if group.state is GroupState.DEAD and self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]
                self._cancel_timers(group)
                if group.generation_id > 0:  # generation 0: no metadata record was ever written
                    tombstones[partition].append((encode_key(GroupMetadataKey(group.group_id)), None))
        for partition, records in tombstones.items():
            if records and partition in self._partitions.owned:
                error = await self._append(partition, records, for_offsets=True)
                if error is not ErrorCode.NONE:
                    log.warning("tombstones for __consumer_offsets-%d failed: %s", partition, error.name)
        return removed

    async def _expire_periodically(self) -> None:
        interval = self._config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                expired = await self.expire_offsets()
            except Exception:  # noqa: BLE001 - keep the schedule going, as Kafka's scheduler does
                log.exception("offset expiration failed")
            else:
                if expired:
                    log.info("expired %d offsets", expired)

    def _install_loaded(
        self, groups: dict[str, GroupMetadataValue], offsets: dict[tuple[str, TopicPartition], OffsetCommitValue]
    ) -> None:
        per_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = defaultdict(dict)
        for (group_id, tp), v in offsets.items():
            per_group[group_id][tp] = OffsetAndMetadata(
                v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
            )
        now = self.now_ms()
        for group_id, value in groups.items():
            self._host_classic_group(group_id, value).offsets = per_group.pop(group_id, {})
        # Groups that only store offsets (never, or no longer, any metadata record).
        for group_id, group_offsets in per_group.items():
            group = GroupMetadata(group_id, GroupState.EMPTY, now)
            group.offsets = group_offsets
            self._groups[group_id] = group

    def _host_classic_group(self, group_id: str, value: GroupMetadataValue) -> GroupMetadata:
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

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


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


def _resolve(future: asyncio.Future[_T] | None, result: _T) -> None:
    # A caller that stopped waiting (cancelled) leaves a done future behind: skip it.
    if future is not None and not future.done():
        future.set_result(result)


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()
