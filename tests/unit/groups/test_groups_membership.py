"""Group membership over a real event loop: join/sync, rebalances, sessions, leaving, errors."""

from __future__ import annotations

import asyncio
import re
import time

from groups_support import (
    GROUP,
    REBALANCE_MS,
    SESSION_MS,
    FakeOffsetsLog,
    assert_ok,
    join,
    keep_alive,
    new_coordinator,
    stable_group,
    subscription,
    sync,
)

from loglake.errors import ErrorCode, KafkaError
from loglake.groups import (
    GroupState,
    MemberIdentity,
    MemberLeaveResult,
    TopicPartition,
    assign_group,
    decode_assignment,
)
from loglake.groups.records import GroupMetadataKey, decode_group_metadata_value, decode_key


def partitions(assignment: bytes) -> set[TopicPartition]:
    return set(decode_assignment(assignment).partitions)


# ------------------------------------------------------------------ join and sync


async def test_single_member_join_and_sync() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    joined = await join(coordinator, client_id="rest-consumer")
    assert_ok(joined)
    uuid4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"
    assert re.fullmatch(f"rest-consumer-{uuid4}", joined.member_id)
    assert joined.generation_id == 1
    assert joined.leader == joined.member_id
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, subscription("t"))]

    assignments = assign_group("range", joined.members, {"t": 3})
    synced = await sync(coordinator, joined, assignments)
    assert_ok(synced)
    assert partitions(synced.assignment) == {TopicPartition("t", p) for p in range(3)}
    assert await coordinator.heartbeat(GROUP, joined.member_id, 1) is ErrorCode.NONE

    [described] = await coordinator.describe_groups([GROUP])
    assert (described.state, described.protocol_type, described.protocol) == ("Stable", "consumer", "range")
    [member] = described.members
    assert (member.member_id, member.client_id, member.client_host) == (joined.member_id, "rest-consumer", "/127.0.0.1")
    assert (member.metadata, member.assignment) == (subscription("t"), assignments[joined.member_id])

    # The leader's SyncGroup stored the group with its assignment.
    [(key, value)] = log.partitions[0]
    assert decode_key(key) == GroupMetadataKey(GROUP)
    stored = decode_group_metadata_value(value)
    assert (stored.generation, stored.protocol, stored.leader) == (1, "range", joined.member_id)
    assert stored.members[0].assignment == assignments[joined.member_id]


async def test_three_members_one_leader_and_everyone_gets_an_assignment() -> None:
    coordinator = await new_coordinator(group_initial_rebalance_delay_ms=30)
    joins = await asyncio.gather(*(join(coordinator, client_id=f"c{i}") for i in range(3)))
    for j in joins:
        assert_ok(j)
    assert {j.generation_id for j in joins} == {1}
    assert {j.leader for j in joins} == {joins[0].member_id}  # the first to join leads
    assert len(joins[0].members) == 3
    assert joins[1].members == joins[2].members == ()

    # Followers may sync before the leader: they wait for its assignment.
    follower_syncs = [asyncio.ensure_future(sync(coordinator, j)) for j in joins[1:]]
    await asyncio.sleep(0.01)
    assert not any(f.done() for f in follower_syncs)
    [described] = await coordinator.describe_groups([GROUP])
    assert described.state == "CompletingRebalance"
    assert described.members[0].metadata == b""  # only shown once Stable

    assignments = assign_group("range", joins[0].members, {"t": 6})
    results = [await sync(coordinator, joins[0], assignments)] + list(await asyncio.gather(*follower_syncs))
    for r in results:
        assert_ok(r)
    assigned = [partitions(r.assignment) for r in results]
    assert set().union(*assigned) == {TopicPartition("t", p) for p in range(6)}
    assert all(len(a) == 2 for a in assigned)


async def test_member_left_out_by_the_leader_gets_an_empty_assignment() -> None:
    coordinator = await new_coordinator()
    a, b = await asyncio.gather(join(coordinator), join(coordinator))
    results = await asyncio.gather(sync(coordinator, b), sync(coordinator, a, {a.member_id: b"only-a"}))
    assert [(r.error, r.assignment) for r in results] == [(ErrorCode.NONE, b""), (ErrorCode.NONE, b"only-a")]


