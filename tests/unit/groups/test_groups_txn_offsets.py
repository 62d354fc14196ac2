"""Transactional offset commits: written in the producer's transaction and held until its
marker reaches the group's __consumer_offsets partition; COMMIT makes them the group's,
ABORT drops them; a coordinator loading the partition replays them the same way."""

from __future__ import annotations

from groups_support import FakeOffsetsLog, new_coordinator

from loglake.errors import ErrorCode
from loglake.groups import OffsetCommitData, TopicPartition
from loglake.internal_topics import TransactionalRecord

TP = TopicPartition("t", 0)
PID = 7
EPOCH = 2


async def _stored(coordinator, group: str, require_stable: bool = False):
    return (await coordinator.fetch_offsets(group, [TP], require_stable=require_stable)).partitions[TP]


async def _end_txn(coordinator, log: FakeOffsetsLog, group: str, commit: bool) -> None:
    """The marker on the group's partition, as the broker's MarkerWriter writes it."""
    partition = coordinator.partition_for(group)
    log.write_marker(partition, PID, commit)
    coordinator.complete_txn(PID, commit, partition)


async def test_commit_marker_makes_offsets_visible():
    log = FakeOffsetsLog()
    c = await new_coordinator(log)
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", -1, {TP: OffsetCommitData(42)}) == {TP: ErrorCode.NONE}
    (written,) = log.partitions[c.partition_for("g")]
    assert isinstance(written, TransactionalRecord) and written.producer_id == PID
    assert (await _stored(c, "g")).offset == -1  # not visible before the marker
    assert (await _stored(c, "g", require_stable=True)).error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    c.complete_txn(PID, commit=False, partition=c.partition_for("g") + 1)  # another partition's marker
    assert (await _stored(c, "g", require_stable=True)).error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    await _end_txn(c, log, "g", commit=True)
    stored = await _stored(c, "g", require_stable=True)
    assert (stored.offset, stored.error) == (42, ErrorCode.NONE)


async def test_abort_marker_drops_offsets():
    log = FakeOffsetsLog()
    c = await new_coordinator(log)
    await c.commit_txn_offsets("g", PID, EPOCH, "", -1, {TP: OffsetCommitData(42)})
    await _end_txn(c, log, "g", commit=False)
    stored = await _stored(c, "g", require_stable=True)
    assert (stored.offset, stored.error) == (-1, ErrorCode.NONE)


async def test_a_new_coordinator_replays_transactions_from_the_log():
    log = FakeOffsetsLog()
    c = await new_coordinator(log)
    await c.commit_txn_offsets("g", PID, EPOCH, "", -1, {TP: OffsetCommitData(10)})
    await _end_txn(c, log, "g", commit=True)
    await c.commit_txn_offsets("g", PID, EPOCH, "", -1, {TP: OffsetCommitData(20)})
    await _end_txn(c, log, "g", commit=False)
    await c.commit_txn_offsets("g", PID, EPOCH, "", -1, {TP: OffsetCommitData(30)})  # still open

    failed_over = await new_coordinator(log)
    stored = await _stored(failed_over, "g")
    assert stored.offset == 10  # committed: visible; aborted: gone; open: held
    assert (await _stored(failed_over, "g", require_stable=True)).error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    await _end_txn(failed_over, log, "g", commit=True)
    assert (await _stored(failed_over, "g", require_stable=True)).offset == 30


async def test_a_failed_write_holds_nothing():
    log = FakeOffsetsLog()
    c = await new_coordinator(log)
    log.fail_with = OSError("disk gone")
    assert await c.commit_txn_offsets("g", PID, EPOCH, "", -1, {TP: OffsetCommitData(42)}) == {
        TP: ErrorCode.NOT_COORDINATOR
    }
    log.fail_with = None
    assert (await _stored(c, "g", require_stable=True)).error is ErrorCode.NONE


async def test_unknown_generation_is_refused():
    c = await new_coordinator()
    assert await c.commit_txn_offsets("g", PID, EPOCH, "m", 3, {TP: OffsetCommitData(1)}) == {
        TP: ErrorCode.ILLEGAL_GENERATION
    }
