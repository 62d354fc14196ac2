"""Idempotent producers on the log: sequence and epoch checks, retries answered with the
original offsets, producer state across clean and unclean restarts, truncation, followers,
snapshots and expiry."""

from __future__ import annotations

import shutil
from collections import deque
from pathlib import Path

import pytest

from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import encode_batch
from loglake.record.header import set_base_offset
from loglake.storage import log as log_module
from loglake.storage.log import Log, LogAppendInfo
from loglake.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    _decode_snapshot,
    _encode_snapshot,
    snapshot_path,
)
from loglake.storage.segment import now_ms

NOW = now_ms()
INT32_MAX = 2**31 - 1
PID = 4000
SMALL_SEGMENTS = {"segment_bytes": 400, "index_interval_bytes": 50}


def batch(
    producer_id: int = PID,
    epoch: int = 0,
    seq: int = 0,
    count: int = 1,
    timestamp: int | None = None,
    **kwargs: object,
) -> bytes:
    rows = [(None, b"value-%d" % i, [], timestamp) for i in range(count)]
    return encode_batch(rows, NOW, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq, **kwargs)


def open_log(path: Path, name: str = "t-0", **config: object) -> Log:
    return Log.open(path / name, LogConfig(**config))


def expect_error(code: ErrorCode, log: Log, records: bytes) -> None:
    """The append fails with `code` and writes nothing."""
    end, size = log.log_end_offset, log.size
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(records, leader_epoch=0)
    assert caught.value.code == code, caught.value
    assert (log.log_end_offset, log.size) == (end, size)


def expect_duplicate(log: Log, records: bytes, original: LogAppendInfo) -> None:
    """The append is recognised as a retry: original offsets, nothing written."""
    end, size = log.log_end_offset, log.size
    info = log.append_as_leader(records, leader_epoch=0)
    assert info.duplicate
    assert (info.first_offset, info.last_offset) == (original.first_offset, original.last_offset)
    assert info.log_append_time_ms == original.log_append_time_ms
    assert (log.log_end_offset, log.size) == (end, size)


def append_sequence(
    log: Log, batches: int, producer_id: int = PID, epoch: int = 0, count: int = 2
) -> list[LogAppendInfo]:
    """`batches` in-sequence batches of `count` records from sequence 0."""
    return [log.append_as_leader(batch(producer_id, epoch, i * count, count), leader_epoch=0) for i in range(batches)]


def all_batches(log: Log) -> bytes:
    """The whole log as stored, for a follower to replicate."""
    out, offset = b"", log.log_start_offset
    while offset < log.log_end_offset:
        piece = log.read(offset, 1 << 20)
        out += piece.read_bytes()
        offset = piece.next_offset
    return out


# Leader checks -----------------------------------------------------------------------------


def test_in_sequence_appends_are_recorded(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    infos = append_sequence(log, 3, count=3)
    assert [(i.first_offset, i.last_offset, i.duplicate) for i in infos] == [
        (0, 2, False),
        (3, 5, False),
        (6, 8, False),
    ]
    entry = log.producer_state.producers[PID]
    assert entry.producer_epoch == 0
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 2, 0, 2),
        (3, 5, 3, 5),
        (6, 8, 6, 8),
    ]
    assert entry.batches[-1].max_timestamp == NOW


def test_non_idempotent_batches_leave_the_state_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(producer_id=-1, epoch=-1, seq=-1, count=2), leader_epoch=0)
    assert log.producer_state.producers == {}


def test_retry_of_any_of_the_last_five_batches_returns_the_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    infos = append_sequence(log, NUM_BATCHES_TO_RETAIN)
    expect_duplicate(log, batch(seq=8, count=2), infos[4])  # the last batch
    expect_duplicate(log, batch(seq=0, count=2), infos[0])  # the oldest one kept
    expect_duplicate(log, batch(seq=4, count=2), infos[2])
    # The state is unchanged by the retries: the next batch still follows the last one.
    assert log.append_as_leader(batch(seq=10, count=2), leader_epoch=0).first_offset == 10


def test_retry_of_the_sixth_oldest_batch_is_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_sequence(log, NUM_BATCHES_TO_RETAIN + 1)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(seq=0, count=2))
    expect_duplicate(log, batch(seq=2, count=2), LogAppendInfo(2, 3, NOW, 3, -1, 1, 2, 0))