async def test_member_id_required_then_rejoin() -> None:
    coordinator = await new_coordinator()
    first = await join(coordinator, require_known_member_id=True)
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-") and first.generation_id == -1
    # Not a member yet.
    assert await coordinator.heartbeat(GROUP, first.member_id, 0) is ErrorCode.UNKNOWN_MEMBER_ID
    joined = await join(coordinator, first.member_id, require_known_member_id=True)
    assert_ok(joined)
    assert (joined.member_id, joined.leader, joined.generation_id) == (first.member_id, first.member_id, 1)


async def test_pending_member_holds_rebalance_until_its_session_expires() -> None:
    coordinator = await new_coordinator()
    [a] = await stable_group(coordinator, 1)
    pending = await join(coordinator, require_known_member_id=True, session_ms=100)
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED
    # A's rejoin (as leader) starts a rebalance that waits for the pending member...
    start = time.monotonic()
    rejoined = await join(coordinator, a.member_id)
    assert_ok(rejoined)
    # ...which never comes back, so the join completes when its reserved id expires.
    assert time.monotonic() - start >= 0.08
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a.member_id]
    assert (await join(coordinator, pending.member_id)).error is ErrorCode.UNKNOWN_MEMBER_ID


async def test_unknown_member_id_and_unknown_group() -> None:
    coordinator = await new_coordinator()
    assert (await join(coordinator, "made-up")).error is ErrorCode.UNKNOWN_MEMBER_ID
    await stable_group(coordinator, 1)
    assert (await join(coordinator, "made-up")).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coordinator.sync_group(GROUP, 1, "made-up", {})).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coordinator.sync_group("other", 1, "made-up", {})).error is ErrorCode.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------ rebalances


async def test_new_member_triggers_rebalance_and_generation_bump() -> None:
    coordinator = await new_coordinator()
    [a, b] = await stable_group(coordinator, 2)
    newcomer = asyncio.ensure_future(join(coordinator, client_id="c-new"))
    await asyncio.sleep(0.01)
    # The old members learn about the rebalance from their heartbeats, then rejoin.
    assert await coordinator.heartbeat(GROUP, a.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert (await sync(coordinator, a)).error is ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = await asyncio.gather(join(coordinator, a.member_id), join(coordinator, b.member_id))
    c = await newcomer
    for j in (*rejoins, c):
        assert_ok(j)
        assert j.generation_id == 2
    assert rejoins[0].leader == a.member_id and len(rejoins[0].members) == 3
    # The previous generation is fenced.
    assert await coordinator.heartbeat(GROUP, b.member_id, 1) is ErrorCode.ILLEGAL_GENERATION
    assert (await coordinator.sync_group(GROUP, 1, b.member_id, {})).error is ErrorCode.ILLEGAL_GENERATION


async def test_follower_rejoin_without_changes_keeps_generation_but_leader_rejoin_rebalances() -> None:
    coordinator = await new_coordinator()
    [a, b] = await stable_group(coordinator, 2)
    again = await join(coordinator, b.member_id)
    assert_ok(again)
    assert (again.generation_id, again.members) == (1, ())
    assert (await coordinator.describe_groups([GROUP]))[0].state == "Stable"

    leader_rejoin = asyncio.ensure_future(join(coordinator, a.member_id))
    await asyncio.sleep(0.01)
    assert (await coordinator.describe_groups([GROUP]))[0].state == "PreparingRebalance"
    b_rejoin = await join(coordinator, b.member_id)
    assert (await leader_rejoin).generation_id == b_rejoin.generation_id == 2


async def test_changed_metadata_triggers_rebalance() -> None:
    coordinator = await new_coordinator()
    [a, b] = await stable_group(coordinator, 2)
    new_protocols = [("range", subscription("t", "u"))]
    rejoins = await asyncio.gather(
        join(coordinator, b.member_id, protocols=new_protocols), join(coordinator, a.member_id)
    )
    assert [j.generation_id for j in rejoins] == [2, 2]
    leader = rejoins[1]
    assert {m.member_id: m.metadata for m in leader.members}[b.member_id] == subscription("t", "u")


async def test_member_not_rejoining_is_removed_after_rebalance_timeout() -> None:
    coordinator = await new_coordinator()
    [a, b] = await stable_group(coordinator, 2)

    async def heartbeat_without_rejoining() -> list[ErrorCode]:
        seen = []
        while not seen or seen[-1] in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
            seen.append(await coordinator.heartbeat(GROUP, b.member_id, b.generation_id))
            await asyncio.sleep(0.04)
        return seen

    b_heartbeats = asyncio.ensure_future(heartbeat_without_rejoining())
    start = time.monotonic()
    rejoined = await join(coordinator, a.member_id)
    # B's session stays alive, so it is the rebalance timeout that drops it.
    assert time.monotonic() - start >= REBALANCE_MS / 1000 * 0.9
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a.member_id]
    seen = await b_heartbeats
    assert ErrorCode.REBALANCE_IN_PROGRESS in seen and seen[-1] is ErrorCode.UNKNOWN_MEMBER_ID


