"""Committed offsets: commit/fetch rules, persistence and reload, retention, deletion."""

from __future__ import annotations

import asyncio
import struct

from groups_support import (
    GROUP,
    SESSION_MS,
    FakeClock,
    FakeOffsetsLog,
    join,
    new_coordinator,
    stable_group,
    sync,
)

from loglake.errors import ErrorCode, KafkaError
from loglake.groups import (
    GroupConfig,
    GroupCoordinator,
    MemberIdentity,
    OffsetCommitData,
    PartitionOffset,
    TopicPartition,
    java_string_hash,
)
from loglake.groups.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_key,
)

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
RETENTION_MS = 7 * 24 * 3600 * 1000


def commits(**offsets: int) -> dict[TopicPartition, OffsetCommitData]:
    """commits(t0=5, u0=7) -> {TopicPartition("t", 0): OffsetCommitData(5), ...}."""
    return {TopicPartition(name[:-1], int(name[-1])): OffsetCommitData(offset) for name, offset in offsets.items()}


def decoded(log: FakeOffsetsLog) -> list[tuple[object, object]]:
    """The records of partition 0 as (key, value); group metadata values show as "group"."""
    out: list[tuple[object, object]] = []
    for key, value in log.partitions[0]:
        k = decode_key(key)
        if isinstance(k, OffsetCommitKey):
            out.append((k, None if value is None else decode_offset_commit_value(value)))
        else:
            out.append((k, None if value is None else "group"))
    return out


async def fetched(coordinator: GroupCoordinator, *tps: TopicPartition, group: str = GROUP) -> dict[TopicPartition, int]:
    result = await coordinator.fetch_offsets(group, list(tps) if tps else None)
    assert result.error is ErrorCode.NONE
    return {tp: p.offset for tp, p in result.partitions.items()}


# ------------------------------------------------------------------ commit and fetch


async def test_member_commits_with_generation_checks() -> None:
    clock = FakeClock()
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log, clock)
    [a, b] = await stable_group(coordinator, 2)
    data = {T0: OffsetCommitData(10, leader_epoch=3, metadata="m"), T1: OffsetCommitData(20)}
    assert await coordinator.commit_offsets(GROUP, a.member_id, 1, data) == {T0: ErrorCode.NONE, T1: ErrorCode.NONE}

    assert await coordinator.commit_offsets(GROUP, a.member_id, 0, commits(t0=11)) == {T0: ErrorCode.ILLEGAL_GENERATION}
    assert await coordinator.commit_offsets(GROUP, "ghost", 1, commits(t0=11)) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}
    # A "simple" commit is refused once the group has members.
    assert await coordinator.commit_offsets(GROUP, "", -1, commits(t0=11)) == {T0: ErrorCode.UNKNOWN_MEMBER_ID}

    result = await coordinator.fetch_offsets(GROUP, [T0, T1, U0])
    assert result.partitions == {
        T0: PartitionOffset(10, 3, "m"),
        T1: PartitionOffset(20, -1, ""),
        U0: PartitionOffset(-1, -1, ""),
    }
    assert await fetched(coordinator) == {T0: 10, T1: 20}  # all committed partitions

    # Persisted as OffsetCommitKey v1 / OffsetCommitValue v3 after the group record.
    offsets = [(k, v) for k, v in decoded(log) if isinstance(k, OffsetCommitKey)]
    assert offsets == [
        (OffsetCommitKey(GROUP, "t", 0), OffsetCommitValue(10, 3, "m", int(clock() * 1000))),
        (OffsetCommitKey(GROUP, "t", 1), OffsetCommitValue(20, -1, "", int(clock() * 1000))),
    ]
    assert log.partitions[0][1][0][:2] == b"\x00\x01" and log.partitions[0][1][1][:2] == b"\x00\x03"


