"""REST Proxy v2 consumer instances: group members that the broker drives for HTTP users.

An instance is a real member of its group, in the same coordinator as Kafka clients, under
either group protocol (`group.protocol` when it is created):

- classic (the default): it joins with the "consumer" protocol type (range assignment),
  computes the assignment itself when it is the leader, heartbeats in the background and
  rejoins on a rebalance, giving up every partition meanwhile (eager);
- consumer (KIP-848): it sends ConsumerGroupHeartbeat at the interval the coordinator
  answers; each new assignment is reconciled at once (the partitions that go are given up
  first, committed beforehand with auto-commit, then the new ones start) and acknowledged
  by the next heartbeat, so the partitions it keeps never stop. A fenced instance gives up
  its partitions and rejoins; closing it leaves with member epoch -1.

Either way each newly assigned partition starts from its committed offset or
`auto.offset.reset`. HTTP users then only fetch records and commit.

Instances idle for longer than `consumer.instance.timeout.ms` (the REST Proxy's setting,
default 5 minutes) are closed, so an abandoned instance leaves its group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loglake.errors import ErrorCode, KafkaError
from loglake.groups import (
    CONSUMER_PROTOCOL_TYPE,
    GroupCoordinator,
    MemberIdentity,
    OffsetCommitData,
    Subscription,
    TopicPartition,
    assign_group,
    decode_assignment,
    decode_subscription,
)
from loglake.groups.api import CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE
from loglake.groups.assignors import encode_subscription
from loglake.groups.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    HeartbeatRequest,
    HeartbeatResult,
    TopicPartitions,
)
from loglake.record.batch import Record

from ingest_gateway.http.rest_records import read_records, visible_end

if TYPE_CHECKING:
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
HEARTBEAT_INTERVAL_S = 3.0
INSTANCE_TIMEOUT_MS = 300_000
_RETRY_S = 0.2


@dataclass
class ConsumerInstance:
    group_id: str
    name: str
    format: str
    auto_offset_reset: str
    auto_commit: bool
    read_committed: bool = True
    group_protocol: str = CLASSIC_GROUP_TYPE
    remote_assignor: str | None = None  # the consumer protocol's server assignor (None: the group's)
    topics: tuple[str, ...] = ()
    member_id: str = ""
    generation_id: int = -1  # the classic generation, or the consumer protocol's member epoch
    assignment: tuple[TopicPartition, ...] = ()
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    assigned: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    # Consumer protocol: resolved once the answer to the heartbeat in flight is applied.
    heartbeat: asyncio.Future[None] | None = None


class ConsumerManager:
    def __init__(
        self,
        cache: MetadataCache,
        replica_manager: ReplicaManager,
        coordinator: GroupCoordinator,
        instance_timeout_ms: int = INSTANCE_TIMEOUT_MS,
        assignors: tuple[str, ...] = (),
    ) -> None:
        self._cache = cache
        self._replica_manager = replica_manager
        self._coordinator = coordinator
        # The server assignors the coordinator offers consumer-protocol groups.
        self.assignors = assignors
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._instance_timeout_s = instance_timeout_ms / 1000
        self._reaper: asyncio.Task | None = None

    def create(
        self,
        group_id: str,
        name: str | None,
        fmt: str,
        auto_offset_reset: str,
        auto_commit: bool,
        read_committed: bool = True,
        group_protocol: str = CLASSIC_GROUP_TYPE,
        remote_assignor: str | None = None,
    ) -> ConsumerInstance:
        name = name or f"rest-consumer-{uuid.uuid4()}"
        if (group_id, name) in self._instances:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"consumer instance {name!r} already exists in group {group_id!r}"
            )
        instance = ConsumerInstance(
            group_id, name, fmt, auto_offset_reset, auto_commit, read_committed, group_protocol, remote_assignor
        )
        self._instances[(group_id, name)] = instance
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_idle())
        return instance

    def get(self, group_id: str, name: str) -> ConsumerInstance:
        instance = self._instances.get((group_id, name))
        if instance is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"no consumer instance {name!r} in group {group_id!r}")
        instance.last_used = time.monotonic()
        return instance

    async def subscribe(self, instance: ConsumerInstance, topics: list[str]) -> None:
        for topic in topics:
            self._cache.image.topic(topic)
        await self.unsubscribe(instance)
        instance.topics = tuple(topics)
        if instance.group_protocol == CONSUMER_GROUP_TYPE:
            instance.task = asyncio.create_task(self._consumer_membership(instance))
        else:
            instance.task = asyncio.create_task(self._membership(instance))

    async def unsubscribe(self, instance: ConsumerInstance) -> None:
        if instance.task is None:
            return
        if instance.auto_commit:
            await self.commit(instance, None)
        instance.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await instance.task
        instance.task = None
        if instance.member_id and instance.group_protocol == CONSUMER_GROUP_TYPE:
            leave = HeartbeatRequest(instance.group_id, instance.member_id, LEAVE_GROUP_MEMBER_EPOCH)
            await self._coordinator.consumer_group_heartbeat(leave)
        elif instance.member_id:
            await self._coordinator.leave_group(instance.group_id, [MemberIdentity(instance.member_id)])
        instance.topics, instance.member_id, instance.generation_id, instance.heartbeat = (), "", -1, None
        self._revoke(instance)

    async def close(self, instance: ConsumerInstance) -> None:
        await self.unsubscribe(instance)
        self._instances.pop((instance.group_id, instance.name), None)

    async def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for instance in list(self._instances.values()):
            await self.close(instance)

    # Fetch and commit --------------------------------------------------------------------

    async def fetch(
        self, instance: ConsumerInstance, timeout_ms: int, max_bytes: int
    ) -> list[tuple[TopicPartition, Record]]:
        """Records from the assigned partitions' positions; waits up to `timeout_ms` for an
        assignment and then for data."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        if instance.auto_commit:
            # Like the Java client: a poll commits what the previous polls returned.
            await self.commit(instance, None)
        if not instance.assigned.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(instance.assigned.wait(), max(0.0, deadline - loop.time()))
        rm = self._replica_manager
        while True:
            out: list[tuple[TopicPartition, Record]] = []
            budget = max_bytes
            for tp in instance.assignment:
                position = instance.positions.get(tp)
                if position is None or budget <= 0:
                    continue
                partition = rm.leader_partition(tp.topic, tp.partition)
                position = max(position, partition.log_start_offset)
                records, size = read_records(partition, position, budget, instance.read_committed)
                budget -= size
                out.extend((tp, record) for record in records)
                if records:
                    instance.positions[tp] = records[-1].offset + 1
            remaining = deadline - loop.time()
            if out or remaining <= 0 or not instance.assignment:
                return out
            await rm.wait_for_change([(tp.topic, tp.partition) for tp in instance.assignment], remaining)

    async def commit(
        self, instance: ConsumerInstance, offsets: dict[TopicPartition, int] | None
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit `offsets` (the next offset to read per partition), or every position.

        A consumer-protocol member whose epoch the coordinator moved in a heartbeat whose
        answer is still on its way commits again with the new epoch, as Kafka's consumer does."""
        if not instance.member_id:
            if offsets:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, "the instance has no group membership: subscribe first")
            return {}
        wanted = dict(instance.positions) if offsets is None else offsets
        if not wanted:
            return {}
        errors = await self._commit(instance, wanted)
        heartbeat = instance.heartbeat
        if ErrorCode.STALE_MEMBER_EPOCH in errors.values() and heartbeat is not None and not heartbeat.done():
            await heartbeat
            errors = await self._commit(instance, wanted)
        return errors

    async def _commit(
        self, instance: ConsumerInstance, wanted: dict[TopicPartition, int]
    ) -> dict[TopicPartition, ErrorCode]:
        return await self._coordinator.commit_offsets(
            instance.group_id,
            instance.member_id,
            instance.generation_id,
            {tp: OffsetCommitData(offset) for tp, offset in wanted.items()},
        )

    async def committed(
        self, instance: ConsumerInstance, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, int]:
        result = await self._coordinator.fetch_offsets(instance.group_id, partitions or list(instance.assignment))
        if result.error:
            raise KafkaError(result.error, f"cannot fetch offsets of group {instance.group_id!r}")
        return {tp: po.offset for tp, po in result.partitions.items()}

    # Membership --------------------------------------------------------------------------

    def _revoke(self, instance: ConsumerInstance) -> None:
        instance.assigned.clear()
        instance.assignment = ()
        instance.positions = {}

    async def _membership(self, instance: ConsumerInstance) -> None:
        """Join, sync, heartbeat; on any rebalance or error, start over."""
        metadata = encode_subscription(Subscription(instance.topics))
        while True:
            try:
                await self._join_and_sync(instance, metadata)
                while True:
                    await asyncio.sleep(HEARTBEAT_INTERVAL_S)
                    error = await self._coordinator.heartbeat(
                        instance.group_id, instance.member_id, instance.generation_id
                    )
                    if error != ErrorCode.NONE:
                        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                                instance.member_id = ""
                        elif instance.auto_commit:
                            await self.commit(instance, None)
                        break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "consumer instance %s of group %s: membership failed; retrying", instance.name, instance.group_id
                )
                await asyncio.sleep(1)
            self._revoke(instance)

    async def _join_and_sync(self, instance: ConsumerInstance, metadata: bytes) -> None:
        while True:
            join = await self._coordinator.join_group(
                instance.group_id,
                instance.member_id,
                f"loglake-rest-{instance.name}",
                "/127.0.0.1",
                SESSION_TIMEOUT_MS,
                REBALANCE_TIMEOUT_MS,
                CONSUMER_PROTOCOL_TYPE,
                [("range", metadata)],
            )
            if join.error == ErrorCode.MEMBER_ID_REQUIRED:
                instance.member_id = join.member_id
                continue
            if join.error != ErrorCode.NONE:
                if join.error == ErrorCode.UNKNOWN_MEMBER_ID:
                    instance.member_id = ""
                await asyncio.sleep(_RETRY_S)
                continue
            instance.member_id = join.member_id
            instance.generation_id = join.generation_id
            assignments: dict[str, bytes] = {}
            if join.leader == join.member_id:
                topics = self._cache.image.topics
                assignments = assign_group(
                    join.protocol_name or "range",
                    join.members,
                    {
                        t: topics[t].num_partitions
                        for m in join.members
                        for t in decode_subscription(m.metadata).topics
                        if t in topics
                    },
                )
            sync = await self._coordinator.sync_group(
                instance.group_id, join.generation_id, instance.member_id, assignments
            )
            if sync.error != ErrorCode.NONE:
                await asyncio.sleep(_RETRY_S)
                continue
            await self._assign(instance, decode_assignment(sync.assignment).partitions)
            return

    async def _assign(self, instance: ConsumerInstance, partitions: tuple[TopicPartition, ...]) -> None:
        instance.positions = await self._starting_positions(instance, partitions)
        instance.assignment = tuple(sorted(partitions))
        instance.assigned.set()

    async def _starting_positions(
        self, instance: ConsumerInstance, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Where newly assigned partitions start: the committed offset, else `auto.offset.reset`."""
        partitions = list(partitions)
        committed = await self.committed(instance, partitions) if partitions else {}
        rm = self._replica_manager
        positions = {}
        for tp in partitions:
            offset = committed.get(tp, -1)
            if offset < 0:
                p = rm.leader_partition(tp.topic, tp.partition)
                offset = (
                    p.log_start_offset
                    if instance.auto_offset_reset == "earliest"
                    else visible_end(p, instance.read_committed)
                )
            positions[tp] = offset
        return positions

    # Consumer protocol (KIP-848) -----------------------------------------------------------

    async def _consumer_membership(self, instance: ConsumerInstance) -> None:
        """Heartbeat, reconcile, acknowledge; rejoin (epoch 0) after being fenced."""
        # Its own member id (as Kafka's consumers make theirs): leaving needs no answer first.
        instance.member_id, instance.generation_id = str(uuid.uuid4()), 0
        loop = asyncio.get_running_loop()
        while True:
            joining = instance.generation_id == 0
            owned = () if joining else self._owned(instance)
            request = HeartbeatRequest(
                instance.group_id,
                instance.member_id,
                instance.generation_id,
                # Unchanged since the last heartbeat: sent in full only when joining.
                rebalance_timeout_ms=REBALANCE_TIMEOUT_MS if joining else -1,
                subscribed_topic_names=instance.topics if joining else None,
                server_assignor=instance.remote_assignor if joining else None,
                owned_partitions=owned,
                client_id=f"loglake-rest-{instance.name}",
                client_host="/127.0.0.1",
            )
            answered = instance.heartbeat = loop.create_future()
            try:
                # Shielded: unsubscribing must not cut a heartbeat between the coordinator's
                # change of state and the append of its records.
                result = await asyncio.shield(self._coordinator.consumer_group_heartbeat(request))
                delay = await self._on_heartbeat(instance, owned, result)
            except Exception:
                log.exception(
                    "consumer instance %s of group %s: heartbeat failed; retrying", instance.name, instance.group_id
                )
                delay = 1.0
            finally:
                answered.set_result(None)
            if delay:
                await asyncio.sleep(delay)

    async def _on_heartbeat(
        self, instance: ConsumerInstance, owned: tuple[TopicPartitions, ...], result: HeartbeatResult
    ) -> float:
        """Applies a heartbeat's answer; the seconds until the next heartbeat."""
        if result.error == ErrorCode.NONE:
            instance.generation_id = result.member_epoch
            if result.assignment is not None:
                await self._reconcile(instance, result.assignment)
                if self._owned(instance) != owned:
                    return 0.0  # acknowledge the new assignment at once
            return result.heartbeat_interval_ms / 1000
        if result.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            # Its partitions may be another member's already: given up uncommitted; it rejoins.
            log.info(
                "consumer instance %s of group %s fenced (%s): rejoining",
                instance.name,
                instance.group_id,
                result.error.name,
            )
            self._revoke(instance)
            instance.generation_id = 0
        else:
            log.warning(
                "consumer instance %s of group %s: heartbeat answered %s: %s",
                instance.name,
                instance.group_id,
                result.error.name,
                result.error_message,
            )
        return _RETRY_S

    async def _reconcile(self, instance: ConsumerInstance, assignment: tuple[TopicPartitions, ...]) -> None:
        """Moves to the assignment the coordinator answered: the partitions that go first
        (their positions committed with auto-commit), then the new ones, which the
        coordinator hands out only once their previous owner gave them up."""
        names = {topic_id: name for name, (topic_id, _) in self._cache.image.topic_snapshot().items()}
        target = {
            TopicPartition(names[tp.topic_id], p) for tp in assignment if tp.topic_id in names for p in tp.partitions
        }
        current = set(instance.assignment)
        gone = current - target
        if gone:
            # Out of the assignment before the commit's wait: no fetch reads past what it commits.
            positions = {tp: instance.positions.pop(tp) for tp in gone if tp in instance.positions}
            instance.assignment = tuple(sorted(current - gone))
            if instance.auto_commit and positions:
                await self._commit(instance, positions)
        instance.positions.update(await self._starting_positions(instance, target - current))
        instance.assignment = tuple(sorted(target))
        instance.assigned.set()

    def _owned(self, instance: ConsumerInstance) -> tuple[TopicPartitions, ...]:
        ids = self._cache.image.topic_snapshot()
        by_topic: dict[str, list[int]] = {}
        for tp in instance.assignment:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return tuple(TopicPartitions(ids[t][0], tuple(sorted(ps))) for t, ps in sorted(by_topic.items()) if t in ids)

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, self._instance_timeout_s / 2))
            now = time.monotonic()
            for instance in list(self._instances.values()):
                if now - instance.last_used > self._instance_timeout_s:
                    log.info("closing idle consumer instance %s of group %s", instance.name, instance.group_id)
                    await self.close(instance)