def test_a_retry_must_match_both_sequences(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_sequence(log, 2)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(seq=2, count=1))


def test_sequence_gap_is_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_sequence(log, 2)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(seq=5))
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(seq=3))  # inside the last batch


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.append_as_leader(batch(seq=77, count=3), leader_epoch=0).first_offset == 0
    assert log.append_as_leader(batch(seq=80), leader_epoch=0).first_offset == 3


def test_epoch_bump_resets_the_sequence_and_fences_the_old_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = append_sequence(log, 2, epoch=3)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(epoch=4, seq=4))
    log.append_as_leader(batch(epoch=4, seq=0), leader_epoch=0)
    assert log.producer_state.producers[PID].producer_epoch == 4
    assert len(log.producer_state.producers[PID].batches) == 1
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, log, batch(epoch=3, seq=4, count=2))
    # A retry from the fenced epoch is fenced too, not answered as a duplicate.
    expect_error(ErrorCode.INVALID_PRODUCER_EPOCH, log, batch(epoch=3, seq=2, count=2))
    assert first[1].last_offset == 3 and log.log_end_offset == 5


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    wrapping = log.append_as_leader(batch(seq=INT32_MAX - 1, count=3), leader_epoch=0)  # MAX-1, MAX, 0
    assert log.producer_state.producers[PID].last_seq == 0
    log.append_as_leader(batch(seq=1), leader_epoch=0)
    expect_duplicate(log, batch(seq=INT32_MAX - 1, count=3), wrapping)
    single = open_log(tmp_path, "t-1")
    single.append_as_leader(batch(seq=INT32_MAX), leader_epoch=0)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, single, batch(seq=1))  # MAX is followed by 0
    assert single.append_as_leader(batch(seq=0), leader_epoch=0).first_offset == 1


def test_duplicate_under_log_append_time_returns_the_original_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    original = log.append_as_leader(batch(count=2), leader_epoch=0, now_ms=NOW + 5)
    assert original.log_append_time_ms == NOW + 5
    retry = log.append_as_leader(batch(count=2), leader_epoch=0, now_ms=NOW + 99)
    assert retry.duplicate and retry.log_append_time_ms == NOW + 5 and retry.max_timestamp == NOW + 5


def test_several_batches_in_one_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    other = 7
    info = log.append_as_leader(
        batch(seq=0, count=2) + batch(producer_id=-1, epoch=-1, seq=-1) + batch(seq=2) + batch(other, seq=9),
        leader_epoch=0,
    )
    assert (info.first_offset, info.last_offset, info.duplicate) == (0, 4, False)
    assert [(b.first_offset, b.last_offset) for b in log.producer_state.producers[PID].batches] == [(0, 1), (3, 3)]
    assert log.producer_state.producers[other].batches[-1].first_offset == 4
    # Each batch must follow the one before it in the same append; all or nothing.
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(seq=3) + batch(seq=5))
    # A retry cannot share an append with anything else.
    expect_error(ErrorCode.INVALID_RECORD, log, batch(seq=2) + batch(seq=3))
    expect_error(ErrorCode.INVALID_RECORD, log, batch(producer_id=-1, epoch=-1, seq=-1) + batch(seq=2))


def test_control_batches_and_missing_sequences_are_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    expect_error(ErrorCode.INVALID_RECORD, log, batch(control=True, transactional=True))
    expect_error(ErrorCode.INVALID_RECORD, log, batch(seq=-1))


def test_transactional_batches_are_checked_like_idempotent_ones(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    original = log.append_as_leader(batch(transactional=True), leader_epoch=0)
    expect_duplicate(log, batch(transactional=True), original)
    expect_error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, log, batch(seq=5, transactional=True))


# Restart -----------------------------------------------------------------------------------


def mixed_history(log: Log) -> None:
    """Several producers, epochs, non-idempotent batches and (with small segments) rolls."""
    for i in range(8):
        log.append_as_leader(batch(PID, 0, 3 * i, 3), leader_epoch=0)
        log.append_as_leader(batch(-1, -1, -1, 2), leader_epoch=0)
        if i == 4:
            log.append_as_leader(batch(PID + 1, 2, 0, 1), leader_epoch=0)
    log.append_as_leader(batch(PID + 1, 3, 0, 2), leader_epoch=0)


