"""Simulated consumer-protocol clients and helpers for the KIP-848 tests (imported as a module)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Iterable

import groups_support
from groups_support import FakeClock, FakeOffsetsLog

from loglake.errors import ErrorCode
from loglake.groups import records as classic_records
from loglake.groups import (
    GroupCoordinator,
    JoinResult,
    Subscription,
    SyncResult,
    TopicPartition,
    decode_assignment,
    encode_subscription,
)
from loglake.groups.api import MemberIdentity
from loglake.groups.consumer_group import (
    ClassicGroupSnapshot,
    ClassicJoinRequest,
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    MigrationPolicy,
    Record,
    TopicPartitions,
)
from loglake.groups.consumer_groups import ConsumerGroups

GROUP = "group-a"
REBALANCE_MS = 30_000
CONFIG = ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)


def topic_id(name: str) -> uuid.UUID:
    """Stable ids, so that a test can build a snapshot twice."""
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def snapshot(**partitions: int) -> dict[str, tuple[uuid.UUID, int]]:
    return {name: (topic_id(name), n) for name, n in partitions.items()}


class Cluster:
    """The groups of one partition, the topic snapshot, the timers' clock and the wall clock
    in ms, and every record written."""

    def __init__(self, config: ConsumerGroupConfig = CONFIG, **partitions: int) -> None:
        self.wall_ms = 1_700_000_000_000
        self.groups = ConsumerGroups(config, wall_clock_ms=lambda: self.wall_ms)
        self.topics = snapshot(**partitions)
        self.now_ms = 0
        self.records: list[Record] = []

    def heartbeat(self, request: HeartbeatRequest, classic: ClassicGroupSnapshot | None = None) -> HeartbeatResult:
        result = self.groups.heartbeat(request, self.topics, self.now_ms, classic)
        self.records.extend(result.records)
        return result

    def expire(self) -> list[Record]:
        expired = self.groups.expire(self.now_ms, self.topics)
        self.records.extend(expired.records)
        return list(expired.records)

    def group(self, group_id: str = GROUP) -> ConsumerGroup:
        return self.groups.groups[group_id]


class Client:
    """A well-behaved consumer: owns what its last assignment said, revokes at once, sends
    its owned partitions on every heartbeat."""

    def __init__(
        self,
        cluster: Cluster,
        topics: Iterable[str] = ("t",),
        *,
        regex: str | None = None,
        instance_id: str | None = None,
        assignor: str | None = None,
        member_id: str = "",
        group: str = GROUP,
    ) -> None:
        self.cluster = cluster
        self.topics = tuple(topics)
        self.regex = regex
        self.instance_id = instance_id
        self.assignor = assignor
        self.group = group
        self.member_id = member_id
        self.epoch = 0
        self.owned: tuple[TopicPartitions, ...] = ()
        self.last: HeartbeatResult | None = None

    def request(self, **overrides: object) -> HeartbeatRequest:
        joining = self.epoch == 0
        fields: dict = dict(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_MS if joining else -1,
            subscribed_topic_names=(self.topics if joining and (self.topics or not self.regex) else None),
            subscribed_topic_regex=self.regex if joining else None,
            server_assignor=self.assignor if joining else None,
            owned_partitions=() if joining else self.owned,
            client_id="client",
            client_host="/127.0.0.1",
        )
        fields.update(overrides)
        return HeartbeatRequest(**fields)

    def beat(self, classic: ClassicGroupSnapshot | None = None, **overrides: object) -> HeartbeatResult:
        result = self.cluster.heartbeat(self.request(**overrides), classic)
        self.last = result
        if result.error is ErrorCode.NONE:
            self.member_id = result.member_id or self.member_id
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = result.assignment
        elif result.error is ErrorCode.FENCED_MEMBER_EPOCH:
            # What a real client does: abandon every partition, then rejoin with epoch 0.
            self.epoch, self.owned = 0, ()
        return result

    def join(self) -> HeartbeatResult:
        result = self.beat()
        assert result.error is ErrorCode.NONE, result
        return result

    def leave(self, epoch: int = -1) -> HeartbeatResult:
        result = self.beat(
            member_epoch=epoch, rebalance_timeout_ms=-1, subscribed_topic_names=None, owned_partitions=None
        )
        if result.error is ErrorCode.NONE:
            self.epoch, self.owned = 0, ()
        return result

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(tp.topic_id, p) for tp in self.owned for p in tp.partitions}


class ClassicClient:
    """A classic consumer (JoinGroup, SyncGroup, Heartbeat) in a consumer group. An eager one
    gives up everything before it rejoins, so it reports no owned partitions; a cooperative
    one keeps its partitions and reports them in its JoinGroup's subscription."""

    def __init__(
        self,
        cluster: Cluster,
        topics: Iterable[str] = ("t",),
        *,
        protocols: Iterable[str] = ("range", "roundrobin"),
        instance_id: str | None = None,
        session_ms: int = 10_000,
        group: str = GROUP,
        cooperative: bool = False,
    ) -> None:
        self.cluster = cluster
        self.topics = tuple(topics)
        self.cooperative = cooperative
        self.protocols = tuple(protocols)
        self.instance_id = instance_id
        self.session_ms = session_ms
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.owned: set[tuple[str, int]] = set()

    @property
    def subscription(self) -> bytes:
        owned = tuple(TopicPartition(t, p) for t, p in sorted(self.owned)) if self.cooperative else ()
        return encode_subscription(Subscription(self.topics, owned_partitions=owned), version=1)

    def join(self, require_known_member_id: bool = False, protocol_type: str = "consumer") -> JoinResult:
        subscription = self.subscription
        request = ClassicJoinRequest(
            self.group,
            self.member_id,
            self.instance_id,
            "classic-client",
            "/127.0.0.1",
            self.session_ms,
            REBALANCE_MS,
            protocol_type,
            tuple((name, subscription) for name in self.protocols),
            require_known_member_id,
        )
        result, records = self.cluster.groups.classic_join(request, self.cluster.topics, self.cluster.now_ms)
        self.cluster.records.extend(records)
        if result.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
            self.member_id = result.member_id
            self.generation = result.generation_id
            if not self.cooperative:
                self.owned = set()
        return result

    def sync(self, protocol_name: str | None = None) -> SyncResult:
        result = self.cluster.groups.classic_sync(
            self.group,
            self.member_id,
            self.instance_id,
            self.generation,
            "consumer",
            protocol_name or self.protocols[0],
            self.cluster.topics,
            self.cluster.now_ms,
        )
        if result.error is ErrorCode.NONE:
            self.owned = {(tp.topic, tp.partition) for tp in decode_assignment(result.assignment).partitions}
        return result

    def rejoin(self) -> None:
        assert self.join().error is ErrorCode.NONE
        assert self.sync().error is ErrorCode.NONE

    def heartbeat(self) -> ErrorCode:
        return self.cluster.groups.classic_heartbeat(
            self.group, self.member_id, self.instance_id, self.generation, self.cluster.now_ms
        )

    def leave(self) -> ErrorCode:
        left, records = self.cluster.groups.classic_leave(
            self.group, [MemberIdentity(self.member_id, self.instance_id)], self.cluster.topics
        )
        self.cluster.records.extend(records)
        (member,) = left.members
        return member.error

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(self.cluster.topics[t][0], p) for t, p in self.owned}


