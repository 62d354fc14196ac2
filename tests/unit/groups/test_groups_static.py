"""Static membership (KIP-345) and OffsetDelete (KIP-496) in the group coordinator."""

from __future__ import annotations

import asyncio

from groups_support import (
    GROUP,
    FakeOffsetsLog,
    assert_ok,
    join,
    new_coordinator,
    subscription,
    sync,
)

from loglake.errors import ErrorCode
from loglake.groups import (
    GroupCoordinator,
    GroupState,
    JoinResult,
    MemberIdentity,
    OffsetCommitData,
    TopicPartition,
    assign_group,
    decode_assignment,
)
from loglake.groups.records import decode_key, decode_offset_commit_value

T0 = TopicPartition("t", 0)


async def static_group(coordinator: GroupCoordinator, *instances: str, session_ms: int = 2000) -> list[JoinResult]:
    """Static members join together, the leader assigns 6 partitions of "t" by range, all sync."""
    joins = await asyncio.gather(
        *(join(coordinator, client_id=i, group_instance_id=i, session_ms=session_ms) for i in instances)
    )
    leader = next(j for j in joins if j.member_id == j.leader)
    assert leader.protocol_name is not None
    assignments = assign_group(leader.protocol_name, leader.members, {"t": 6})
    for s in await asyncio.gather(*(sync(coordinator, j, assignments if j is leader else {}) for j in joins)):
        assert_ok(s)
    return list(joins)


async def partitions_of(coordinator: GroupCoordinator, joined: JoinResult, instance: str) -> set[TopicPartition]:
    synced = await coordinator.sync_group(GROUP, joined.generation_id, joined.member_id, {}, group_instance_id=instance)
    assert_ok(synced)
    return set(decode_assignment(synced.assignment).partitions)


async def test_static_members_join_without_member_id_required() -> None:
    coordinator = await new_coordinator()
    joined = await join(coordinator, require_known_member_id=True, group_instance_id="i-1")
    assert_ok(joined)
    assert joined.member_id.startswith("i-1-")
    assert joined.members[0].group_instance_id == "i-1"


async def test_restarted_follower_rejoins_without_rebalance_and_keeps_its_partitions() -> None:
    coordinator = await new_coordinator()
    a, b = await static_group(coordinator, "i-a", "i-b")
    before = await partitions_of(coordinator, b, "i-b")

    restarted = await join(coordinator, group_instance_id="i-b", client_id="i-b")
    assert_ok(restarted)
    assert restarted.member_id != b.member_id
    assert restarted.generation_id == b.generation_id and restarted.leader == a.member_id
    assert await coordinator.heartbeat(GROUP, a.member_id, a.generation_id) is ErrorCode.NONE
    assert coordinator._classic.group(GROUP).state is GroupState.STABLE
    assert await partitions_of(coordinator, restarted, "i-b") == before

    # The previous incarnation is fenced everywhere it shows its instance id.
    old = b.member_id
    assert await coordinator.heartbeat(GROUP, old, 1, group_instance_id="i-b") is ErrorCode.FENCED_INSTANCE_ID
    assert (await coordinator.sync_group(GROUP, 1, old, {}, group_instance_id="i-b")).error is (
        ErrorCode.FENCED_INSTANCE_ID
    )
    commit = await coordinator.commit_offsets(GROUP, old, 1, {T0: OffsetCommitData(5)}, group_instance_id="i-b")
    assert commit == {T0: ErrorCode.FENCED_INSTANCE_ID}
    assert (await join(coordinator, old, group_instance_id="i-b")).error is ErrorCode.FENCED_INSTANCE_ID
    leave = await coordinator.leave_group(GROUP, [MemberIdentity(old, "i-b")])
    assert leave.members[0].error is ErrorCode.FENCED_INSTANCE_ID
    # Without the instance id the old member id is simply unknown.
    assert await coordinator.heartbeat(GROUP, old, 1) is ErrorCode.UNKNOWN_MEMBER_ID
    commit = await coordinator.commit_offsets(
        GROUP, restarted.member_id, 1, {T0: OffsetCommitData(5)}, group_instance_id="i-b"
    )
    assert commit == {T0: ErrorCode.NONE}