def test_clean_close_and_reopen_load_the_snapshot_without_replaying(tmp_path: Path, monkeypatch) -> None:
    log = open_log(tmp_path, **SMALL_SEGMENTS)
    mixed_history(log)
    before = dict(log.producer_state.producers)
    end = log.log_end_offset
    log.flush()
    log.close()
    assert snapshot_path(log.dir, end).exists()

    def no_replay(*args: object) -> None:
        raise AssertionError("the snapshot at the log end leaves nothing to replay")

    monkeypatch.setattr(log_module, "_batch_headers", no_replay)
    reopened = Log.open(log.dir, log.config, recovery_point=end, had_clean_shutdown=True)
    assert reopened.producer_state.producers == before
    # A retry across the restart is still recognised.
    last = before[PID].batches[-1]
    info = reopened.append_as_leader(batch(PID, 0, last.first_seq, 3), leader_epoch=0)
    assert info.duplicate and (info.first_offset, info.last_offset) == (last.first_offset, last.last_offset)


def test_unclean_shutdown_replays_headers_from_the_latest_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path, **SMALL_SEGMENTS)
    mixed_history(log)
    assert len(log.segments) > 2
    # The latest roll snapshot is below the log end: the rest comes from the log.
    latest = max(log.producer_state.snapshot_offsets())
    assert latest < log.log_end_offset
    crashed = tmp_path / "crashed-0"
    shutil.copytree(log.dir, crashed)  # the files as a kill -9 would leave them
    recovered = Log.open(crashed, log.config, had_clean_shutdown=False)
    assert recovered.log_end_offset == log.log_end_offset
    assert recovered.producer_state.producers == log.producer_state.producers


def test_unclean_shutdown_without_any_snapshot_replays_the_whole_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, **SMALL_SEGMENTS)
    mixed_history(log)
    crashed = tmp_path / "crashed-0"
    shutil.copytree(log.dir, crashed)
    for snapshot in crashed.glob("*.snapshot"):
        snapshot.unlink()
    recovered = Log.open(crashed, log.config, had_clean_shutdown=False)
    assert recovered.producer_state.producers == log.producer_state.producers


def test_a_corrupt_snapshot_is_deleted_and_an_older_one_used(tmp_path: Path) -> None:
    log = open_log(tmp_path, **SMALL_SEGMENTS)
    mixed_history(log)
    crashed = tmp_path / "crashed-0"
    shutil.copytree(log.dir, crashed)
    older, latest = log.producer_state.snapshot_offsets()
    torn = snapshot_path(crashed, latest)
    torn.write_bytes(torn.read_bytes()[:-3])
    recovered = Log.open(crashed, log.config, had_clean_shutdown=False)
    assert recovered.producer_state.producers == log.producer_state.producers
    assert recovered.producer_state.snapshot_offsets() == [older]


