"""Online migration through the group coordinator: a classic group upgraded by a consumer
member and a consumer group downgraded when its last consumer member leaves, each served
over the classic and consumer APIs, persisted, and rebuilt by a coordinator that reloads
the partition; refusals that leave the group as it was."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from consumer_group_support import beat, coordinator_over, joining
from groups_support import GROUP, FakeClock, FakeOffsetsLog, assert_ok, join, stable_group, sync
from loglake.errors import ErrorCode
from loglake.groups import (
    GroupCoordinator,
    GroupState,
    JoinResult,
    OffsetCommitData,
    TopicPartition,
    assign_group,
    decode_assignment,
)
from loglake.groups.consumer_group import HeartbeatResult, MigrationPolicy

TP = TopicPartition("t", 0)
# Long enough that the classic members' real timers never fire while a test runs.
TIMEOUT_MS = 10_000


async def classic_join(coordinator: GroupCoordinator, member_id: str = "") -> JoinResult:
    return await join(coordinator, member_id, session_ms=TIMEOUT_MS, rebalance_ms=TIMEOUT_MS)


async def rejoin_and_sync(coordinator: GroupCoordinator, member_id: str) -> set[TopicPartition]:
    """A classic member of a consumer group rejoins and syncs; answers its assignment."""
    joined = await classic_join(coordinator, member_id)
    assert_ok(joined)
    assert (joined.leader, joined.members) == ("", ())  # the coordinator assigns, not a leader
    synced = await sync(coordinator, joined)
    assert_ok(synced)
    return set(decode_assignment(synced.assignment).partitions)


async def consumer_member_settles(coordinator: GroupCoordinator, joined: HeartbeatResult) -> HeartbeatResult:
    """Heartbeats (reporting what it owns) until the member is reconciled; answers its last
    heartbeat's result, with the assignment it owns."""
    last = joined
    for _ in range(10):
        result = await beat(coordinator, last)
        assert result.error is ErrorCode.NONE, result
        last = result if result.assignment is not None else replace(result, assignment=last.assignment)
        (described,) = await coordinator.consumer_group_describe([GROUP])
        mine = next(m for m in described.members if m.member_id == joined.member_id)
        if mine.assignment == mine.target_assignment and mine.member_epoch == described.group_epoch:
            return last
    raise AssertionError("the consumer member did not reconcile")


def owned(result: HeartbeatResult) -> set[TopicPartition]:
    return {TopicPartition("t", p) for tp in result.assignment or () for p in tp.partitions}