async def test_restarted_leader_is_not_told_it_leads_before_v9() -> None:
    coordinator = await new_coordinator()
    a, _ = await static_group(coordinator, "i-a", "i-b")
    restarted = await join(coordinator, group_instance_id="i-a", client_id="i-a")
    assert_ok(restarted)
    assert restarted.leader == a.member_id != restarted.member_id and restarted.members == ()
    assert coordinator._classic.group(GROUP).leader_id == restarted.member_id


async def test_restarted_leader_skips_assignment_from_v9() -> None:
    coordinator = await new_coordinator()
    await static_group(coordinator, "i-a", "i-b")
    restarted = await join(coordinator, group_instance_id="i-a", client_id="i-a", supports_skip_assignment=True)
    assert_ok(restarted)
    assert restarted.skip_assignment and restarted.leader == restarted.member_id
    assert {m.group_instance_id for m in restarted.members} == {"i-a", "i-b"}


async def test_second_live_instance_fences_the_waiting_one() -> None:
    coordinator = await new_coordinator()
    a, b = await static_group(coordinator, "i-a", "i-b")
    await asyncio.gather(
        join(coordinator, a.member_id, group_instance_id="i-a"), join(coordinator, b.member_id, group_instance_id="i-b")
    )
    # b's SyncGroup waits for the leader's assignment when another process claims "i-b".
    waiting_sync = asyncio.ensure_future(coordinator.sync_group(GROUP, 2, b.member_id, {}, group_instance_id="i-b"))
    await asyncio.sleep(0.01)
    impostor = asyncio.ensure_future(join(coordinator, group_instance_id="i-b"))
    assert (await waiting_sync).error is ErrorCode.FENCED_INSTANCE_ID
    # The group is rebalancing for the newcomer (it may have been sent the old id to assign).
    assert await coordinator.heartbeat(GROUP, a.member_id, 2) is ErrorCode.REBALANCE_IN_PROGRESS
    a3, newcomer = await asyncio.gather(join(coordinator, a.member_id, group_instance_id="i-a"), impostor)
    assert_ok(newcomer)
    assert a3.generation_id == newcomer.generation_id == 3
    assert {m.member_id for m in a3.members} == {a.member_id, newcomer.member_id}


async def test_absent_static_member_survives_the_rebalance_until_its_session_expires() -> None:
    coordinator = await new_coordinator()
    a, b = await static_group(coordinator, "i-a", "i-b", session_ms=1500)
    # a rejoins (a rebalance); b does not: after the rebalance timeout a new generation
    # still counts b, which is only removed when it fails to sync or heartbeat in time.
    rejoined = await join(coordinator, a.member_id, group_instance_id="i-a", session_ms=1500)
    assert_ok(rejoined)
    assert rejoined.generation_id == 2
    assert {m.member_id for m in rejoined.members} == {a.member_id, b.member_id}
    group = coordinator._classic.group(GROUP)
    assert group.static_members == {"i-a": a.member_id, "i-b": b.member_id}
    assignments = assign_group("range", rejoined.members, {"t": 6})
    assert_ok(await coordinator.sync_group(GROUP, 2, a.member_id, assignments, group_instance_id="i-a"))
    deadline = asyncio.get_running_loop().time() + 5
    while "i-b" in group.static_members:
        assert asyncio.get_running_loop().time() < deadline, "b's session never expired"
        await coordinator.heartbeat(GROUP, a.member_id, group.generation_id, group_instance_id="i-a")
        await asyncio.sleep(0.05)
    assert await coordinator.heartbeat(GROUP, a.member_id, 2) is ErrorCode.REBALANCE_IN_PROGRESS


