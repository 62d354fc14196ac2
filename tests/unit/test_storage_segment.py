"""LogSegment: append, sparse indexing, translate/read, timestamp search, recover, truncate, roll rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from test_storage_support import COMPRESSION_GZIP, headers_of, make_batch, stamped

from loglake.config import LogConfig
from loglake.record.header import RecordBatchHeader
from loglake.storage.segment import LogSegment

BASE = 1000


@dataclass
class Written:
    offset: int  # base offset
    last_offset: int
    position: int
    data: bytes


def fill(segment: LogSegment, count: int, records: int = 3, start_timestamp: int = 10_000) -> list[Written]:
    """Append `count` batches with contiguous offsets from the segment's base."""
    written, offset = [], segment.base_offset
    for i in range(count):
        data = stamped(make_batch(records, timestamp=start_timestamp + 100 * i, value_size=20 + i % 7, tag=i), offset)
        header = RecordBatchHeader.parse(data)
        position = segment.append(data, header.last_offset, header.max_timestamp, header.last_offset)
        written.append(Written(offset, header.last_offset, position, data))
        offset = header.next_offset
    return written


def open_segment(tmp_path: Path, interval: int = 150, **config: int) -> LogSegment:
    return LogSegment.open(tmp_path, BASE, LogConfig(index_interval_bytes=interval, **config))


def index_files(tmp_path: Path) -> tuple[bytes, bytes]:
    return (tmp_path / f"{BASE:020d}.index").read_bytes(), (tmp_path / f"{BASE:020d}.timeindex").read_bytes()