async def test_a_consumer_member_upgrades_a_classic_group_and_a_new_coordinator_reloads_it() -> None:
    log, clock = FakeOffsetsLog(), FakeClock()
    coordinator = await coordinator_over(log, clock)
    members = await stable_group(coordinator, 2, partitions_per_topic={"t": 4}, session_ms=TIMEOUT_MS)
    first = members[0]
    assert await coordinator.commit_offsets(GROUP, first.member_id, 1, {TP: OffsetCommitData(3)}) == {
        TP: ErrorCode.NONE
    }

    joined = await coordinator.consumer_group_heartbeat(joining())
    assert joined.error is ErrorCode.NONE and joined.member_epoch == 2  # the classic generation was 1
    overview = {g.group_id: g for g in (await coordinator.list_groups()).groups}[GROUP]
    assert (overview.group_type, overview.state.value) == ("consumer", "Reconciling")
    (described,) = await coordinator.consumer_group_describe([GROUP])
    types = {m.member_id: m.uses_classic_protocol for m in described.members}
    assert types == {first.member_id: True, members[1].member_id: True, joined.member_id: False}
    (classic_view,) = await coordinator.describe_groups([GROUP])
    assert classic_view.state == GroupState.DEAD.value  # DescribeGroups describes classic groups only

    # The classic members keep their generation (now their member epoch) until they rejoin.
    assert await coordinator.commit_offsets(GROUP, first.member_id, 1, {TP: OffsetCommitData(4)}, api_version=8) == {
        TP: ErrorCode.NONE
    }
    assert await coordinator.commit_offsets(GROUP, first.member_id, 0, {TP: OffsetCommitData(5)}) == {
        TP: ErrorCode.ILLEGAL_GENERATION
    }
    for m in members:
        assert await coordinator.heartbeat(GROUP, m.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    classic_owned = [await rejoin_and_sync(coordinator, m.member_id) for m in members]
    settled = await consumer_member_settles(coordinator, joined)
    everyone = [*classic_owned, owned(settled)]
    assert sorted(len(o) for o in everyone) == [1, 1, 2] and set().union(*everyone) == {
        TopicPartition("t", p) for p in range(4)
    }

    # A new coordinator (after a failover) rebuilds the same consumer group, offsets included.
    reloaded = await coordinator_over(log, clock)
    (after,) = await reloaded.consumer_group_describe([GROUP])
    assert [after] == await coordinator.consumer_group_describe([GROUP]) and after.state == "Stable"
    assert (await reloaded.fetch_offsets(GROUP, [TP])).partitions[TP].offset == 4
    assert await reloaded.heartbeat(GROUP, first.member_id, after.group_epoch) is ErrorCode.NONE
    await coordinator.stop()
    await reloaded.stop()


async def test_the_last_consumer_member_leaving_downgrades_to_a_classic_group_that_rebalances() -> None:
    log, clock = FakeOffsetsLog(), FakeClock()
    coordinator = await coordinator_over(log, clock)
    joined = await coordinator.consumer_group_heartbeat(joining())
    required = await join(coordinator, require_known_member_id=True, session_ms=TIMEOUT_MS, rebalance_ms=TIMEOUT_MS)
    assert required.error is ErrorCode.MEMBER_ID_REQUIRED
    assert_ok(await classic_join(coordinator, required.member_id))
    classic_ids = [required.member_id, (await classic_join(coordinator)).member_id]
    settled = await consumer_member_settles(coordinator, joined)
    await coordinator.commit_offsets(GROUP, joined.member_id or "", settled.member_epoch, {TP: OffsetCommitData(9)})
    (before,) = await coordinator.consumer_group_describe([GROUP])

    left = await beat(coordinator, settled, member_epoch=-1)
    assert left.error is ErrorCode.NONE
    (gone,) = await coordinator.consumer_group_describe([GROUP])
    assert gone.error is ErrorCode.GROUP_ID_NOT_FOUND
    (classic_view,) = await coordinator.describe_groups([GROUP])
    assert classic_view.state == GroupState.PREPARING_REBALANCE.value
    assert [m.member_id for m in classic_view.members] == classic_ids
    overview = {g.group_id: g for g in (await coordinator.list_groups()).groups}[GROUP]
    assert overview.group_type == "classic"

    # The classic group's generation is the consumer group's epoch: the members rejoin.
    generation = before.group_epoch
    for member_id in classic_ids:
        assert await coordinator.heartbeat(GROUP, member_id, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = await asyncio.gather(*(classic_join(coordinator, member_id) for member_id in classic_ids))
    leader = next(r for r in rejoined if r.member_id == r.leader)
    assert leader.generation_id == generation + 1 and len(leader.members) == 2
    assignments = assign_group(leader.protocol_name or "", leader.members, {"t": 4})
    synced = await asyncio.gather(*(sync(coordinator, r, assignments if r is leader else {}) for r in rejoined))
    parts = [set(decode_assignment(s.assignment).partitions) for s in synced]
    assert parts[0] | parts[1] == {TopicPartition("t", p) for p in range(4)} and not parts[0] & parts[1]

    # A new coordinator rebuilds the classic group, and the consumer group's offsets.
    reloaded = await coordinator_over(log, clock)
    (reloaded_view,) = await reloaded.describe_groups([GROUP])
    assert reloaded_view.state == GroupState.STABLE.value
    assert {m.member_id for m in reloaded_view.members} == set(classic_ids)
    assert (await reloaded.consumer_group_describe([GROUP]))[0].error is ErrorCode.GROUP_ID_NOT_FOUND
    assert (await reloaded.fetch_offsets(GROUP, [TP])).partitions[TP].offset == 9
    await coordinator.stop()
    await reloaded.stop()


async def test_a_refused_upgrade_leaves_the_classic_group_as_it_was() -> None:
    log = FakeOffsetsLog()
    coordinator = await coordinator_over(log, FakeClock(), policy=MigrationPolicy.DOWNGRADE)
    members = await stable_group(coordinator, 2, partitions_per_topic={"t": 4}, session_ms=TIMEOUT_MS)
    (before,) = await coordinator.describe_groups([GROUP])
    written = len(log.partitions[0])
    refused = await coordinator.consumer_group_heartbeat(joining())
    assert refused.error is ErrorCode.GROUP_ID_NOT_FOUND
    assert (
        refused.error_message
        == f"Cannot upgrade classic group {GROUP} to consumer group because online upgrade is disabled."
    )
    assert len(log.partitions[0]) == written
    assert await coordinator.describe_groups([GROUP]) == [before]
    for m in members:
        assert await coordinator.heartbeat(GROUP, m.member_id, m.generation_id) is ErrorCode.NONE
    await coordinator.stop()


async def test_a_classic_join_waiting_in_a_rebalance_is_told_to_rejoin_by_the_upgrade() -> None:
    coordinator = await coordinator_over(FakeOffsetsLog(), FakeClock())
    first = await classic_join(coordinator)
    assert_ok(await sync(coordinator, first, assign_group("range", first.members, {"t": 4})))
    waiting = asyncio.ensure_future(classic_join(coordinator))  # waits for the first to rejoin
    await asyncio.sleep(0)
    assert not waiting.done()
    joined = await coordinator.consumer_group_heartbeat(joining())
    assert joined.error is ErrorCode.NONE
    answered = await waiting
    assert answered.error is ErrorCode.REBALANCE_IN_PROGRESS
    # It is a member of the consumer group now: it rejoins there with its member id.
    assert await rejoin_and_sync(coordinator, answered.member_id) == set()
    await coordinator.stop()


async def test_without_downgrade_the_classic_members_stay_in_the_consumer_group() -> None:
    coordinator = await coordinator_over(FakeOffsetsLog(), FakeClock(), policy=MigrationPolicy.UPGRADE)
    joined = await coordinator.consumer_group_heartbeat(joining())
    classic = await classic_join(coordinator)
    settled = await consumer_member_settles(coordinator, joined)
    assert (await beat(coordinator, settled, member_epoch=-1)).error is ErrorCode.NONE
    (described,) = await coordinator.consumer_group_describe([GROUP])
    assert [m.member_id for m in described.members] == [classic.member_id]
    assert await coordinator.heartbeat(GROUP, classic.member_id, classic.generation_id) is (
        ErrorCode.REBALANCE_IN_PROGRESS
    )
    assert await rejoin_and_sync(coordinator, classic.member_id) == {TopicPartition("t", p) for p in range(4)}
    await coordinator.stop()