async def test_initial_rebalance_delay_is_extended_by_new_joins() -> None:
    coordinator = await new_coordinator(group_initial_rebalance_delay_ms=100)
    start = time.monotonic()
    first = asyncio.ensure_future(join(coordinator, rebalance_ms=1000))
    await asyncio.sleep(0.06)
    second = asyncio.ensure_future(join(coordinator, rebalance_ms=1000))
    a, b = await asyncio.gather(first, second)
    elapsed = time.monotonic() - start
    assert a.generation_id == b.generation_id == 1 and len(a.members) == 2
    assert 0.18 <= elapsed < 0.9  # the second join bought another delay, bounded by the rebalance timeout


# ------------------------------------------------------------------ sessions


async def test_session_expiry_removes_member_and_survivor_takes_its_partitions() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    [a, b] = await stable_group(coordinator, 2, partitions_per_topic={"t": 4})
    start = time.monotonic()
    # Only A heartbeats; B's session (200 ms) lapses and A is told to rejoin.
    assert await keep_alive(coordinator, a) is ErrorCode.REBALANCE_IN_PROGRESS
    assert time.monotonic() - start >= SESSION_MS / 1000 * 0.9
    rejoined = await join(coordinator, a.member_id)
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a.member_id]
    synced = await sync(coordinator, rejoined, assign_group("range", rejoined.members, {"t": 4}))
    assert partitions(synced.assignment) == {TopicPartition("t", p) for p in range(4)}
    assert await coordinator.heartbeat(GROUP, b.member_id, 2) is ErrorCode.UNKNOWN_MEMBER_ID


async def test_last_member_expiring_leaves_group_empty_and_stored() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    await stable_group(coordinator, 1)
    await asyncio.sleep(SESSION_MS / 1000 + 0.1)
    [described] = await coordinator.describe_groups([GROUP])
    assert (described.state, described.members) == ("Empty", ())
    # The Empty group (generation 2, no members) was written after the leader's record.
    stored = decode_group_metadata_value(log.partitions[0][-1][1])
    assert (stored.generation, stored.protocol, stored.leader, stored.members) == (2, None, None, ())


async def test_member_that_never_syncs_is_removed() -> None:
    coordinator = await new_coordinator()
    a, b = await asyncio.gather(join(coordinator), join(coordinator))
    # A (leader) syncs, B never does: after the rebalance timeout B is dropped and A must rejoin.
    a_sync = await sync(coordinator, a, assign_group("range", a.members, {"t": 2}))
    assert_ok(a_sync)
    assert await keep_alive(coordinator, a) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = await join(coordinator, a.member_id)
    assert [m.member_id for m in rejoined.members] == [a.member_id]


