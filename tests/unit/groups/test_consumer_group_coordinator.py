"""The group coordinator hosting consumer-protocol (KIP-848) groups next to classic ones:
persistence and reload, failed appends, the expiry timer, conversion of empty groups,
offsets checked against member epochs, and the administrative APIs."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from consumer_group_support import TOPICS, beat, coordinator_over, joining
from groups_support import CONFIG, GROUP, FakeClock, FakeOffsetsLog, assert_ok, join, stable_group, sync
from loglake.errors import ErrorCode
from loglake.groups import (
    GroupConfig,
    GroupCoordinator,
    GroupState,
    MemberIdentity,
    OffsetCommitData,
    TopicPartition,
)
from loglake.groups.consumer_group import MigrationPolicy, TopicPartitions

TP = TopicPartition("t", 0)


async def test_a_new_coordinator_reloads_the_consumer_group_and_its_offsets() -> None:
    log = FakeOffsetsLog()
    first = await coordinator_over(log)
    joined = await first.consumer_group_heartbeat(joining())
    assert joined.error is ErrorCode.NONE and joined.member_epoch == 1 and not joined.records
    assert joined.assignment == (TopicPartitions(TOPICS["t"][0], (0, 1, 2, 3)),)
    errors = await first.commit_offsets(GROUP, joined.member_id or "", 1, {TP: OffsetCommitData(7)})
    assert errors == {TP: ErrorCode.NONE}

    second = await coordinator_over(log)
    (before,) = await first.consumer_group_describe([GROUP])
    (after,) = await second.consumer_group_describe([GROUP])
    assert after == before and after.state == "Stable"
    assert (await second.fetch_offsets(GROUP, [TP])).partitions[TP].offset == 7
    again = await beat(second, joined)
    assert again.error is ErrorCode.NONE and again.member_epoch == 1


async def test_a_failed_append_answers_an_error_and_reloads_the_partition() -> None:
    log = FakeOffsetsLog()
    coordinator = await coordinator_over(log)
    log.fail_with = OSError("disk gone")
    failed = await coordinator.consumer_group_heartbeat(joining())
    assert failed.error is ErrorCode.NOT_COORDINATOR
    log.fail_with = None
    # The member the log never saw is gone with the reload.
    (described,) = await coordinator.consumer_group_describe([GROUP])
    assert described.error is ErrorCode.GROUP_ID_NOT_FOUND


async def test_the_expiry_timer_fences_a_silent_member() -> None:
    log = FakeOffsetsLog()
    coordinator = await coordinator_over(log, session_ms=100)
    joined = await coordinator.consumer_group_heartbeat(joining())
    assert joined.error is ErrorCode.NONE
    await asyncio.sleep(0.3)
    (described,) = await coordinator.consumer_group_describe([GROUP])
    assert described.state == "Empty" and not described.members
    # The fencing is in the log: a new coordinator sees the empty group too.
    (reloaded,) = await (await coordinator_over(log)).consumer_group_describe([GROUP])
    assert reloaded.state == "Empty"
    await coordinator.stop()


async def test_a_step_of_the_wall_clock_fences_nobody() -> None:
    """Session timers run on the monotonic clock: a member whose last heartbeat was before
    the wall clock jumped an hour ahead keeps its place when another member's heartbeat
    reschedules the expiry timer."""
    clock = FakeClock()
    coordinator = await coordinator_over(FakeOffsetsLog(), clock, session_ms=2000)
    first = await coordinator.consumer_group_heartbeat(joining())
    second = await coordinator.consumer_group_heartbeat(joining())
    clock.advance_ms(3_600_000)
    assert (await beat(coordinator, second)).error is ErrorCode.NONE
    await asyncio.sleep(0.1)  # the expiry timer the heartbeat rescheduled has run
    again = await beat(coordinator, first)
    assert again.error is ErrorCode.NONE, again
    (described,) = await coordinator.consumer_group_describe([GROUP])
    assert len(described.members) == 2
    await coordinator.stop()


async def test_member_epochs_guard_offset_commits_and_fetches() -> None:
    coordinator = await coordinator_over(FakeOffsetsLog())
    joined = await coordinator.consumer_group_heartbeat(joining())
    member = joined.member_id or ""
    offsets = {TP: OffsetCommitData(3)}
    assert await coordinator.commit_offsets(GROUP, member, 0, offsets) == {TP: ErrorCode.STALE_MEMBER_EPOCH}
    assert await coordinator.commit_offsets(GROUP, "nobody", 1, offsets) == {TP: ErrorCode.UNKNOWN_MEMBER_ID}
    assert await coordinator.commit_offsets(GROUP, member, 1, offsets, api_version=8) == {
        TP: ErrorCode.UNSUPPORTED_VERSION
    }
    assert (await coordinator.fetch_offsets(GROUP, [TP], member=(member, 0))).error is ErrorCode.STALE_MEMBER_EPOCH
    assert (await coordinator.fetch_offsets(GROUP, [TP], member=(member, 1))).error is ErrorCode.NONE


async def test_empty_groups_convert_either_way_whatever_the_policy() -> None:
    log = FakeOffsetsLog()
    coordinator = await coordinator_over(log, FakeClock(), policy=MigrationPolicy.DISABLED)
    # A classic group with members, no upgrade allowed: a consumer heartbeat is refused.
    (member,) = await stable_group(coordinator, 1)
    refused = await coordinator.consumer_group_heartbeat(joining())
    assert refused.error is ErrorCode.GROUP_ID_NOT_FOUND
    await coordinator.commit_offsets(GROUP, member.member_id, member.generation_id, {TP: OffsetCommitData(5)})
    await coordinator.leave_group(GROUP, [MemberIdentity(member.member_id)])

    # Empty now: the heartbeat converts it, writing the classic group's tombstone; offsets stay.
    joined = await coordinator.consumer_group_heartbeat(joining())
    assert joined.error is ErrorCode.NONE
    assert (await coordinator.fetch_offsets(GROUP, [TP])).partitions[TP].offset == 5
    overview = {g.group_id: g for g in (await coordinator.list_groups()).groups}[GROUP]
    assert (overview.group_type, overview.protocol_type, overview.state.value) == ("consumer", "consumer", "Stable")
    (classic_view,) = await coordinator.describe_groups([GROUP])
    assert classic_view.state == GroupState.DEAD.value and not classic_view.members

    # A consumer group with members takes classic members of the consumer protocol type only.
    assert (await join(coordinator, protocol_type="connect")).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    left = await beat(coordinator, joined, member_epoch=-1)
    assert left.error is ErrorCode.NONE
    # Empty: the JoinGroup converts it back into a classic group.
    rejoined = await join(coordinator)
    assert_ok(rejoined)
    assert_ok(await sync(coordinator, rejoined, {rejoined.member_id: b""}))
    (described,) = await coordinator.consumer_group_describe([GROUP])
    assert described.error is ErrorCode.GROUP_ID_NOT_FOUND
    # Reloaded from the log, the group is the classic one, with its offsets.
    reloaded = await coordinator_over(log, FakeClock())
    assert (await reloaded.consumer_group_describe([GROUP]))[0].error is ErrorCode.GROUP_ID_NOT_FOUND
    assert (await reloaded.describe_groups([GROUP]))[0].state == GroupState.STABLE.value
    assert (await reloaded.fetch_offsets(GROUP, [TP])).partitions[TP].offset == 5
    await coordinator.stop()


async def test_offset_delete_keeps_the_offsets_of_subscribed_topics() -> None:
    coordinator = await coordinator_over(FakeOffsetsLog())
    joined = await coordinator.consumer_group_heartbeat(joining())
    other = TopicPartition("other", 0)
    offsets = {TP: OffsetCommitData(4), other: OffsetCommitData(2)}
    await coordinator.commit_offsets(GROUP, joined.member_id or "", 1, offsets)
    result = await coordinator.delete_offsets(GROUP, [TP, other])
    assert result.partitions == {TP: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, other: ErrorCode.NONE}
    fetched = (await coordinator.fetch_offsets(GROUP, [TP, other])).partitions
    assert (fetched[TP].offset, fetched[other].offset) == (4, -1)


async def test_delete_groups_deletes_an_empty_consumer_group_and_its_offsets() -> None:
    log = FakeOffsetsLog()
    coordinator = await coordinator_over(log)
    joined = await coordinator.consumer_group_heartbeat(joining())
    await coordinator.commit_offsets(GROUP, joined.member_id or "", 1, {TP: OffsetCommitData(9)})
    assert await coordinator.delete_groups([GROUP]) == {GROUP: ErrorCode.NON_EMPTY_GROUP}
    assert (await beat(coordinator, joined, member_epoch=-1)).error is ErrorCode.NONE
    assert await coordinator.delete_groups([GROUP]) == {GROUP: ErrorCode.NONE}
    for c in (coordinator, await coordinator_over(log)):
        assert (await c.consumer_group_describe([GROUP]))[0].error is ErrorCode.GROUP_ID_NOT_FOUND
        assert (await c.fetch_offsets(GROUP, [TP])).partitions[TP].offset == -1
        assert GROUP not in {g.group_id for g in (await c.list_groups()).groups}


async def test_not_coordinator_for_a_partition_not_loaded_here() -> None:
    coordinator = GroupCoordinator(replace(CONFIG, offsets_topic_num_partitions=1), FakeOffsetsLog())
    assert (await coordinator.consumer_group_heartbeat(joining())).error is ErrorCode.NOT_COORDINATOR
    assert (await coordinator.consumer_group_describe([GROUP]))[0].error is ErrorCode.NOT_COORDINATOR


def test_consumer_group_settings_are_bounded_as_in_kafka() -> None:
    low = {
        "group.consumer.session.timeout.ms": "2000",
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "100",
    }
    config = GroupConfig.from_properties(low)
    assert (config.consumer.session_timeout_ms, config.consumer.heartbeat_interval_ms) == (2000, 500)
    # loglake's own, below Kafka's bounds: 50 ms, and an eighth of the interval by default.
    assert (config.consumer.unreleased_heartbeat_interval_ms, config.consumer.first_giver_heartbeat_interval_ms) == (
        50,
        62,
    )
    shorter = GroupConfig.from_properties(
        {
            **low,
            "loglake.group.consumer.unreleased.heartbeat.interval.ms": "20",
            "loglake.group.consumer.first.giver.heartbeat.interval.ms": "100",
        }
    )
    assert (shorter.consumer.unreleased_heartbeat_interval_ms, shorter.consumer.first_giver_heartbeat_interval_ms) == (
        20,
        100,
    )
    for props in (
        {"group.consumer.session.timeout.ms": "2000"},  # below Kafka's 45 s minimum
        {"group.consumer.heartbeat.interval.ms": "1000"},
        {**low, "group.consumer.heartbeat.interval.ms": "2000"},  # not below the session timeout
        {"group.consumer.assignors": "sticky"},
        {"loglake.group.consumer.unreleased.heartbeat.interval.ms": "0"},
        {"loglake.group.consumer.first.giver.heartbeat.interval.ms": "-1"},
    ):
        try:
            GroupConfig.from_properties(props)
        except ValueError:
            continue
        raise AssertionError(f"{props} accepted")


async def test_a_consumer_groups_offsets_expire_only_for_topics_it_no_longer_subscribes_to() -> None:
    log, clock = FakeOffsetsLog(), FakeClock()
    coordinator = await coordinator_over(log, clock)
    retention = CONFIG.offsets_retention_ms
    joined = await coordinator.consumer_group_heartbeat(joining())
    gone = TopicPartition("gone", 0)  # a topic it consumed before, no member subscribes to it
    await coordinator.commit_offsets(
        GROUP, joined.member_id or "", 1, {TP: OffsetCommitData(4), gone: OffsetCommitData(2)}
    )
    clock.advance_ms(retention - 1)
    assert await coordinator.expire_offsets() == 0
    clock.advance_ms(1)
    # By commit time, as Kafka has a consumer group's offsets expire, but not while subscribed.
    assert await coordinator.expire_offsets() == 1
    fetched = (await coordinator.fetch_offsets(GROUP, [TP, gone])).partitions
    assert (fetched[TP].offset, fetched[gone].offset) == (4, -1)

    # Empty, it subscribes to nothing: the rest expires, then the group itself goes.
    assert (await beat(coordinator, joined, member_epoch=-1)).error is ErrorCode.NONE
    assert await coordinator.expire_offsets() == 1
    for c in (coordinator, await coordinator_over(log, clock)):
        assert (await c.consumer_group_describe([GROUP]))[0].error is ErrorCode.GROUP_ID_NOT_FOUND
        assert (await c.fetch_offsets(GROUP, [TP])).partitions[TP].offset == -1
    await coordinator.stop()