async def test_leave_group_by_instance_id_alone() -> None:
    coordinator = await new_coordinator()
    a, _ = await static_group(coordinator, "i-a", "i-b")
    result = await coordinator.leave_group(GROUP, [MemberIdentity("", "i-b"), MemberIdentity("", "i-x")])
    assert [m.error for m in result.members] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert await coordinator.heartbeat(GROUP, a.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS


async def test_a_new_coordinator_knows_the_static_members() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    _, b = await static_group(coordinator, "i-a", "i-b")
    restarted = await join(coordinator, group_instance_id="i-b", client_id="i-b")
    assert_ok(restarted)
    await coordinator.stop()

    successor = await new_coordinator(log)
    group = successor._classic.group(GROUP)
    assert group.state is GroupState.STABLE
    assert group.static_members["i-b"] == restarted.member_id
    assert await successor.heartbeat(GROUP, b.member_id, 1, group_instance_id="i-b") is ErrorCode.FENCED_INSTANCE_ID
    again = await join(successor, group_instance_id="i-b", client_id="i-b")
    assert_ok(again)
    assert again.generation_id == 1 and group.state is GroupState.STABLE
    await successor.stop()


async def test_offset_delete_rules() -> None:
    coordinator = await new_coordinator()
    assert (await coordinator.delete_offsets("nobody", [T0])).error is ErrorCode.GROUP_ID_NOT_FOUND
    other = TopicPartition("other", 0)
    [member] = await asyncio.gather(join(coordinator, protocols=[("range", subscription("t"))]))
    assert_ok(await sync(coordinator, member, {member.member_id: b""}))
    offsets = {T0: OffsetCommitData(1), other: OffsetCommitData(2)}
    assert set((await coordinator.commit_offsets(GROUP, member.member_id, 1, offsets)).values()) == {ErrorCode.NONE}

    result = await coordinator.delete_offsets(GROUP, [T0, other])
    assert result.error is ErrorCode.NONE
    assert result.partitions == {T0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, other: ErrorCode.NONE}
    fetched = await coordinator.fetch_offsets(GROUP, [T0, other])
    assert fetched.partitions[T0].offset == 1 and fetched.partitions[other].offset == -1

    # Empty group: anything goes; the last offset gone, the group goes too.
    await coordinator.leave_group(GROUP, [MemberIdentity(member.member_id)])
    assert (await coordinator.delete_offsets(GROUP, [T0])).partitions == {T0: ErrorCode.NONE}
    assert (await coordinator.delete_offsets(GROUP, [T0])).error is ErrorCode.GROUP_ID_NOT_FOUND

    # A group of another protocol type with members: NON_EMPTY_GROUP.
    connect = await join(coordinator, group="workers", protocol_type="connect", protocols=[("default", b"")])
    assert_ok(connect)
    assert (await coordinator.delete_offsets("workers", [T0])).error is ErrorCode.NON_EMPTY_GROUP


async def test_offset_delete_writes_tombstones() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    t1 = TopicPartition("t", 1)
    await coordinator.commit_offsets(GROUP, "", -1, {T0: OffsetCommitData(7), t1: OffsetCommitData(8)})
    await coordinator.delete_offsets(GROUP, [T0])
    key, value = log.partitions[0][-1]
    assert decode_key(key).partition == 0 and value is None  # type: ignore[union-attr]
    successor = await new_coordinator(log)
    fetched = await successor.fetch_offsets(GROUP, None)
    assert list(fetched.partitions) == [t1]


async def test_retention_time_is_stored_as_an_expire_timestamp() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    await coordinator.commit_offsets(GROUP, "", -1, {T0: OffsetCommitData(3, expire_timestamp=12_345)})
    value = decode_offset_commit_value(log.partitions[0][-1][1])  # type: ignore[arg-type]
    assert value.expire_timestamp == 12_345 and value.offset == 3
    assert await coordinator.expire_offsets(now_ms=12_345) == 1


async def test_commit_with_member_id_but_no_generation_into_empty_group() -> None:
    # Kafka: generation -1 commits to an Empty group whatever the member id says.
    coordinator = await new_coordinator()
    errors = await coordinator.commit_offsets(GROUP, "someone", -1, {T0: OffsetCommitData(1)})
    assert errors == {T0: ErrorCode.NONE}