async def test_heartbeat_errors() -> None:
    coordinator = await new_coordinator(offsets_topic_num_partitions=2)
    for partition in range(2):
        coordinator.unload_partition(partition)
    await coordinator.load_partition(coordinator.partition_for(GROUP))
    other = next(f"g{i}" for i in range(100) if coordinator.partition_for(f"g{i}") != coordinator.partition_for(GROUP))
    assert await coordinator.heartbeat(other, "m", 1) is ErrorCode.NOT_COORDINATOR
    assert await coordinator.heartbeat("", "m", 1) is ErrorCode.INVALID_GROUP_ID
    assert await coordinator.heartbeat(GROUP, "m", 1) is ErrorCode.UNKNOWN_MEMBER_ID

    a, b = await asyncio.gather(join(coordinator, group=GROUP), join(coordinator, group=GROUP))
    # CompletingRebalance: heartbeats are fine.
    assert await coordinator.heartbeat(GROUP, b.member_id, 1) is ErrorCode.NONE
    assert await coordinator.heartbeat(GROUP, b.member_id, 0) is ErrorCode.ILLEGAL_GENERATION
    assert await coordinator.heartbeat(GROUP, "stranger", 1) is ErrorCode.UNKNOWN_MEMBER_ID


async def test_invalid_session_timeout() -> None:
    coordinator = await new_coordinator(group_min_session_timeout_ms=100, group_max_session_timeout_ms=1000)
    assert (await join(coordinator, session_ms=99)).error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await join(coordinator, session_ms=1001)).error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert_ok(await join(coordinator, session_ms=1000))


# ------------------------------------------------------------------ leaving


async def test_leave_group_batch_and_rebalance() -> None:
    coordinator = await new_coordinator()
    [a, b, c] = await stable_group(coordinator, 3)
    result = await coordinator.leave_group(
        GROUP,
        [
            MemberIdentity(b.member_id),
            MemberIdentity(c.member_id, "instance-c"),  # c is dynamic: no such instance
            MemberIdentity(c.member_id),
            MemberIdentity("ghost"),
        ],
    )
    assert result.error is ErrorCode.NONE
    assert result.members == (
        MemberLeaveResult(b.member_id, None, ErrorCode.NONE),
        MemberLeaveResult(c.member_id, "instance-c", ErrorCode.UNKNOWN_MEMBER_ID),
        MemberLeaveResult(c.member_id, None, ErrorCode.NONE),
        MemberLeaveResult("ghost", None, ErrorCode.UNKNOWN_MEMBER_ID),
    )
    assert await coordinator.heartbeat(GROUP, a.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = await join(coordinator, a.member_id)
    assert rejoined.generation_id == 2 and len(rejoined.members) == 1

    unknown_group = await coordinator.leave_group("nobody", [MemberIdentity("m")])
    assert unknown_group.members[0].error is ErrorCode.UNKNOWN_MEMBER_ID


async def test_leader_leaving_hands_leadership_over() -> None:
    coordinator = await new_coordinator()
    [a, b] = await stable_group(coordinator, 2)
    await coordinator.leave_group(GROUP, [MemberIdentity(a.member_id)])
    rejoined = await join(coordinator, b.member_id)
    assert rejoined.leader == b.member_id and rejoined.generation_id == 2


async def test_last_member_leaving_empties_group() -> None:
    coordinator = await new_coordinator()
    [a] = await stable_group(coordinator, 1)
    await coordinator.leave_group(GROUP, [MemberIdentity(a.member_id)])
    [described] = await coordinator.describe_groups([GROUP])
    assert described.state == "Empty"
    assert (await coordinator.list_groups()).groups[0].state is GroupState.EMPTY


async def test_leaving_pending_member_lets_rebalance_finish() -> None:
    coordinator = await new_coordinator()
    [a] = await stable_group(coordinator, 1)
    pending = await join(coordinator, require_known_member_id=True, session_ms=5000)
    rejoin = asyncio.ensure_future(join(coordinator, a.member_id))
    await asyncio.sleep(0.02)
    assert not rejoin.done()
    await coordinator.leave_group(GROUP, [MemberIdentity(pending.member_id)])
    assert (await rejoin).generation_id == 2


# ------------------------------------------------------------------ protocols


async def test_protocol_vote() -> None:
    coordinator = await new_coordinator()
    sub = subscription("t")
    joins = await asyncio.gather(
        join(coordinator, protocols=[("range", sub), ("roundrobin", sub)]),
        join(coordinator, protocols=[("roundrobin", sub), ("range", sub)]),
        join(coordinator, protocols=[("range", sub), ("roundrobin", sub)]),
    )
    assert {j.protocol_name for j in joins} == {"range"}  # 2 votes to 1

    joins = await asyncio.gather(
        *(
            join(coordinator, group="g2", protocols=protocols)
            for protocols in (
                [("range", sub), ("roundrobin", sub)],
                [("roundrobin", sub), ("range", sub)],
                [("roundrobin", sub)],  # range is not supported by everyone
            )
        )
    )
    assert {j.protocol_name for j in joins} == {"roundrobin"}


async def test_inconsistent_group_protocol() -> None:
    coordinator = await new_coordinator()
    await stable_group(coordinator, 1)
    assert (await join(coordinator, protocols=[("sticky", b"")])).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(coordinator, protocol_type="connect")).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(coordinator, group="new", protocols=[])).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(coordinator, group="new", protocol_type="")).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    [a] = await stable_group(coordinator, 1, group="g3")
    wrong = await coordinator.sync_group("g3", 1, a.member_id, {}, protocol_name="roundrobin")
    assert wrong.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