def test_files_are_named_by_base_offset_and_log_is_the_batches(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    written = fill(segment, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000001000.index",
        "00000000000000001000.log",
        "00000000000000001000.timeindex",
    ]
    assert (tmp_path / "00000000000000001000.log").read_bytes() == b"".join(w.data for w in written)
    assert segment.next_offset() == written[-1].last_offset + 1


def test_index_entries_every_interval_point_at_batch_starts(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, interval=150)
    written = fill(segment, 40)
    assert 5 < len(segment.offset_index) < 40
    by_position = {w.position: w for w in written}
    since = 0
    expected = []
    for w in written:
        if since > 150:
            expected.append((w.last_offset, w.position))
            since = 0
        since += len(w.data)
    assert expected
    for last_offset, position in expected:
        found = segment.offset_index.lookup(last_offset)
        assert (found.offset, found.position) == (last_offset, position)
        assert by_position[position].last_offset == last_offset
    assert len(segment.offset_index) == len(expected)


def test_translate_offset_finds_the_batch_holding_each_offset(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, interval=100)
    written = fill(segment, 30)
    for w in written:
        for offset in range(w.offset, w.last_offset + 1):
            found = segment.translate_offset(offset)
            assert (found.position, found.size, found.base_offset, found.last_offset) == (
                w.position,
                len(w.data),
                w.offset,
                w.last_offset,
            )
    assert segment.translate_offset(BASE - 5).position == 0
    assert segment.translate_offset(written[-1].last_offset + 1) is None
    # A batch that does not end below max_position is not visible.
    assert segment.translate_offset(written[-1].offset, max_position=segment.size - 1) is None


def test_read_returns_whole_batches_within_max_size(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, interval=100)
    written = fill(segment, 30)
    for start in range(10):
        for max_size in (1, 150, 400, 1000, 10_000):
            first = written[start]
            piece = segment.read(first.offset + 1, max_size)
            taken = [first] if len(first.data) > max_size else []
            for w in written[start:]:
                if sum(len(t.data) for t in taken) + len(w.data) > max_size:
                    break
                taken.append(w)
            assert piece.read_bytes() == b"".join(t.data for t in taken)
            assert (piece.first_offset, piece.next_offset) == (first.offset, taken[-1].last_offset + 1)
            assert piece.position == first.position and piece.records is segment.log


def test_read_min_one_message_and_max_position(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    written = fill(segment, 4)
    assert segment.read(BASE, 1, min_one_message=True).read_bytes() == written[0].data
    empty = segment.read(BASE, 1, min_one_message=False)
    assert (empty.size, empty.next_offset) == (0, BASE)
    limited = segment.read(BASE, 10_000, max_position=written[2].position + 5)
    assert limited.read_bytes() == written[0].data + written[1].data
    assert segment.read(written[2].offset, 10_000, max_position=written[2].position) is None
    assert segment.read(written[-1].last_offset + 1, 10_000) is None


def test_find_offset_by_timestamp_searches_records_inside_the_batch(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, interval=0)
    # Batch i holds records at 10_000 + 100 i + (0, 10, 20, 30, 40).
    offset = BASE
    for i in range(10):
        data = stamped(make_batch(5, timestamp=10_000 + 100 * i, timestamp_step=10), offset)
        header = RecordBatchHeader.parse(data)
        segment.append(data, header.last_offset, header.max_timestamp, header.last_offset)
        offset = header.next_offset
    assert segment.find_offset_by_timestamp(0) == (BASE, 10_000)
    assert segment.find_offset_by_timestamp(10_320) == (BASE + 17, 10_320)
    assert segment.find_offset_by_timestamp(10_315) == (BASE + 17, 10_320)
    assert segment.find_offset_by_timestamp(10_341) == (BASE + 20, 10_400)
    assert segment.find_offset_by_timestamp(10_940) == (BASE + 49, 10_940)
    assert segment.find_offset_by_timestamp(10_941) is None
    assert segment.find_offset_by_timestamp(10_000, starting_offset=BASE + 12) == (BASE + 12, 10_220)
    assert segment.max_timestamp == 10_940 and segment.offset_of_max_timestamp == BASE + 49


def test_find_offset_by_timestamp_in_a_compressed_batch_answers_its_first_offset(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    data = stamped(make_batch(5, timestamp=500, compression=COMPRESSION_GZIP), BASE)
    segment.append(data, BASE + 4, 504, BASE + 4)
    assert segment.find_offset_by_timestamp(503) == (BASE, 504)


def test_recover_rebuilds_the_same_indexes_from_the_log(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, interval=120)
    written = fill(segment, 50)
    segment.close()
    original = index_files(tmp_path)
    assert original[0] and original[1]
    (tmp_path / f"{BASE:020d}.index").unlink()
    (tmp_path / f"{BASE:020d}.timeindex").unlink()
    reopened = open_segment(tmp_path, interval=120)  # missing indexes: rebuilt on open
    assert index_files(tmp_path) == original
    assert reopened.recover() == 0
    assert index_files(tmp_path) == original
    assert reopened.next_offset() == written[-1].last_offset + 1
    assert reopened.max_timestamp == headers_of(written[-1].data)[0].max_timestamp


@pytest.mark.parametrize(
    "damage",
    ["garbage", "half_batch", "crc", "zeros", "short"],
)
def test_recover_cuts_a_torn_or_corrupt_tail(tmp_path: Path, damage: str) -> None:
    segment = open_segment(tmp_path, interval=120)
    written = fill(segment, 20)
    path = segment.log.path
    good = b"".join(w.data for w in written[:-1])
    last = written[-1].data
    tails = {
        "garbage": last + b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00garbage",
        "half_batch": last[: len(last) // 2],
        "crc": last[:20] + bytes([last[20] ^ 0xFF]) + last[21:],
        "zeros": last + b"\x00" * 4096,
        "short": last + b"\xff" * 7,
    }
    segment.close()
    path.write_bytes(good + tails[damage])
    reopened = LogSegment(tmp_path, BASE, LogConfig(index_interval_bytes=120))
    removed = reopened.recover()
    kept = good + (last if damage in ("garbage", "zeros", "short") else b"")
    assert removed == len(good) + len(tails[damage]) - len(kept)
    assert path.read_bytes() == kept
    assert reopened.next_offset() == (written[-1] if len(kept) > len(good) else written[-2]).last_offset + 1


def test_truncate_to_keeps_indexes_consistent_with_a_rebuild(tmp_path: Path) -> None:
    segment = open_segment(tmp_path, interval=120)
    written = fill(segment, 30)
    cut = written[17]
    removed = segment.truncate_to(cut.offset + 1)  # inside a batch: the whole batch goes
    assert removed == sum(len(w.data) for w in written[17:])
    assert segment.size == cut.position
    assert segment.translate_offset(cut.offset) is None
    assert segment.next_offset() == written[16].last_offset + 1
    more = fill_from(segment, written[16].last_offset + 1, 10)
    assert segment.read(more[0].offset, 10**6).read_bytes() == b"".join(m.data for m in more)
    before = index_files(tmp_path)
    segment.recover()
    assert index_files(tmp_path) == before
    assert segment.truncate_to(10**9) == 0


def test_reads_after_a_truncation_never_use_the_old_tail_positions(tmp_path: Path) -> None:
    """Reads and appends leave (offset, position) boundaries the segment remembers; after a
    truncation the same offsets sit elsewhere in batches of other sizes."""
    segment = open_segment(tmp_path, interval=10_000)  # one index entry: every lookup would scan
    written = fill(segment, 30)
    for w in written:
        assert segment.read(w.offset, 10**6).read_bytes() == b"".join(x.data for x in written[written.index(w) :])
        assert segment.read(w.offset, len(w.data)).next_offset == w.last_offset + 1
    segment.truncate_to(written[17].offset)
    more = fill_from(segment, written[17].offset, 12)
    assert more[0].position == written[17].position
    for i, m in enumerate(more):
        for offset in range(m.offset, m.last_offset + 1):
            piece = segment.read(offset, 10**6)
            assert piece.read_bytes() == b"".join(x.data for x in more[i:])
            assert (piece.first_offset, piece.next_offset) == (m.offset, more[-1].last_offset + 1)
        bounded = segment.read(more[0].offset, 10**6, max_position=m.position)
        assert bounded is None if i == 0 else bounded.next_offset == m.offset


def test_a_boundary_found_before_a_truncation_and_stored_after_it_is_not_used(tmp_path: Path) -> None:
    """A reader on another thread can find a boundary, lose the processor to a truncation
    and new appends, and store it then."""
    segment = open_segment(tmp_path, interval=10_000)
    written = fill(segment, 10)
    generation = segment._generation
    stale = (written[7].offset, written[7].position)
    segment.truncate_to(written[5].offset)
    more, offset = [], written[5].offset
    for i in range(4):  # four records each, bigger: the old offset and position fall inside them
        data = stamped(make_batch(4, timestamp=90_000 + i, value_size=60, tag=200 + i), offset)
        header = RecordBatchHeader.parse(data)
        position = segment.append(data, header.last_offset, header.max_timestamp, header.last_offset)
        more.append(Written(offset, header.last_offset, position, data))
        offset = header.next_offset
    at = next(i for i, m in enumerate(more) if m.offset < stale[0] <= m.last_offset)
    assert all(m.position != stale[1] for m in more) and more[-1].position > stale[1]
    segment._remember_boundary(*stale, generation)
    assert segment.read(stale[0], 10**6).read_bytes() == b"".join(m.data for m in more[at:])


def fill_from(segment: LogSegment, offset: int, count: int) -> list[Written]:
    written = []
    for i in range(count):
        data = stamped(make_batch(2, timestamp=90_000 + i, tag=100 + i), offset)
        header = RecordBatchHeader.parse(data)
        position = segment.append(data, header.last_offset, header.max_timestamp, header.last_offset)
        written.append(Written(offset, header.last_offset, position, data))
        offset = header.next_offset
    return written


def test_should_roll_on_size_time_full_index_and_offset_overflow(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, segment_ms=60_000, segment_index_bytes=16, index_interval_bytes=0)
    segment = LogSegment.open(tmp_path, BASE, config, created_ms=0)
    assert not segment.should_roll(config, 5000, 10_000, BASE, now=10**12)  # an empty segment takes anything
    fill(segment, 1, start_timestamp=10_000)
    assert not segment.should_roll(config, 100, 10_000, BASE + 10, now=0)
    assert segment.should_roll(config, 1000, 10_000, BASE + 10, now=0)
    # Time counts from the first batch's timestamp, as Kafka's rolling is.
    assert not segment.should_roll(config, 100, 70_002, BASE + 10, now=0)
    assert segment.should_roll(config, 100, 70_003, BASE + 10, now=0)
    assert segment.should_roll(config, 100, 10_000, BASE + 2**31, now=0)
    fill_from(segment, BASE + 3, 2)
    assert len(segment.offset_index) == 2 and segment.should_roll(config, 1, 10_000, BASE + 10, now=0)


def test_time_roll_without_timestamps_counts_from_creation(tmp_path: Path) -> None:
    config = LogConfig(segment_ms=1000)
    segment = LogSegment.open(tmp_path, BASE, config, created_ms=5_000)
    data = stamped(make_batch(1, timestamp=-1), BASE)
    segment.append(data, BASE, -1, BASE)
    assert not segment.should_roll(config, 10, -1, BASE + 1, now=6_000)
    assert segment.should_roll(config, 10, -1, BASE + 1, now=6_001)


def test_load_recovers_a_tail_that_does_not_parse(tmp_path: Path) -> None:
    segment = open_segment(tmp_path)
    written = fill(segment, 5)
    segment.close()
    with open(segment.log.path, "ab") as f:
        f.write(b"\x00" * 100)
    reopened = open_segment(tmp_path)
    assert reopened.log.path.read_bytes() == b"".join(w.data for w in written)
