"""Log: appends (leader and follower), reads from any offset across segments, timestamps,
validation, rolling, truncation, log start, flushing, concurrent readers."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import validate_client_records
from loglake.record.header import RecordBatchHeader, set_crc, validate_batch
from loglake.storage.file_records import FileRecords
from loglake.storage.leader_epoch_cache import EpochEntry
from loglake.storage.log import Log, parse_topic_partition
from test_storage_support import COMPRESSION_GZIP, headers_of, make_batch, records_of, split_batches, stamped

TINY = {"segment_bytes": 700, "index_interval_bytes": 60}


def open_log(tmp_path: Path, name: str = "topic-a-3", **config: object) -> Log:
    return Log.open(tmp_path / name, LogConfig(**config))


def append_batches(
    log: Log, count: int, records: int = 3, epoch: int = 0, timestamp: int = 10_000
) -> list[tuple[int, bytes]]:
    """Append `count` one-batch requests; returns (base offset, stored bytes) of each."""
    stored = []
    for i in range(count):
        batch = make_batch(records, timestamp=timestamp + 100 * i, value_size=10 + i % 13, tag=i)
        info = log.append_as_leader(batch, leader_epoch=epoch)
        stored.append((info.first_offset, stamped(batch, info.first_offset, epoch)))
    return stored


def expect_error(code: ErrorCode, fn, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        fn(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


def test_topic_and_partition_come_from_the_directory_name(tmp_path: Path) -> None:
    assert parse_topic_partition("my-topic-3") == ("my-topic", 3)
    assert parse_topic_partition("a.b_c-10") == ("a.b_c", 10)
    for bad in ("topic", "-3", "topic-x", "topic-0.abc-delete"):
        assert parse_topic_partition(bad) is None
    log = open_log(tmp_path, "my-topic-3")
    assert (log.topic, log.partition, log.dir) == ("my-topic", 3, tmp_path / "my-topic-3")
    with pytest.raises(ValueError):
        open_log(tmp_path, "no_partition")


def as_given(records: bytes) -> bytes:
    return records


# A leader appends the bytes as given (coordinators, HTTP produce) or as a produce request's
# check passed them (CheckedBatches, not parsed again): both must store the same.
APPENDED_AS = pytest.mark.parametrize("prepare", [as_given, validate_client_records], ids=["bytes", "checked"])


@APPENDED_AS
def test_append_assigns_offsets_and_stamps_the_leader_epoch(tmp_path: Path, prepare) -> None:
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    first = make_batch(3, timestamp=500)
    info = log.append_as_leader(prepare(first), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (0, 2, 1, 3)
    assert (info.max_timestamp, info.offset_of_max_timestamp, info.log_append_time_ms) == (502, 2, -1)
    assert info.valid_bytes == len(first)
    several = b"".join(make_batch(n, timestamp=900, tag=n) for n in (1, 4, 2))
    info = log.append_as_leader(prepare(several), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (3, 9, 3, 7)
    assert log.log_end_offset == 10
    data = log.read(0, 10**6).read_bytes()
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers_of(data)] == [
        (0, 2, 7),
        (3, 3, 7),
        (4, 7, 7),
        (8, 9, 7),
    ]
    assert [offset for offset, _, _ in records_of(data)] == list(range(10))
    assert data[: len(first)] == stamped(first, 0, 7)  # only the offset and epoch changed
    assert log.leader_epoch_cache.entries == (EpochEntry(7, 0),)


def test_read_from_every_offset_across_many_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    stored = append_batches(log, 80)
    assert len(log.segments) > 10
    names = [f.name for f in sorted(log.dir.glob("*.log"))]
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments] and names[0] == "00000000000000000000.log"
    by_offset = {}
    for base, data in stored:
        for offset in range(base, RecordBatchHeader.parse(data).next_offset):
            by_offset[offset] = base
    bases = [b for b, _ in stored]
    for offset in range(log.log_end_offset):
        piece = log.read(offset, 10**6)
        batches = split_batches(piece.read_bytes())
        first = bases.index(by_offset[offset])
        assert batches == [d for _, d in stored[first : first + len(batches)]]
        assert piece.first_offset == by_offset[offset] <= offset < piece.next_offset
        # A read stays within one segment, and takes all of it from the start batch on.
        segment = next(s for s in reversed(log.segments) if s.base_offset <= offset)
        assert piece.position + piece.size == segment.size
    # Following next_offset reads everything exactly once.
    offset, chunks = 0, []
    while offset < log.log_end_offset:
        piece = log.read(offset, 250)
        chunks.append(piece.read_bytes())
        offset = piece.next_offset
    assert b"".join(chunks) == b"".join(d for _, d in stored)


def test_read_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    stored = append_batches(log, 10)  # batch i holds offsets 3i..3i+2
    size = len(stored[0][1])
    assert log.read(0, size).read_bytes() == stored[0][1]
    assert log.read(0, size - 1).read_bytes() == stored[0][1]  # min one message (KIP-74)
    empty = log.read(4, size - 1, min_one_message=False)
    assert (empty.size, empty.read_bytes(), empty.next_offset, empty.file) == (0, b"", 4, None)
    # max_offset is exclusive: no batch holding an offset >= it.
    assert split_batches(log.read(0, 10**6, max_offset=9).read_bytes()) == [d for _, d in stored[:3]]
    assert split_batches(log.read(0, 10**6, max_offset=10).read_bytes()) == [d for _, d in stored[:3]]
    assert log.read(9, 10**6, max_offset=9).size == 0
    assert log.read(12, 10**6, max_offset=9).size == 0
    assert log.read(30, 10**6).size == 0  # at the log end
    expect_error(ErrorCode.OFFSET_OUT_OF_RANGE, log.read, 31, 100)
    expect_error(ErrorCode.OFFSET_OUT_OF_RANGE, log.read, -1, 100)


def test_slice_can_be_sent_with_sendfile(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    stored = append_batches(log, 5)
    piece = log.read(3, 10**6)
    a, b = socket.socketpair()
    with a, b:
        sent = os.sendfile(a.fileno(), piece.fd, piece.position, piece.size)
        assert sent == piece.size
        assert b.recv(1 << 16) == b"".join(d for _, d in stored[1:])
    assert piece.file.mode == "rb"


def test_log_append_time_stamps_every_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    batches = [make_batch(3, timestamp=5), make_batch(2, timestamp=6, compression=COMPRESSION_GZIP)]
    info = log.append_as_leader(b"".join(batches), leader_epoch=1, now_ms=1_700_000_000_123)
    now = 1_700_000_000_123
    assert (info.log_append_time_ms, info.max_timestamp, info.offset_of_max_timestamp) == (now, now, 2)
    data = log.read(0, 10**6).read_bytes()
    for header in headers_of(data):  # headers_of validates the recomputed CRCs
        assert header.is_log_append_time
        assert header.base_timestamp == header.max_timestamp == 1_700_000_000_123
    assert [t for _, t, _ in records_of(data)] == [1_700_000_000_123] * 5
    assert log.fetch_offset_by_timestamp(1_700_000_000_000) == (0, 1_700_000_000_123)


def test_a_bad_batch_anywhere_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_batches(log, 2)
    size_before = log.active_segment.size
    batches = [bytearray(make_batch(2, tag=i)) for i in range(4)]
    batches[2][-1] ^= 0x01  # third batch: its CRC no longer matches
    error = expect_error(ErrorCode.CORRUPT_MESSAGE, log.append_as_leader, b"".join(batches), 0)
    assert "CRC" in error.message
    expect_error(ErrorCode.CORRUPT_MESSAGE, log.append_as_leader, make_batch(2) + b"\x00\x01", 0)
    expect_error(ErrorCode.CORRUPT_MESSAGE, log.append_as_leader, make_batch(2)[:-3], 0)
    expect_error(ErrorCode.CORRUPT_MESSAGE, log.append_as_leader, b"", 0)
    miscounted = bytearray(make_batch(3))
    miscounted[57:61] = (2).to_bytes(4, "big")  # record count 2 with last offset delta 2
    set_crc(miscounted, 0, len(miscounted))
    expect_error(ErrorCode.INVALID_RECORD, log.append_as_leader, bytes(miscounted), 0)
    assert (log.log_end_offset, log.active_segment.size) == (6, size_before)


@APPENDED_AS
def test_size_limits(tmp_path: Path, prepare) -> None:
    log = open_log(tmp_path, max_message_bytes=300, segment_bytes=1000)
    small, big = make_batch(1, value_size=10), make_batch(1, value_size=400)
    error = expect_error(ErrorCode.MESSAGE_TOO_LARGE, log.append_as_leader, prepare(small + big), 0)
    assert "max.message.bytes=300" in error.message
    expect_error(ErrorCode.RECORD_LIST_TOO_LARGE, log.append_as_leader, prepare(small * 20), 0)
    assert log.log_end_offset == 0
    log.append_as_leader(prepare(small * 5), 0)
    assert log.log_end_offset == 5


def test_offsets_by_timestamp_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    for i in range(40):  # batch i: offsets 4i..4i+3 at 1000 + 50 i + (0, 10, 20, 30)
        log.append_as_leader(make_batch(4, timestamp=1000 + 50 * i, timestamp_step=10), 0)
    assert len(log.segments) > 5
    assert log.fetch_offset_by_timestamp(0) == (0, 1000)
    assert log.fetch_offset_by_timestamp(1000 + 50 * 17 + 15) == (4 * 17 + 2, 1000 + 50 * 17 + 20)
    assert log.fetch_offset_by_timestamp(1000 + 50 * 39 + 30) == (159, 1000 + 50 * 39 + 30)
    assert log.fetch_offset_by_timestamp(1000 + 50 * 39 + 31) is None
    log.increment_log_start_offset(50)
    assert log.fetch_offset_by_timestamp(0) == (50, 1000 + 50 * 12 + 20)


def test_timestamps_out_of_order_find_the_first_batch_reaching_the_target(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0)
    for timestamp in (5000, 1000, 7000, 2000):
        log.append_as_leader(make_batch(1, timestamp=timestamp), 0)
    assert log.fetch_offset_by_timestamp(1500) == (0, 5000)
    assert log.fetch_offset_by_timestamp(6000) == (2, 7000)


def test_roll_on_time_and_on_full_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, "t-0", segment_ms=1000, message_timestamp_type="LogAppendTime")
    log.append_as_leader(make_batch(1), 0, now_ms=10_000)
    log.append_as_leader(make_batch(1), 0, now_ms=11_000)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1), 0, now_ms=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # 16 bytes hold two offset entries but one time entry: the time index fills first.
    full = open_log(tmp_path, "t-1", segment_index_bytes=16, index_interval_bytes=0)
    for _ in range(7):
        full.append_as_leader(make_batch(1), 0)
    assert [s.base_offset for s in full.segments] == [0, 2, 4, 6]
    assert full.roll().base_offset == 7
    assert full.roll().base_offset == 7  # the active segment is empty: nothing to roll
    assert full.read(6, 100).next_offset == 7


def test_update_config_applies_to_the_next_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append_batches(log, 5)
    log.update_config(LogConfig(segment_bytes=300))
    append_batches(log, 2)
    assert len(log.segments) == 2 and log.config.segment_bytes == 300


def test_truncate_to_drops_the_tail_and_its_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    stored = append_batches(log, 10, epoch=1) + append_batches(log, 10, epoch=2) + append_batches(log, 10, epoch=4)
    assert log.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(2, 30), EpochEntry(4, 60))
    assert log.end_offset_for_epoch(2) == (2, 60)
    assert log.end_offset_for_epoch(3) == (2, 60)
    assert log.end_offset_for_epoch(4) == (4, 90)
    assert not log.truncate_to(90)
    assert log.truncate_to(45)
    assert log.log_end_offset == 45
    assert log.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(2, 30))
    assert log.end_offset_for_epoch(4) == (-1, -1)
    assert max(s.base_offset for s in log.segments) <= 45
    assert all(int(p.stem) <= 45 for p in log.dir.glob("*.log"))
    offset, data = 0, b""
    while offset < log.log_end_offset:
        piece = log.read(offset, 10**6)
        data, offset = data + piece.read_bytes(), piece.next_offset
    assert data == b"".join(d for _, d in stored[:15])
    info = log.append_as_leader(make_batch(2), leader_epoch=5)
    assert (info.first_offset, log.log_end_offset) == (45, 47)
    assert log.leader_epoch_cache.latest_entry == EpochEntry(5, 45)
    assert log.truncate_to(0) and log.log_end_offset == 0 and log.leader_epoch_cache.entries == ()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    append_batches(log, 20, epoch=3)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (500, 500, 500)
    assert [p.name for p in log.dir.glob("*.log")] == ["00000000000000000500.log"]
    assert log.leader_epoch_cache.entries == ()
    assert log.append_as_leader(make_batch(1), 4).first_offset == 500
    expect_error(ErrorCode.OFFSET_OUT_OF_RANGE, log.read, 499, 100)


def test_log_start_offset_moves_forward_and_old_segments_go(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    append_batches(log, 10, epoch=1)
    append_batches(log, 20, epoch=2)
    bases = [s.base_offset for s in log.segments]
    target = bases[3] + 1
    assert log.increment_log_start_offset(target)
    assert not log.increment_log_start_offset(target - 1)
    assert log.log_start_offset == target
    assert [s.base_offset for s in log.segments] == bases[3:]  # the segment holding the start stays
    expect_error(ErrorCode.OFFSET_OUT_OF_RANGE, log.read, target - 1, 100)
    assert log.read(target, 100).first_offset <= target
    assert log.leader_epoch_cache.entries == (EpochEntry(2, target),)
    expect_error(ErrorCode.OFFSET_OUT_OF_RANGE, log.increment_log_start_offset, log.log_end_offset + 1)


def test_append_as_follower_keeps_offsets_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    replicated = stamped(make_batch(3), 0, 1) + stamped(make_batch(2), 3, 2) + stamped(make_batch(2), 10, 2)
    info = log.append_as_follower(replicated)
    assert (info.first_offset, info.last_offset, info.num_batches, log.log_end_offset) == (0, 11, 3, 12)
    assert log.read(0, 10**6).read_bytes() == replicated
    assert log.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(2, 3))
    assert log.read(6, 10**6).first_offset == 10  # the gap reads as the next batch
    twice = stamped(make_batch(1), 12) + stamped(make_batch(1), 12)
    expect_error(ErrorCode.INVALID_RECORD, log.append_as_follower, twice)
    expect_error(ErrorCode.INVALID_RECORD, log.append_as_follower, stamped(make_batch(1), 11))
    assert log.log_end_offset == 12


def test_flush_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=5)
    append_batches(log, 1)
    assert log.recovery_point == 0
    append_batches(log, 1)  # 6 unflushed messages >= 5
    assert log.recovery_point == 6
    append_batches(log, 1)  # 3 more: below the threshold
    assert log.recovery_point == 6
    log.flush(up_to=8)
    assert log.recovery_point == 8
    log.flush()
    assert log.recovery_point == log.log_end_offset
    rolled = open_log(tmp_path, "t-9", **TINY)
    append_batches(rolled, 10)
    rolled.close()  # waits for the flushes that rolls scheduled in the background
    assert rolled.recovery_point >= rolled.segments[-1].base_offset > 0


def test_reads_run_concurrently_with_appends(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4000, index_interval_bytes=100)
    done = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        while not done.is_set():
            end = log.log_end_offset
            offset = 0
            while offset < end:
                piece = log.read(offset, 700)
                data = piece.read_bytes()
                try:
                    headers = headers_of(data)
                except (AssertionError, KafkaError) as exc:
                    problems.append(f"bad slice at {offset}: {exc}")
                    return
                if not headers or headers[0].base_offset > offset or piece.next_offset > log.log_end_offset:
                    problems.append(f"slice at {offset} does not start at it or runs past the end")
                    return
                offset = piece.next_offset

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(300):
            log.append_as_leader(make_batch(1 + i % 4, value_size=30, tag=i), 0)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not problems, problems[:3]
    assert log.log_end_offset == sum(1 + i % 4 for i in range(300))


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, **TINY)
    stored = append_batches(log, 40, epoch=2)
    log.flush()
    log.close()
    reopened = open_log(tmp_path, **TINY)
    assert reopened.log_end_offset == 120
    assert reopened.leader_epoch_cache.entries == (EpochEntry(2, 0),)
    for base, data in stored:
        assert validate_batch(reopened.read(base, len(data)).read_bytes()) == RecordBatchHeader.parse(data)
    assert reopened.append_as_leader(make_batch(1), 2).first_offset == 120


def test_a_disk_error_midway_undoes_the_whole_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    stored = append_batches(log, 2)
    segments_before = [(s.base_offset, s.size) for s in log.segments]
    real_append, calls = FileRecords.append, []

    def failing_append(self: FileRecords, buffers: object, size: int | None = None) -> int:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_append(self, buffers, size)

    monkeypatch.setattr(FileRecords, "append", failing_append)
    error = expect_error(ErrorCode.KAFKA_STORAGE_ERROR, log.append_as_leader, make_batch(2) * 4, 5)
    assert "No space left" in error.message
    monkeypatch.undo()
    assert log.log_end_offset == 6
    assert [(s.base_offset, s.size) for s in log.segments if s.size] == [p for p in segments_before if p[1]]
    assert log.read(0, 10**6).read_bytes() == b"".join(d for _, d in stored)
    assert log.leader_epoch_cache.latest_epoch == 0  # the epoch of the failed append is gone too
    assert log.append_as_leader(make_batch(1), 5).first_offset == 6


def test_keyless_records_on_a_compacted_log_are_named_by_batch_index(tmp_path: Path) -> None:
    """KIP-467: the refusal names each keyless record, so a producer fails only those."""
    from loglake.errors import RecordValidationError
    from loglake.record.batch import encode_batch

    log = open_log(tmp_path, cleanup_policy="compact")
    rows = [(None if i % 4 == 1 else b"k%d" % i, b"v", [], None) for i in range(12)]
    err = expect_error(ErrorCode.INVALID_RECORD, log.append_as_leader, encode_batch(rows, 1_000), 0)
    assert isinstance(err, RecordValidationError)
    assert [e.batch_index for e in err.record_errors] == [1, 5, 9]
    assert all("without key in topic partition topic-a-3" in e.message for e in err.record_errors)
    assert err.message.startswith("One or more records have been rejected due to 3 record errors")
    assert log.log_end_offset == 0
    log.close()