def converge(clients: list[Client], rounds: int = 10) -> None:
    """Heartbeats round-robin until the group is stable (fails if it does not get there)."""
    for _ in range(rounds):
        for c in clients:
            assert c.beat().error is ErrorCode.NONE, c.last
        group = clients[0].cluster.group(clients[0].group)
        if group.state.value == "Stable":
            return
    raise AssertionError(f"group did not converge: {group.state}")


def group_view(group: ConsumerGroup) -> dict:
    return {
        "epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "metadata": group.subscription_metadata,
        "members": group.members,
        "target": group.target,
    }


def replayed(records: Iterable[Record]) -> ConsumerGroups:
    """What a coordinator loading `records` has of consumer groups (the only other records
    there are the classic group records of downgrades)."""
    fresh = ConsumerGroups(CONFIG)
    for key, value in records:
        assert fresh.replay(key, value) or isinstance(classic_records.decode_key(key), classic_records.GroupMetadataKey)
    return fresh


def assert_disjoint(clients: list[Client | ClassicClient]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def two_members(cluster: Cluster, *, stable: bool = True) -> tuple[Client, Client]:
    """a joins, then b; with stable=False a has not yet been told to revoke anything."""
    a, b = Client(cluster), Client(cluster)
    a.join()
    b.join()
    if stable:
        converge([a, b])
    return a, b


# ---- the group coordinator hosting consumer groups ----

TOPICS = snapshot(t=4)  # the cluster the coordinator tests' groups consume


async def coordinator_over(
    log: FakeOffsetsLog,
    clock: FakeClock | None = None,
    session_ms: int = 45_000,
    policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL,
) -> GroupCoordinator:
    """A coordinator over `log` with its one offsets partition loaded."""
    consumer = ConsumerGroupConfig(session_timeout_ms=session_ms, heartbeat_interval_ms=50, migration_policy=policy)
    config = replace(groups_support.CONFIG, consumer=consumer)
    kwargs = {"clock": clock} if clock is not None else {}
    coordinator = GroupCoordinator(config, log, topics=lambda: TOPICS, **kwargs)
    await coordinator.load_partition(0)
    return coordinator


def joining(group: str = GROUP) -> HeartbeatRequest:
    return HeartbeatRequest(
        group, "", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned_partitions=()
    )


async def beat(coordinator: GroupCoordinator, result: HeartbeatResult, **overrides: object) -> HeartbeatResult:
    """The member's next heartbeat, owning what `result` assigned it."""
    owned = result.assignment or ()
    request = HeartbeatRequest(GROUP, result.member_id or "", result.member_epoch, owned_partitions=owned)
    return await coordinator.consumer_group_heartbeat(replace(request, **overrides))
