"""Kafka's group coordinator over asyncio: the façade the broker calls (Kafka's
GroupCoordinatorShard), over the components that do the work.

One `GroupCoordinator` per broker serves the groups whose `__consumer_offsets` partition
(`partition_for(group_id)`) it has loaded. The broker calls `load_partition` /
`unload_partition` as it gains or loses leadership of those partitions; requests for
any other group answer NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading).

Persistence goes through `OffsetsLog` (an `InternalTopicLog`): offsets and group metadata are
appended as records in Kafka's own formats (`loglake.groups.records`,
`loglake.groups.consumer_records`), and loading a partition replays them (last value per key
wins, a null value deletes) into the components:

    ClassicGroupManager   classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalances
    ConsumerGroupManager  consumer-protocol (KIP-848) groups: ConsumerGroupHeartbeat, their
                          classic members, online migration, member expiry
    OffsetManager         OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, expiry

A group id is either a classic group or a consumer group; this façade checks that the
group's partition is served here, then routes each request to the component serving that
kind of group. A consumer group's committed offsets are kept, as a classic group's are, in
an Empty classic group of the same id that only holds offsets. Empty groups convert either
way as in Kafka: a consumer heartbeat joining an Empty classic group writes the classic
group's tombstone, a JoinGroup to an Empty consumer group writes the consumer group's
tombstones.

Deliberately left out: group.max.size (classic), and the downgrade Kafka makes when a
classic static member replaces the last consumer-protocol member (the group then stays a
consumer group of classic members until its next conversion).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

from loglake.errors import ErrorCode
from loglake.groups.api import (
    CONSUMER_GROUP_TYPE,
    GroupDescription,
    GroupOverview,
    GroupState,
    JoinResult,
    LeaveGroupResult,
    ListGroupsResult,
    MemberIdentity,
    OffsetCommitData,
    OffsetDeleteResult,
    OffsetFetchResult,
    SyncResult,
    TopicPartition,
)
from loglake.groups.assignors import CONSUMER_PROTOCOL_TYPE
from loglake.groups.classic_manager import ClassicGroupManager
from loglake.groups.config import GroupConfig
from loglake.groups.consumer_group import (
    ClassicJoinRequest,
    ConsumerGroupDescription,
    HeartbeatRequest,
    HeartbeatResult,
    TopicSnapshot,
)
from loglake.groups.consumer_groups import ConsumerGroups
from loglake.groups.consumer_manager import ConsumerGroupManager
from loglake.groups.group import GroupMetadata
from loglake.groups.offset_manager import LATEST_OFFSET_COMMIT_VERSION, Committer, OffsetManager
from loglake.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from loglake.groups.runtime import BackgroundTasks, GroupLog
from loglake.internal_topics import (
    OFFSETS_TOPIC,
    InternalTopicLog,
    PartitionLoads,
    TransactionalRecord,
    TransactionMarker,
)

log = logging.getLogger(__name__)


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class GroupCoordinator:
    """Serves the groups of the `__consumer_offsets` partitions it has loaded.

    Active from construction; `start()` only adds the periodic offset expiry, `stop()`
    unloads everything and answers later requests COORDINATOR_NOT_AVAILABLE.
    `clock` returns seconds (like time.time); timestamps are in ms from it. Consumer-group
    session and rebalance timers run on the monotonic clock instead (as Kafka's timer wheel),
    so that a step of the wall clock does not expire every member at once. `topics`
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
        self._clock = clock
        self._topics = topics
        self._log = GroupLog(offsets_log, config.offsets_topic_num_partitions)
        self._partitions = PartitionLoads(OFFSETS_TOPIC)
        self._tasks = BackgroundTasks()
        self._active = True
        self._expiry_task: asyncio.Task[None] | None = None
        self._classic = ClassicGroupManager(config, self._log, self.now_ms, self._tasks)
        self._consumer = ConsumerGroupManager(
            self._log, self._classic, self._partitions, topics, _monotonic_ms, self._tasks, self._reload
        )
        self._offsets = OffsetManager(
            config, self._log, self._classic, self._consumer.group, self._partitions, self.now_ms
        )

    # ---------------------------------------------------------------- lifecycle

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group: abs(hashCode) % partitions, as Kafka."""
        return self._log.partition_for(group_id)

    def now_ms(self) -> int:
        """The coordinator's clock in ms (commit and expiry timestamps come from it)."""
        return int(self._clock() * 1000)

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
        await self._tasks.cancel_all()

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
        consumer_groups = ConsumerGroups(self._config.consumer, wall_clock_ms=self.now_ms)
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

        if await self._partitions.load(partition, self._log.log, apply, on_transaction):
            for group_id, value in groups.items():
                self._classic.host(group_id, value)
            self._offsets.install(offsets, open_txns)
            self._consumer.load(partition, consumer_groups)
            self._partitions.mark_owned(partition)

    def unload_partition(self, partition: int) -> None:
        """Stop coordinating the groups of `partition`; their waiting requests get NOT_COORDINATOR."""
        self._partitions.unload(partition)
        self._classic.unload_partition(partition)
        self._consumer.unload(partition)

    async def _reload(self, partition: int) -> None:
        self.unload_partition(partition)
        await self.load_partition(partition)

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
        request = ClassicJoinRequest(
            group_id,
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            tuple((name, bytes(metadata)) for name, metadata in protocols),
            require_known_member_id,
        )
        consumer_group = self._consumer.group(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                # It joins the consumer group as a classic member (whatever the migration policy).
                return await self._consumer.classic_join(request)
            # An Empty consumer group becomes a classic one, as Kafka converts it.
            error = await self._consumer.delete(group_id)
            if error is not ErrorCode.NONE:
                return JoinResult(error, member_id=member_id)
        return await self._classic.join(request, supports_skip_assignment)

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
        if self._consumer.group(group_id) is not None:
            return await self._consumer.classic_sync(
                group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name
            )
        return await self._classic.sync(
            group_id, generation_id, member_id, assignments, group_instance_id, protocol_type, protocol_name
        )

    async def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, *, group_instance_id: str | None = None
    ) -> ErrorCode:
        """Heartbeat: keeps the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
        error = self._validate(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # the group is still loading: answer blindly, as Kafka does
        if error is not None:
            return error
        if self._consumer.group(group_id) is not None:
            return await self._consumer.classic_heartbeat(group_id, member_id, generation_id, group_instance_id)
        return self._classic.heartbeat(group_id, member_id, generation_id, group_instance_id)

    async def leave_group(self, group_id: str, members: Sequence[MemberIdentity]) -> LeaveGroupResult:
        """LeaveGroup: v0-v2 name one member, v3+ a batch (each answered separately). A member
        named by instance id alone (member id "") is the static member holding it, which is
        how an administrator removes one."""
        error = self._validate(group_id)
        if error is not None:
            return LeaveGroupResult(error)
        if self._consumer.group(group_id) is not None:
            return await self._consumer.classic_leave(group_id, members)
        return self._classic.leave(group_id, members)

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
        Kafka checks it for the request's `api_version`. A member's commit counts as a heartbeat.
        """
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return {tp: error for tp in offsets}
        committer = Committer(member_id, generation_id, group_instance_id, api_version)
        return await self._offsets.commit(group_id, committer, offsets)

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
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return {tp: error for tp in offsets}
        committer = Committer(member_id, generation_id, group_instance_id, api_version)
        return await self._offsets.commit_txn(group_id, (producer_id, producer_epoch), committer, offsets)

    def complete_txn(self, producer_id: int, commit: bool, partition: int) -> None:
        """The producer's COMMIT/ABORT marker was written on `__consumer_offsets-partition`:
        its held offsets of the groups there become the groups' or are dropped."""
        self._offsets.complete_txn(producer_id, commit, partition)

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
        partitions when it came are done, and UNSTABLE_OFFSET_COMMIT for a partition with
        offsets of an open transaction, as Kafka 4's coordinator. (Kafka's earlier one also
        answered UNSTABLE_OFFSET_COMMIT during a plain commit's write; librdkafka can then
        start the partition from auto.offset.reset instead of the committed offset.)
        `member` is v9's (member id, member epoch): a consumer group's member must be at its
        current epoch (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID otherwise).
        """
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return OffsetFetchResult(error)
        return await self._offsets.fetch(group_id, partitions, require_stable, member)

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Expire offsets past offsets.retention.ms (see `GroupMetadata.remove_expired_offsets`;
        a consumer-protocol group keeps those of the topics its members subscribe to), write
        their tombstones, and drop Empty groups, classic or consumer, left with no offsets
        (Kafka's cleanupGroupMetadata). Returns how many offsets expired.
        """
        now = self.now_ms() if now_ms is None else now_ms
        expired = await self._offsets.expire(now, self._topics())
        await self._consumer.delete_empty_groups()
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
        return await self._offsets.delete(group_id, partitions)

    def committed_offsets(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(group id, partition, committed offset) of every group this coordinator owns
        (the broker's consumer-lag metrics, read at scrape time)."""
        return self._offsets.committed_offsets()

    async def _expire_periodically(self) -> None:
        interval = self._config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                expired = await self.expire_offsets()
            except Exception:  # keep the schedule going, as Kafka's scheduler does
                log.exception("offset expiration failed")
            else:
                if expired:
                    log.info("expired %d offsets", expired)

    # ---------------------------------------------------------------- consumer protocol (KIP-848)

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: answered once the records it changed are in the log."""
        error = self._validate(request.group_id, allow_empty_id=True)  # "" is INVALID_REQUEST, as in Kafka
        if error is not None:
            return HeartbeatResult(error)
        return await self._consumer.heartbeat(request)

    async def consumer_group_describe(self, group_ids: Sequence[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe, one description per id in order (GROUP_ID_NOT_FOUND for a
        classic or unknown group)."""
        out = []
        for group_id in group_ids:
            error = self._validate(group_id)
            out.append(
                ConsumerGroupDescription(group_id, error) if error is not None else self._consumer.describe(group_id)
            )
        return out

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
        consumer = self._consumer.all_groups()
        # Not the classic groups only holding a consumer group's offsets.
        overviews = self._classic.overviews(consumer)
        overviews += [
            GroupOverview(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state, CONSUMER_GROUP_TYPE) for g in consumer.values()
        ]
        return ListGroupsResult(error, tuple(o for o in overviews if not wanted or o.state.value.lower() in wanted))

    async def describe_groups(self, group_ids: Sequence[str]) -> list[GroupDescription]:
        """DescribeGroups, one description per id in order."""
        return [self._describe(group_id) for group_id in group_ids]

    def _describe(self, group_id: str) -> GroupDescription:
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return GroupDescription(group_id, error, "")
        # A consumer group is no classic group: Kafka describes it as it describes an unknown
        # one (ConsumerGroupDescribe describes it).
        if self._consumer.group(group_id) is not None:
            return GroupDescription(group_id, ErrorCode.NONE, GroupState.DEAD.value)
        return self._classic.describe(group_id)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """DeleteGroups: only Empty groups (NON_EMPTY_GROUP otherwise); their offsets and
        metadata get tombstones. A consumer group's records are written off first, then the
        classic group holding its offsets goes as an Empty classic group does."""
        errors: dict[str, ErrorCode] = {}
        deletable: list[GroupMetadata] = []
        for group_id in dict.fromkeys(group_ids):
            error = self._validate(group_id, allow_empty_id=True)
            if error is None and self._consumer.group(group_id) is not None:
                deleted = await self._consumer.delete(group_id)
                if deleted is not ErrorCode.NONE or self._classic.group(group_id) is None:
                    errors[group_id] = deleted  # NONE: it never committed an offset
                    continue
            group = self._classic.group(group_id)
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
            await self._offsets.delete_groups(deletable)
            errors.update((g.group_id, ErrorCode.NONE) for g in deletable)
        return errors

    # ---------------------------------------------------------------- validation

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
