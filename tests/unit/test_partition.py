"""Partition replication state: followers' LEOs, the high watermark, ISR expansion and
shrinking (with a fake clock), and ISR writes that lose the compare-and-set."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_storage_support import make_batch

from loglake.cluster.partition import Partition, ReplicaState
from loglake.config import LogConfig
from loglake.coordination.model import PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.log import Log
from loglake.storage.log_dir_failure import LogDirFailureChannel

LAG_MS = 500


def state(leader: int, epoch: int, isr: tuple[int, ...], version: int = 0) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1, version=version)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig())
    yield log
    log.close()


def leader(log: Log, replicas=(1, 2, 3), isr=(1, 2, 3), epoch: int = 0, now: int = 0) -> Partition:
    p = Partition("t", 0, "id", log, broker_id=1)
    p.make_leader(state(1, epoch, isr), replicas, now_ms=now)
    return p


def append(p: Partition, n: int = 1) -> None:
    for _ in range(n):
        p.append_records_to_leader(make_batch(1), required_acks=1)


class Writer:
    """A compare-and-set store of one partition state."""

    def __init__(self, stored: PartitionState, fail: bool = False) -> None:
        self.stored = stored
        self.fail = fail
        self.calls: list[PartitionState] = []

    def __call__(self, topic: str, partition: int, proposed: PartitionState) -> PartitionState | None:
        self.calls.append(proposed)
        if self.fail or proposed.version != self.stored.version:
            return None
        self.stored = PartitionState(
            proposed.leader, proposed.leader_epoch, proposed.isr, proposed.controller_epoch, proposed.version + 1
        )
        return self.stored


# High watermark -------------------------------------------------------------------------------


def test_single_replica_hw_follows_leo(log: Log) -> None:
    p = leader(log, replicas=(1,), isr=(1,))
    append(p, 3)
    assert p.high_watermark == 3


def test_hw_is_min_leo_over_isr_and_waits_for_unknown_followers(log: Log) -> None:
    p = leader(log)
    append(p, 3)
    assert p.high_watermark == 0  # followers' LEOs are unknown until they fetch
    p.update_follower_fetch_state(2, 3, now_ms=10)
    assert p.high_watermark == 0
    p.update_follower_fetch_state(3, 2, now_ms=10)
    assert p.high_watermark == 2
    p.update_follower_fetch_state(3, 3, now_ms=20)
    assert p.high_watermark == 3
    # The HW never moves back, even if a follower reports a lower offset.
    p.update_follower_fetch_state(2, 1, now_ms=30)
    assert p.high_watermark == 3


def test_hw_ignores_followers_outside_the_isr(log: Log) -> None:
    p = leader(log, isr=(1, 2))
    append(p, 2)
    p.update_follower_fetch_state(2, 2, now_ms=1)
    assert p.high_watermark == 2


def test_hw_does_not_advance_before_the_current_epoch_start(log: Log) -> None:
    p = leader(log, epoch=0)
    append(p, 5)
    p.update_follower_fetch_state(2, 2, now_ms=1)
    p.update_follower_fetch_state(3, 2, now_ms=1)
    assert p.high_watermark == 2
    # Re-elected at epoch 1: the epoch starts at 5 and followers keep their LEOs.
    p.make_leader(state(1, 1, (1, 2, 3)), (1, 2, 3), now_ms=2)
    assert p.leader_epoch_start_offset == 5
    assert log.leader_epoch_cache.entries[-1].epoch == 1
    p.update_follower_fetch_state(2, 4, now_ms=3)
    p.update_follower_fetch_state(3, 4, now_ms=3)
    assert p.high_watermark == 2  # 4 is below the epoch's start
    p.update_follower_fetch_state(2, 5, now_ms=4)
    p.update_follower_fetch_state(3, 5, now_ms=4)
    assert p.high_watermark == 5


def test_new_leader_forgets_follower_leos(log: Log) -> None:
    p = Partition("t", 0, "id", log, broker_id=1)
    p.make_follower(state(2, 0, (1, 2)), (1, 2))
    log.append_as_follower(_stamped_batches(0, 3, epoch=0))
    p.update_follower_high_watermark(2)
    assert p.make_leader(state(1, 1, (1, 2)), (1, 2), now_ms=0)
    assert p.followers[2].log_end_offset == -1
    assert p.high_watermark == 2
    append(p)
    p.update_follower_fetch_state(2, 4, now_ms=1)
    assert p.high_watermark == 4


def test_hw_change_callback(log: Log) -> None:
    seen = []
    p = Partition(
        "t", 0, "id", log, broker_id=1, on_high_watermark_change=lambda part: seen.append(part.high_watermark)
    )
    p.make_leader(state(1, 0, (1, 2)), (1, 2), now_ms=0)
    append(p, 2)
    assert seen == []
    p.update_follower_fetch_state(2, 1, now_ms=1)
    p.update_follower_fetch_state(2, 2, now_ms=2)
    assert seen == [1, 2]


# Follower fetch state ---------------------------------------------------------------------------


def test_last_caught_up_time_follows_kafkas_rule() -> None:
    r = ReplicaState(2)
    r.reset_last_caught_up_time(leader_end_offset=0, now_ms=0, last_caught_up_time_ms=0)
    r.update_fetch_state(fetch_offset=0, fetch_time_ms=100, leader_end_offset=10)
    # 0 >= the leader's LEO at the previous fetch (0): caught up as of that fetch.
    assert r.last_caught_up_time_ms == 0
    r.update_fetch_state(fetch_offset=5, fetch_time_ms=200, leader_end_offset=20)
    assert r.last_caught_up_time_ms == 0  # 5 < 10: neither now nor at the previous fetch
    r.update_fetch_state(fetch_offset=20, fetch_time_ms=300, leader_end_offset=30)
    assert r.last_caught_up_time_ms == 200  # reached the LEO of the previous fetch (20)
    r.update_fetch_state(fetch_offset=30, fetch_time_ms=400, leader_end_offset=30)
    assert r.last_caught_up_time_ms == 400  # at the leader's LEO now
    assert r.log_end_offset == 30


def test_an_idle_fetch_at_the_log_end_records_only_the_fetch(log: Log) -> None:
    """The fast path of an in-sync follower fetching at the log end, with the HW there:
    the same follower state as the full update, and it still counts as caught up."""
    p = leader(log, replicas=(1, 2, 3), isr=(1, 2, 3), now=0)
    append(p, 2)
    p.update_follower_fetch_state(2, 2, now_ms=10)
    p.update_follower_fetch_state(3, 2, now_ms=10)
    assert p.high_watermark == 2
    assert p.follower_fetch_at_log_end(2, 2, now_ms=900)
    twin = ReplicaState(2, 2, 2, 10, 10)
    twin.update_fetch_state(2, 900, 2)
    assert p.followers[2] == twin
    # Caught up at 900: a write now does not make it lag from its fetch at 10.
    append(p)
    assert p.maybe_shrink_isr(900 + LAG_MS, LAG_MS) == (1, 2)  # 3 is out, 2 stays


@pytest.mark.parametrize(
    "case", ["behind the log end", "high watermark behind", "out of the isr", "not the leader", "dir offline"]
)
def test_fetches_that_may_move_something_take_the_full_path(log: Log, tmp_path: Path, case: str) -> None:
    """Whatever the fast path would get wrong (a HW to move, an ISR to expand, a read to
    fail) makes it decline and leave the state untouched."""
    p = leader(log, replicas=(1, 2, 3), isr=(1, 2) if case == "out of the isr" else (1, 2, 3), now=0)
    append(p, 2)
    p.update_follower_fetch_state(2, 2, now_ms=10)
    p.update_follower_fetch_state(3, 1 if case == "high watermark behind" else 2, now_ms=10)
    if case == "behind the log end":
        append(p)
    elif case == "high watermark behind":
        assert p.high_watermark == 1  # follower 2 is at the log end, the HW waits for 3
    elif case == "not the leader":
        p.make_follower(state(2, 1, (1, 2, 3)), (1, 2, 3))
    elif case == "dir offline":
        log.failure_channel = LogDirFailureChannel()
        log.failure_channel.report(tmp_path, "a test", OSError("gone"))
    before = {r: replace(f) for r, f in p.followers.items()}
    assert not p.follower_fetch_at_log_end(3 if case == "out of the isr" else 2, 2, now_ms=900)
    assert p.followers == before


def test_fetch_from_non_replica_or_on_follower_is_refused(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1, 2))
    with pytest.raises(KafkaError) as e:
        p.update_follower_fetch_state(7, 0, now_ms=1)
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    p.make_follower(state(2, 1, (1, 2)), (1, 2))
    with pytest.raises(KafkaError) as e:
        p.update_follower_fetch_state(2, 0, now_ms=1)
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_check_leader_epoch(log: Log) -> None:
    p = leader(log, epoch=3)
    p.check_leader_epoch(-1)
    p.check_leader_epoch(3)
    with pytest.raises(KafkaError) as e:
        p.check_leader_epoch(2)
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KafkaError) as e:
        p.check_leader_epoch(4)
    assert e.value.code == ErrorCode.UNKNOWN_LEADER_EPOCH


# ISR expansion ------------------------------------------------------------------------------------


def test_follower_rejoins_isr_when_it_reaches_the_hw(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1,))
    append(p, 4)
    assert p.high_watermark == 4
    assert p.update_follower_fetch_state(2, 2, now_ms=1) is False
    assert p.update_follower_fetch_state(2, 4, now_ms=2) is True
    writer = Writer(state(1, 0, (1,), version=7))
    p.state = writer.stored
    assert p.update_isr(p.isr_with(2), writer)
    assert p.isr == (1, 2)
    assert writer.calls == [state(1, 0, (1, 2), version=7)]
    assert p.state.version == 8
    assert p.update_follower_fetch_state(2, 4, now_ms=3) is False  # already in


def test_follower_must_reach_the_epoch_start_to_rejoin(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1,), epoch=0)
    append(p, 3)
    p.make_leader(state(1, 1, (1,)), (1, 2), now_ms=0)
    append(p, 1)
    # HW 4; a follower at 3 is below both the HW and the epoch start (3 is the start: ok)
    assert p.leader_epoch_start_offset == 3
    assert p.update_follower_fetch_state(2, 3, now_ms=1) is False
    assert p.update_follower_fetch_state(2, 4, now_ms=1) is True


def test_no_second_isr_change_while_one_is_in_flight(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1,))
    proposed = p.propose_isr((1, 2))
    assert p.isr_update_in_flight
    assert p.update_follower_fetch_state(2, 0, now_ms=1) is False
    assert p.maybe_shrink_isr(10_000, LAG_MS) is None
    assert p.complete_isr_update(proposed, proposed)
    assert not p.isr_update_in_flight and p.isr == (1, 2)


def test_an_expansion_in_flight_holds_the_high_watermark_at_the_joining_follower(log: Log) -> None:
    # Kafka's maximal ISR: once the new ISR may be in the store, a controller may make the
    # joining follower leader, so nothing it lacks may be acknowledged meanwhile.
    p = leader(log, replicas=(1, 2, 3), isr=(1, 3))
    append(p, 4)
    p.update_follower_fetch_state(3, 4, now_ms=1)
    assert p.high_watermark == 4
    assert p.update_follower_fetch_state(2, 4, now_ms=1) is True
    proposed = p.propose_isr((1, 3, 2))
    append(p, 2)
    p.update_follower_fetch_state(3, 6, now_ms=2)
    assert p.high_watermark == 4  # follower 2 is at 4
    p.update_follower_fetch_state(2, 5, now_ms=2)
    assert p.high_watermark == 5
    assert p.complete_isr_update(proposed, None) is False  # not written: back to (1, 3)
    assert p.high_watermark == 5 and p.isr == (1, 3)
    p.update_follower_fetch_state(3, 6, now_ms=3)
    assert p.high_watermark == 6


# ISR shrinking --------------------------------------------------------------------------------------


def test_isr_shrinks_without_followers_that_lag(log: Log) -> None:
    p = leader(log, now=0)
    append(p, 2)
    p.update_follower_fetch_state(2, 2, now_ms=100)  # caught up at 100
    # Nobody has lagged longer than the limit yet (3 counts as caught up when elected).
    assert p.maybe_shrink_isr(LAG_MS, LAG_MS) is None
    assert p.maybe_shrink_isr(LAG_MS + 1, LAG_MS) == (1, 2)
    append(p)  # now 2 is behind too, last caught up at 100
    assert p.maybe_shrink_isr(LAG_MS + 100, LAG_MS) == (1, 2)
    assert p.maybe_shrink_isr(LAG_MS + 101, LAG_MS) == (1,)


def test_a_follower_at_the_leo_is_never_out_of_sync(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1, 2), now=0)
    append(p, 2)
    p.update_follower_fetch_state(2, 2, now_ms=1)
    assert p.maybe_shrink_isr(1_000_000, LAG_MS) is None
    append(p)
    assert p.maybe_shrink_isr(1_000_000, LAG_MS) == (1,)


def test_a_follower_fetching_steadily_behind_a_busy_leader_stays(log: Log) -> None:
    """Each fetch reaches the LEO the leader had at the previous fetch: caught up then."""
    p = leader(log, replicas=(1, 2), isr=(1, 2), now=0)
    now = 0
    fetch = 0
    for _ in range(10):
        append(p, 3)
        now += 300
        p.update_follower_fetch_state(2, fetch, now_ms=now)
        fetch = p.log_end_offset
        assert p.maybe_shrink_isr(now, LAG_MS) is None


def test_shrink_written_through_the_writer_and_hw_advances(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1, 2), now=0)
    append(p, 3)
    assert p.high_watermark == 0
    writer = Writer(state(1, 0, (1, 2), version=0))
    new_isr = p.maybe_shrink_isr(LAG_MS + 1, LAG_MS)
    assert new_isr == (1,)
    assert p.update_isr(new_isr, writer)
    assert p.isr == (1,)
    assert p.high_watermark == 3  # the leader alone holds everything


def test_failed_isr_write_is_not_applied(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1, 2), now=0)
    append(p, 3)
    writer = Writer(state(1, 0, (1, 2), version=5))  # someone else wrote since we knew v0
    new_isr = p.maybe_shrink_isr(LAG_MS + 1, LAG_MS)
    assert p.update_isr(new_isr, writer) is False
    assert p.isr == (1, 2)
    assert p.state.version == 0
    assert p.high_watermark == 0
    assert not p.isr_update_in_flight
    assert writer.stored.isr == (1, 2)
    # The controller's next LeaderAndIsr brings the current state; then the write works.
    p.make_leader(state(1, 1, (1, 2), version=5), (1, 2), now_ms=0)
    assert p.update_isr(p.maybe_shrink_isr(LAG_MS + 1, LAG_MS), writer)
    assert p.isr == (1,)


def test_isr_write_completed_after_losing_leadership_is_ignored(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1, 2))
    proposed = p.propose_isr((1,))
    p.make_follower(state(2, 1, (2,)), (1, 2))
    assert p.complete_isr_update(proposed, proposed) is False
    assert p.isr == (2,)


def test_same_epoch_state_applies_only_if_newer(log: Log) -> None:
    p = leader(log, replicas=(1, 2), isr=(1, 2))
    writer = Writer(state(1, 0, (1, 2), version=0))
    p.update_isr((1,), writer)
    assert p.state.version == 1
    p.update_state_if_newer(state(1, 0, (1, 2), version=0), (1, 2))  # a resent, older state
    assert p.isr == (1,)
    p.update_state_if_newer(state(1, 0, (1, 2), version=2), (1, 2))
    assert p.isr == (1, 2)


# Follower ------------------------------------------------------------------------------------------


def _stamped_batches(first: int, count: int, epoch: int) -> bytes:
    from test_storage_support import stamped

    return b"".join(stamped(make_batch(1, tag=first + i), first + i, epoch) for i in range(count))


def test_follower_hw_is_min_of_leader_hw_and_own_leo(log: Log) -> None:
    p = Partition("t", 0, "id", log, broker_id=1)
    assert p.make_follower(state(2, 0, (1, 2)), (1, 2))
    assert not p.make_follower(state(2, 0, (1, 2)), (1, 2))
    p.append_records_as_follower(_stamped_batches(0, 3, epoch=0))
    p.update_follower_high_watermark(10)
    assert p.high_watermark == 3
    p.update_follower_high_watermark(2)
    assert p.high_watermark == 2
    assert log.leader_epoch_cache.entries[-1].epoch == 0
    p.truncate_to(1)
    assert p.high_watermark == 1 and p.log_end_offset == 1
    with pytest.raises(KafkaError):
        p.append_records_to_leader(make_batch(1), 1)


def test_follower_follows_the_leaders_log_start(log: Log) -> None:
    p = Partition("t", 0, "id", log, broker_id=1)
    p.make_follower(state(2, 0, (1, 2)), (1, 2))
    p.append_records_as_follower(_stamped_batches(0, 4, epoch=0))
    p.maybe_increment_log_start_offset(2)
    assert p.log_start_offset == 2
    p.maybe_increment_log_start_offset(10)  # past our end: later
    assert p.log_start_offset == 2
