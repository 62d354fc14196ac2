"""Fakes and helpers shared by the group coordinator tests (imported as a module)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import replace
from typing import Iterable

from loglake.errors import ErrorCode
from loglake.internal_topics import InternalTopicEntry, TransactionalRecord, TransactionMarker
from loglake.groups import (
    GroupConfig,
    GroupCoordinator,
    JoinResult,
    Subscription,
    SyncResult,
    assign_group,
    encode_subscription,
)

GROUP = "group-a"

# Small timeouts so that real timers fire quickly; one offsets partition unless a test wants more.
CONFIG = GroupConfig(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=60_000,
    group_initial_rebalance_delay_ms=0,
    offsets_topic_num_partitions=1,
)
SESSION_MS = 200
REBALANCE_MS = 300


class FakeOffsetsLog:
    """The OffsetsLog seam in memory: appended records (and transactions' records and
    markers) per partition, in order."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[InternalTopicEntry]] = defaultdict(list)
        self.fail_with: Exception | None = None  # the next appends raise this

    async def append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None
    ) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        if producer is None:
            self.partitions[partition].extend(records)
        else:
            self.partitions[partition].extend(TransactionalRecord(producer[0], k, v) for k, v in records)

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """What a transaction coordinator's WriteTxnMarkers appends."""
        self.partitions[partition].append(TransactionMarker(producer_id, commit))

    def read(self, partition: int) -> Iterable[InternalTopicEntry]:
        return list(self.partitions[partition])


class FakeClock:
    """Seconds, like time.time, moved by hand."""

    def __init__(self, now_s: float = 1_700_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance_ms(self, ms: int) -> None:
        self.now_s += ms / 1000


async def new_coordinator(
    log: FakeOffsetsLog | None = None, clock: FakeClock | None = None, **config: int
) -> GroupCoordinator:
    """A coordinator over `log` with every offsets partition loaded."""
    cfg = replace(CONFIG, **config)
    coordinator = GroupCoordinator(cfg, log if log is not None else FakeOffsetsLog(), clock or FakeClock())
    for partition in range(cfg.offsets_topic_num_partitions):
        await coordinator.load_partition(partition)
    return coordinator


def subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(tuple(topics)))


async def join(
    coordinator: GroupCoordinator,
    member_id: str = "",
    *,
    group: str = GROUP,
    client_id: str = "client",
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    require_known_member_id: bool = False,
    group_instance_id: str | None = None,
    supports_skip_assignment: bool = False,
) -> JoinResult:
    return await coordinator.join_group(
        group,
        member_id,
        client_id,
        "/127.0.0.1",
        session_ms,
        rebalance_ms,
        protocol_type,
        protocols if protocols is not None else [("range", subscription("t"))],
        require_known_member_id=require_known_member_id,
        group_instance_id=group_instance_id,
        supports_skip_assignment=supports_skip_assignment,
    )


async def sync(
    coordinator: GroupCoordinator,
    join_result: JoinResult,
    assignments: dict[str, bytes] | None = None,
    group: str = GROUP,
) -> SyncResult:
    return await coordinator.sync_group(group, join_result.generation_id, join_result.member_id, assignments or {})


def assert_ok(result: JoinResult | SyncResult) -> None:
    assert result.error is ErrorCode.NONE, result


async def stable_group(
    coordinator: GroupCoordinator,
    count: int,
    *,
    group: str = GROUP,
    partitions_per_topic: dict[str, int] | None = None,
    session_ms: int = SESSION_MS,
) -> list[JoinResult]:
    """`count` members join together, the leader assigns with range, all sync; joins in order."""
    joins = await asyncio.gather(
        *(join(coordinator, group=group, client_id=f"client-{i}", session_ms=session_ms) for i in range(count))
    )
    leader = next(j for j in joins if j.member_id == j.leader)
    assert leader.protocol_name is not None
    assignments = assign_group(leader.protocol_name, leader.members, partitions_per_topic or {"t": 6})
    syncs = await asyncio.gather(
        *(sync(coordinator, j, assignments if j is leader else {}, group=group) for j in joins)
    )
    for s in syncs:
        assert_ok(s)
    return list(joins)


async def keep_alive(
    coordinator: GroupCoordinator, member: JoinResult, interval_s: float = 0.04, group: str = GROUP
) -> ErrorCode:
    """Heartbeat until an error other than NONE comes back; returns that error."""
    while True:
        error = await coordinator.heartbeat(group, member.member_id, member.generation_id)
        if error is not ErrorCode.NONE:
            return error
        await asyncio.sleep(interval_s)
