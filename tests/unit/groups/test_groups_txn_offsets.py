"""Transactional offset commits: held per producer until the transaction's marker reaches
the group's __consumer_offsets partition; COMMIT writes them, ABORT drops them."""

from __future__ import annotations

from groups_support import new_coordinator

from loglake.errors import ErrorCode
from loglake.groups import OffsetCommitData, TopicPartition

TP = TopicPartition("t", 0)
PID = 7


async def _stored(coordinator, group: str, require_stable: bool = False):
    return (await coordinator.fetch_offsets(group, [TP], require_stable=require_stable)).partitions[TP]


async def test_commit_marker_makes_offsets_visible():
    c = await new_coordinator()
    assert await c.commit_txn_offsets("g", PID, "", -1, {TP: OffsetCommitData(42)}) == {TP: ErrorCode.NONE}
    assert (await _stored(c, "g")).offset == -1  # not visible before the marker
    assert (await _stored(c, "g", require_stable=True)).error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    await c.complete_txn(PID, commit=False, partition=c.partition_for("g") + 1)  # another partition's marker
    assert (await _stored(c, "g", require_stable=True)).error is ErrorCode.UNSTABLE_OFFSET_COMMIT
    await c.complete_txn(PID, commit=True, partition=c.partition_for("g"))
    stored = await _stored(c, "g", require_stable=True)
    assert (stored.offset, stored.error) == (42, ErrorCode.NONE)


async def test_abort_marker_drops_offsets():
    c = await new_coordinator()
    await c.commit_txn_offsets("g", PID, "", -1, {TP: OffsetCommitData(42)})
    await c.complete_txn(PID, commit=False, partition=c.partition_for("g"))
    stored = await _stored(c, "g", require_stable=True)
    assert (stored.offset, stored.error) == (-1, ErrorCode.NONE)


async def test_unknown_generation_is_refused():
    c = await new_coordinator()
    assert await c.commit_txn_offsets("g", PID, "m", 3, {TP: OffsetCommitData(1)}) == {TP: ErrorCode.ILLEGAL_GENERATION}