async def test_commits_during_rebalance() -> None:
    coordinator = await new_coordinator()
    [a] = await stable_group(coordinator, 1)
    # PreparingRebalance: still accepted (the member learns of the rebalance from heartbeats).
    newcomer = asyncio.ensure_future(join(coordinator))
    await asyncio.sleep(0.01)
    assert await coordinator.commit_offsets(GROUP, a.member_id, 1, commits(t0=1)) == {T0: ErrorCode.NONE}
    rejoined = await join(coordinator, a.member_id)
    await newcomer
    # CompletingRebalance: the member has its generation but not its assignment yet.
    assert await coordinator.commit_offsets(GROUP, a.member_id, 2, commits(t0=2)) == {
        T0: ErrorCode.REBALANCE_IN_PROGRESS
    }
    assert rejoined.generation_id == 2


async def test_simple_commits() -> None:
    coordinator = await new_coordinator()
    # No group yet: a commit without group management creates one just for offsets.
    assert await coordinator.commit_offsets("standalone", "", -1, commits(t0=5)) == {T0: ErrorCode.NONE}
    assert await fetched(coordinator, T0, group="standalone") == {T0: 5}
    [listed] = (await coordinator.list_groups()).groups
    assert (listed.group_id, listed.protocol_type, listed.state) == ("standalone", "", "Empty")
    # Claiming a generation of a group that does not exist is refused.
    assert await coordinator.commit_offsets("nobody", "m", 3, commits(t0=1)) == {T0: ErrorCode.ILLEGAL_GENERATION}
    # The empty group id is accepted by the offset APIs, as in Kafka.
    assert await coordinator.commit_offsets("", "", -1, commits(t0=1)) == {T0: ErrorCode.NONE}
    assert await fetched(coordinator, T0, group="") == {T0: 1}

    # An Empty consumer group (members gone) takes simple commits too.
    [a] = await stable_group(coordinator, 1)
    await coordinator.leave_group(GROUP, [MemberIdentity(a.member_id)])
    assert await coordinator.commit_offsets(GROUP, "", -1, commits(t0=9)) == {T0: ErrorCode.NONE}


async def test_fetch_of_unknown_group_and_not_coordinator() -> None:
    coordinator = await new_coordinator(offsets_topic_num_partitions=3)
    result = await coordinator.fetch_offsets("unknown", [T0])
    assert (result.error, result.partitions) == (ErrorCode.NONE, {T0: PartitionOffset(-1, -1, "")})
    assert (await coordinator.fetch_offsets("unknown")).partitions == {}
    partition = coordinator.partition_for(GROUP)
    coordinator.unload_partition(partition)
    assert (await coordinator.fetch_offsets(GROUP, [T0])).error is ErrorCode.NOT_COORDINATOR
    assert await coordinator.commit_offsets(GROUP, "", -1, commits(t0=1)) == {T0: ErrorCode.NOT_COORDINATOR}