def test_snapshots_past_a_recovered_end_are_ignored(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_sequence(log, 3)
    log.close()
    # A snapshot of a tail the crash lost (the .log holds less than the snapshot says).
    log.producer_state.take_snapshot(100, sync=True)
    reopened = Log.open(log.dir, log.config, had_clean_shutdown=False)
    assert reopened.producer_state.snapshot_offsets() == [6]
    assert [b.first_seq for b in reopened.producer_state.producers[PID].batches] == [0, 2, 4]


def test_only_the_latest_two_snapshots_are_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(4):
        log.append_as_leader(batch(seq=i), leader_epoch=0)
        log.roll()
    assert log.producer_state.snapshot_offsets() == [3, 4]
    log.close()
    assert log.producer_state.snapshot_offsets() == [3, 4]


def test_snapshot_format_round_trips_and_detects_damage() -> None:
    producers = {
        1: ProducerStateEntry(1, 2, deque((BatchMetadata(i, i, 10 + i, 10 + i, NOW) for i in range(5)), 5), NOW),
        2**40: ProducerStateEntry(2**40, 0, deque([BatchMetadata(INT32_MAX, 1, 0, 2, -1)], 5), -1, 2),
    }
    data = _encode_snapshot(producers)
    assert _decode_snapshot(data) == producers
    assert _decode_snapshot(_encode_snapshot({})) == {}
    for damaged in (data[:-1], data + b"\0", data[:20] + bytes([data[20] ^ 1]) + data[21:], b"\0\3" + data[2:], b""):
        with pytest.raises(CorruptSnapshotError):
            _decode_snapshot(damaged)


# Truncation and followers ------------------------------------------------------------------


def test_truncation_rebuilds_the_state_of_what_is_left(tmp_path: Path) -> None:
    log = open_log(tmp_path, **SMALL_SEGMENTS)
    infos = append_sequence(log, 8, count=3)
    expected = open_log(tmp_path, "expected-0", **SMALL_SEGMENTS)
    append_sequence(expected, 3, count=3)
    assert any(o > 9 for o in log.producer_state.snapshot_offsets())
    assert log.truncate_to(infos[3].first_offset)
    assert log.producer_state.producers == expected.producer_state.producers
    assert all(o <= 9 for o in log.producer_state.snapshot_offsets())
    # The batch after the cut is new again, not a duplicate.
    info = log.append_as_leader(batch(seq=9, count=3), leader_epoch=0)
    assert not info.duplicate and info.first_offset == 9


def test_truncate_fully_forgets_every_producer(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_sequence(log, 2)
    log.roll()
    log.truncate_fully_and_start_at(50)
    assert log.producer_state.producers == {}
    assert log.producer_state.snapshot_offsets() == []
    assert log.append_as_leader(batch(seq=9), leader_epoch=0).first_offset == 50


def test_follower_takes_the_state_from_the_replicated_batches(tmp_path: Path) -> None:
    leader = open_log(tmp_path, "leader-0")
    mixed_history(leader)
    follower = open_log(tmp_path, "follower-0")
    follower.append_as_follower(all_batches(leader))
    assert follower.producer_state.producers == leader.producer_state.producers
    # Unchecked: a follower takes even a sequence gap the leader let through.
    gap = bytearray(batch(seq=100))
    set_base_offset(gap, 0, follower.log_end_offset)
    follower.append_as_follower(gap)
    assert follower.producer_state.producers[PID].batches[-1].first_seq == 100


# Expiry ------------------------------------------------------------------------------------


def test_idle_producers_expire_at_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    day = 86_400_000
    log.append_as_leader(batch(PID, timestamp=NOW - day - 1), leader_epoch=0)
    log.append_as_leader(batch(PID + 1, timestamp=NOW - day + 60_000), leader_epoch=0)
    log.roll(now_ms=NOW)
    assert set(log.producer_state.producers) == {PID + 1}
    # Forgotten, so its next batch may carry any sequence.
    log.append_as_leader(batch(PID, seq=42), leader_epoch=0)


def test_a_roll_in_the_middle_of_an_append_snapshots_the_state_before_it(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=350)
    log.append_as_leader(batch(seq=0, count=3), leader_epoch=0)
    # Three batches of one producer in one append (103 bytes each): the third one rolls.
    log.append_as_leader(batch(seq=3, count=3) + batch(seq=6, count=3) + batch(seq=9, count=3), leader_epoch=0)
    assert len(log.segments) > 1
    crashed = tmp_path / "crashed-0"
    shutil.copytree(log.dir, crashed)
    recovered = Log.open(crashed, log.config, had_clean_shutdown=False)
    assert recovered.producer_state.producers == log.producer_state.producers


def test_producers_outlive_the_segments_their_batches_were_in(tmp_path: Path) -> None:
    # As in Kafka since 2.5 (KIP-360): retention does not make a live producer unknown.
    log = open_log(tmp_path)
    infos = append_sequence(log, 3)
    log.roll()
    log.append_as_leader(batch(producer_id=-1, epoch=-1, seq=-1), leader_epoch=0)
    log.increment_log_start_offset(log.log_end_offset)
    assert log.segments[0].base_offset == 6 and PID in log.producer_state.producers
    expect_duplicate(log, batch(seq=4, count=2), infos[2])
    log.close()
    reopened = Log.open(log.dir, log.config, log_start_offset=7, had_clean_shutdown=True)
    assert reopened.producer_state.producers == log.producer_state.producers