# ------------------------------------------------------------------ coordinator state


async def test_unload_answers_waiting_joins_and_later_requests_not_coordinator() -> None:
    coordinator = await new_coordinator()
    [a, b] = await stable_group(coordinator, 2)
    waiting = asyncio.ensure_future(join(coordinator, a.member_id))
    await asyncio.sleep(0.01)
    coordinator.unload_partition(0)
    assert (await waiting).error is ErrorCode.NOT_COORDINATOR
    assert (await join(coordinator, b.member_id)).error is ErrorCode.NOT_COORDINATOR
    assert (await coordinator.describe_groups([GROUP]))[0].error is ErrorCode.NOT_COORDINATOR


async def test_requests_while_loading() -> None:
    log = FakeOffsetsLog()
    seed = await new_coordinator(log)
    await stable_group(seed, 1)
    log.partitions[0].extend([(b"\x00\x09junk", b"")] * 2500)  # unknown key version: skipped
    coordinator = await new_coordinator(log, offsets_topic_num_partitions=1)
    coordinator.unload_partition(0)
    loading = asyncio.ensure_future(coordinator.load_partition(0))
    await asyncio.sleep(0)  # the load replays 1000 records, then yields
    assert not loading.done()
    assert (await join(coordinator)).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await coordinator.heartbeat(GROUP, "m", 1) is ErrorCode.NONE  # answered blindly
    assert (await coordinator.sync_group(GROUP, 1, "m", {})).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert (await coordinator.list_groups()).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await loading
    assert (await coordinator.describe_groups([GROUP]))[0].state == "Stable"


async def test_failed_assignment_write_makes_members_rejoin() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    a, b = await asyncio.gather(join(coordinator), join(coordinator))
    log.fail_with = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    results = await asyncio.gather(
        sync(coordinator, b), sync(coordinator, a, assign_group("range", a.members, {"t": 2}))
    )
    assert [r.error for r in results] == [ErrorCode.NOT_COORDINATOR] * 2
    assert (await coordinator.describe_groups([GROUP]))[0].state == "PreparingRebalance"


async def test_list_and_describe_groups() -> None:
    coordinator = await new_coordinator()
    await stable_group(coordinator, 2, group="stable")
    await stable_group(coordinator, 1, group="to-empty")
    for member in (await coordinator.describe_groups(["to-empty"]))[0].members:
        await coordinator.leave_group("to-empty", [MemberIdentity(member.member_id)])
    listed = await coordinator.list_groups()
    assert listed.error is ErrorCode.NONE
    assert {(g.group_id, g.protocol_type, g.state) for g in listed.groups} == {
        ("stable", "consumer", GroupState.STABLE),
        ("to-empty", "consumer", GroupState.EMPTY),
    }
    assert [g.group_id for g in (await coordinator.list_groups(["Empty"])).groups] == ["to-empty"]

    described = await coordinator.describe_groups(["stable", "missing", ""])
    assert [d.state for d in described] == ["Stable", "Dead", "Dead"]
    assert len(described[0].members) == 2 and all(m.assignment for m in described[0].members)
    assert [d.error for d in described] == [ErrorCode.NONE] * 3

    await coordinator.stop()
    assert (await coordinator.list_groups()).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await join(coordinator)).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