async def test_metadata_too_large() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log, offset_metadata_max_bytes=8)
    data = {
        T0: OffsetCommitData(1, metadata="x" * 9),
        T1: OffsetCommitData(2, metadata="12345678"),
        U0: OffsetCommitData(3, metadata=None),
    }
    assert await coordinator.commit_offsets(GROUP, "", -1, data) == {
        T0: ErrorCode.OFFSET_METADATA_TOO_LARGE,
        T1: ErrorCode.NONE,
        U0: ErrorCode.NONE,
    }
    result = await coordinator.fetch_offsets(GROUP)
    assert result.partitions == {T1: PartitionOffset(2, -1, "12345678"), U0: PartitionOffset(3, -1, "")}
    # Nothing valid at all: nothing is written.
    before = len(log.partitions[0])
    assert await coordinator.commit_offsets(GROUP, "", -1, {T0: OffsetCommitData(1, metadata="y" * 9)}) == {
        T0: ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert len(log.partitions[0]) == before


async def test_failed_append_is_mapped_and_not_applied() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    log.fail_with = KafkaError(ErrorCode.MESSAGE_TOO_LARGE)
    assert await coordinator.commit_offsets(GROUP, "", -1, commits(t0=1)) == {T0: ErrorCode.INVALID_COMMIT_OFFSET_SIZE}
    log.fail_with = KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert await coordinator.commit_offsets(GROUP, "", -1, commits(t0=1)) == {T0: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    log.fail_with = OSError("disk gone")
    assert await coordinator.commit_offsets(GROUP, "", -1, commits(t0=1)) == {T0: ErrorCode.NOT_COORDINATOR}
    assert await fetched(coordinator, T0) == {T0: -1}


async def test_require_stable_waits_for_a_commit_in_flight() -> None:
    release = asyncio.Event()

    class SlowLog(FakeOffsetsLog):
        async def append(
            self, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None
        ) -> None:
            await release.wait()
            await super().append(partition, records, producer)

    coordinator = await new_coordinator(SlowLog())
    commit = asyncio.ensure_future(coordinator.commit_offsets(GROUP, "", -1, commits(t0=4)))
    await asyncio.sleep(0.01)
    # As Kafka 4: not UNSTABLE_OFFSET_COMMIT (only a transaction's offsets are unstable), but
    # the answer once the write is done; a plain fetch answers what is committed now.
    stable = asyncio.ensure_future(coordinator.fetch_offsets(GROUP, [T0], require_stable=True))
    everything = asyncio.ensure_future(coordinator.fetch_offsets(GROUP, None, require_stable=True))
    other = await coordinator.fetch_offsets(GROUP, [T1], require_stable=True)  # not being written: at once
    assert other.partitions[T1] == PartitionOffset(-1, -1, "")
    assert (await coordinator.fetch_offsets(GROUP, [T0])).partitions[T0] == PartitionOffset(-1, -1, "")
    await asyncio.sleep(0.01)
    assert not stable.done() and not everything.done()
    release.set()
    assert await commit == {T0: ErrorCode.NONE}
    assert (await stable).partitions[T0] == PartitionOffset(4, -1, "")
    assert (await everything).partitions == {T0: PartitionOffset(4, -1, "")}
    # It waits only for the commits in flight when it came, not for later ones.
    release.clear()
    first = asyncio.ensure_future(coordinator.commit_offsets(GROUP, "", -1, commits(t0=5)))
    await asyncio.sleep(0.01)
    stable = asyncio.ensure_future(coordinator.fetch_offsets(GROUP, [T0], require_stable=True))
    await asyncio.sleep(0.01)
    release.set()
    await first
    release.clear()
    later = asyncio.ensure_future(coordinator.commit_offsets(GROUP, "", -1, commits(t0=6)))
    assert (await asyncio.wait_for(stable, 5)).partitions[T0] == PartitionOffset(5, -1, "")
    release.set()
    await later


async def test_a_commit_in_flight_keeps_its_offset_and_its_group_from_expiring() -> None:
    """An expiry pass during a plain commit's write: the partition being written keeps its
    offset, and a group whose only offsets are being written is not retired, so the commit
    lands once written."""
    release = asyncio.Event()

    class HeldLog(FakeOffsetsLog):
        hold = False  # appends started while set wait for `release`

        async def append(
            self, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None
        ) -> None:
            if self.hold:
                await release.wait()
            await super().append(partition, records, producer)

    log, clock = HeldLog(), FakeClock()
    coordinator = await new_coordinator(log, clock)
    await coordinator.commit_offsets(GROUP, "", -1, commits(t0=4, t1=7))
    clock.advance_ms(RETENTION_MS)
    log.hold = True
    rewrite = asyncio.ensure_future(coordinator.commit_offsets(GROUP, "", -1, commits(t0=5)))
    fresh = asyncio.ensure_future(coordinator.commit_offsets("fresh", "", -1, commits(t0=1)))
    await asyncio.sleep(0.01)
    log.hold = False
    assert await coordinator.expire_offsets() == 1  # T1 only
    assert not rewrite.done() and not fresh.done()
    release.set()
    assert await rewrite == {T0: ErrorCode.NONE} and await fresh == {T0: ErrorCode.NONE}
    assert await fetched(coordinator) == {T0: 5}
    assert await fetched(coordinator, group="fresh") == {T0: 1}


# ------------------------------------------------------------------ reload


async def test_restart_restores_offsets_and_group_metadata() -> None:
    log = FakeOffsetsLog()
    first = await new_coordinator(log)
    [a, b] = await stable_group(first, 2, partitions_per_topic={"t": 4})
    await first.commit_offsets(GROUP, a.member_id, 1, commits(t0=10, t1=11))
    await first.commit_offsets(GROUP, b.member_id, 1, commits(t0=12))  # the later commit wins
    await first.commit_offsets("simple", "", -1, commits(u0=3))
    await first.commit_offsets("deleted", "", -1, commits(u0=1))
    assert await first.delete_groups(["deleted"]) == {"deleted": ErrorCode.NONE}
    before = (await first.describe_groups([GROUP]))[0]
    await first.stop()

    second = await new_coordinator(log)
    assert await fetched(second) == {T0: 12, T1: 11}
    assert await fetched(second, group="simple") == {U0: 3}
    assert (await second.fetch_offsets("deleted")).partitions == {}
    after = (await second.describe_groups([GROUP]))[0]
    assert after == before  # state, protocol, members with metadata and assignments
    assert {g.group_id for g in (await second.list_groups()).groups} == {GROUP, "simple"}

    # The loaded members carry on in their generation, or expire if they are gone.
    assert await second.heartbeat(GROUP, a.member_id, 1) is ErrorCode.NONE
    await asyncio.sleep(SESSION_MS / 1000 / 2)
    assert await second.heartbeat(GROUP, a.member_id, 1) is ErrorCode.NONE
    await asyncio.sleep(SESSION_MS / 1000 / 2 + 0.05)
    assert await second.heartbeat(GROUP, a.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = await join(second, a.member_id)
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a.member_id]
    assert_synced = await sync(second, rejoined, {a.member_id: b"x"})
    assert assert_synced.assignment == b"x"


async def test_reload_of_an_empty_group_keeps_its_generation() -> None:
    log = FakeOffsetsLog()
    first = await new_coordinator(log)
    [a] = await stable_group(first, 1)
    await first.commit_offsets(GROUP, a.member_id, 1, commits(t0=7))
    await first.leave_group(GROUP, [MemberIdentity(a.member_id)])
    await asyncio.sleep(0.01)  # the Empty group's record is written in the background
    second = await new_coordinator(log)
    [described] = await second.describe_groups([GROUP])
    assert (described.state, described.protocol_type) == ("Empty", "consumer")
    joined = await join(second)
    assert joined.generation_id == 3  # 1 (joined), 2 (emptied), 3
    assert await fetched(second, T0) == {T0: 7}


# ------------------------------------------------------------------ retention


async def test_offsets_of_empty_group_expire_retention_after_it_emptied() -> None:
    clock = FakeClock()
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log, clock)
    [a] = await stable_group(coordinator, 1)
    await coordinator.commit_offsets(GROUP, a.member_id, 1, commits(t0=1, t1=2))
    clock.advance_ms(RETENTION_MS)  # the commits are old, but the group was not Empty
    assert await coordinator.expire_offsets() == 0
    await coordinator.leave_group(GROUP, [MemberIdentity(a.member_id)])
    emptied_ms = int(clock() * 1000)
    await asyncio.sleep(0.01)

    assert await coordinator.expire_offsets(emptied_ms + RETENTION_MS - 1) == 0
    assert await coordinator.expire_offsets(emptied_ms + RETENTION_MS) == 2
    assert await fetched(coordinator, T0) == {T0: -1}
    assert (await coordinator.describe_groups([GROUP]))[0].state == "Dead"  # gone
    tail = decoded(log)[-3:]
    assert tail == [
        (OffsetCommitKey(GROUP, "t", 0), None),
        (OffsetCommitKey(GROUP, "t", 1), None),
        (GroupMetadataKey(GROUP), None),
    ]
    restarted = await new_coordinator(log)
    assert (await restarted.list_groups()).groups == ()


async def test_simple_group_offsets_expire_by_commit_time() -> None:
    clock = FakeClock()
    coordinator = await new_coordinator(clock=clock)
    await coordinator.commit_offsets(GROUP, "", -1, commits(t0=1))
    clock.advance_ms(1000)
    await coordinator.commit_offsets(GROUP, "", -1, commits(t1=1))
    now = int(clock() * 1000)
    assert await coordinator.expire_offsets(now - 1000 + RETENTION_MS) == 1
    assert await fetched(coordinator) == {T1: 1}
    assert await coordinator.expire_offsets(now + RETENTION_MS) == 1
    assert (await coordinator.list_groups()).groups == ()


async def test_old_record_with_expire_timestamp_expires_then() -> None:
    log = FakeOffsetsLog()
    # An OffsetCommitValue v1 (Kafka < 2.1, retention chosen by the committer).
    value_v1 = struct.pack(">hq", 1, 8) + struct.pack(">h", 0) + struct.pack(">qq", 1_000, 5_000)
    log.partitions[0].append((encode_key(OffsetCommitKey(GROUP, "t", 0)), value_v1))
    coordinator = await new_coordinator(log)
    assert await fetched(coordinator, T0) == {T0: 8}
    assert await coordinator.expire_offsets(4_999) == 0
    assert await coordinator.expire_offsets(5_000) == 1


async def test_stable_group_expires_only_unsubscribed_topics() -> None:
    clock = FakeClock()
    coordinator = await new_coordinator(clock=clock)
    [a] = await stable_group(coordinator, 1)  # subscribed to "t"
    await coordinator.commit_offsets(GROUP, a.member_id, 1, commits(t0=1, u0=2))
    assert await coordinator.expire_offsets(int(clock() * 1000) + RETENTION_MS) == 1
    assert await fetched(coordinator) == {T0: 1}


async def test_periodic_expiry_and_stop() -> None:
    clock = FakeClock()
    coordinator = await new_coordinator(clock=clock, offsets_retention_ms=1000, offsets_retention_check_interval_ms=20)
    await coordinator.start()
    await coordinator.commit_offsets(GROUP, "", -1, commits(t0=1))
    clock.advance_ms(1000)
    for _ in range(50):
        await asyncio.sleep(0.02)
        if not (await coordinator.list_groups()).groups:
            break
    assert (await coordinator.list_groups()).groups == ()
    await coordinator.stop()
    assert await coordinator.heartbeat(GROUP, "m", 1) is ErrorCode.COORDINATOR_NOT_AVAILABLE


# ------------------------------------------------------------------ deletion


async def test_delete_groups() -> None:
    log = FakeOffsetsLog()
    coordinator = await new_coordinator(log)
    await stable_group(coordinator, 1, group="busy")
    [a] = await stable_group(coordinator, 1)
    await coordinator.commit_offsets(GROUP, a.member_id, 1, commits(t0=5))
    await coordinator.leave_group(GROUP, [MemberIdentity(a.member_id)])
    await asyncio.sleep(0.01)

    assert await coordinator.delete_groups([GROUP, "busy", "nobody"]) == {
        GROUP: ErrorCode.NONE,
        "busy": ErrorCode.NON_EMPTY_GROUP,
        "nobody": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert decoded(log)[-2:] == [(OffsetCommitKey(GROUP, "t", 0), None), (GroupMetadataKey(GROUP), None)]
    assert await coordinator.delete_groups([GROUP]) == {GROUP: ErrorCode.GROUP_ID_NOT_FOUND}
    assert (await coordinator.describe_groups([GROUP]))[0].state == "Dead"
    # A deleted group can be started afresh.
    assert (await join(coordinator)).generation_id == 1

    restarted = await new_coordinator(log)
    assert (await restarted.fetch_offsets(GROUP)).partitions == {}


# ------------------------------------------------------------------ partitioning and config


def test_partition_for_uses_java_hash_code_and_kafka_abs() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair
    coordinator = GroupCoordinator(GroupConfig(), FakeOffsetsLog())
    assert coordinator.partition_for("hello") == 99162322 % 50
    # Kafka's Utils.abs negates (it is not the partitioner's & 0x7fffffff) ...
    assert coordinator.partition_for("Hello World") == 862545276 % 50 == 26
    # ... and maps Integer.MIN_VALUE to 0.
    assert coordinator.partition_for("polygenelubricants") == 0


def test_config_from_properties() -> None:
    config = GroupConfig.from_properties(
        {
            "group.min.session.timeout.ms": "100",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",
            "offsets.retention.minutes": "60",
            "unrelated": "x",
        }
    )
    assert config == GroupConfig(
        group_min_session_timeout_ms=100,
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=3,
        offsets_retention_ms=3_600_000,
    )
