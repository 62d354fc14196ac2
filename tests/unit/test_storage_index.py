"""OffsetIndex and TimeIndex: append, binary-search lookup, truncate, reopen, sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from loglake.storage.index import CorruptIndexError
from loglake.storage.offset_index import OffsetIndex, OffsetPosition
from loglake.storage.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

BASE = 100


def offset_index(tmp_path: Path, max_size: int = 1024) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000000100.index", BASE, max_size)


def time_index(tmp_path: Path, max_size: int = 1024) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000000100.timeindex", BASE, max_size)


def test_offset_index_lookup_finds_the_last_entry_at_or_below(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for offset, position in [(105, 50), (110, 120), (120, 300)]:
        index.append(offset, position)
    assert index.lookup(99) == OffsetPosition(BASE, 0)
    assert index.lookup(104) == OffsetPosition(BASE, 0)
    assert index.lookup(105) == OffsetPosition(105, 50)
    assert index.lookup(119) == OffsetPosition(110, 120)
    assert index.lookup(10**9) == OffsetPosition(120, 300)
    assert (len(index), index.last_offset, index.last_position) == (3, 120, 300)


def test_offset_index_file_is_kafkas_format_and_reloads(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(105, 50)
    index.append(110, 120)
    index.close()
    assert index.path.read_bytes() == struct.pack(">iiii", 5, 50, 10, 120)
    reopened = offset_index(tmp_path)
    reopened.sanity_check(log_size=200)
    assert reopened.lookup(111) == OffsetPosition(110, 120)
    reopened.append(111, 150)  # appends continue after the loaded entries
    assert reopened.lookup(200) == OffsetPosition(111, 150)
    assert len(offset_index(tmp_path)) == 3


def test_offset_index_truncate_removes_entries_at_or_after(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for offset, position in [(105, 50), (110, 120), (120, 300)]:
        index.append(offset, position)
    index.truncate_to(110)
    assert (len(index), index.last_offset) == (1, 105)
    assert index.path.stat().st_size == 8
    index.append(107, 90)
    assert index.lookup(108) == OffsetPosition(107, 90)
    index.truncate_to(0)
    assert len(index) == 0 and index.lookup(200) == OffsetPosition(BASE, 0)


def test_offset_index_rejects_non_increasing_and_out_of_range_offsets(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(105, 50)
    with pytest.raises(ValueError):
        index.append(105, 60)
    with pytest.raises(ValueError):
        index.append(BASE - 1, 70)
    with pytest.raises(ValueError):
        index.append(BASE + 2**31, 70)


def test_offset_index_full_at_max_size(tmp_path: Path) -> None:
    index = offset_index(tmp_path, max_size=20)  # room for two 8-byte entries
    index.append(101, 10)
    assert not index.is_full
    index.append(102, 20)
    assert index.is_full


def test_position_of_batch_ending_before(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for offset, position in [(105, 50), (110, 120), (120, 300)]:
        index.append(offset, position)
    # The batch at the entry before the last one at or below the position ends in time.
    assert index.position_of_batch_ending_before(40) == 0
    assert index.position_of_batch_ending_before(119) == 0
    assert index.position_of_batch_ending_before(120) == 50
    assert index.position_of_batch_ending_before(10_000) == 120


@pytest.mark.parametrize(
    "content, log_size",
    [
        (b"\x01" * 5, 1000),  # torn: not whole entries
        (b"\x00" * 16, 1000),  # zero-filled (a preallocated file after a crash)
        (struct.pack(">ii", 5, 5000), 1000),  # points past the end of the log
        (struct.pack(">ii", -3, 10), 1000),  # offset below the base
    ],
)
def test_offset_index_sanity_check_catches_corruption(tmp_path: Path, content: bytes, log_size: int) -> None:
    (tmp_path / "00000000000000000100.index").write_bytes(content)
    index = offset_index(tmp_path)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(log_size)
    index.reset()
    index.sanity_check(log_size)
    assert index.path.stat().st_size == 0


def test_time_index_appends_only_when_the_timestamp_grows(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE)
    assert not index.maybe_append(NO_TIMESTAMP, 101)
    assert index.maybe_append(1000, 101)
    assert not index.maybe_append(1000, 105)
    assert not index.maybe_append(900, 106)
    assert index.maybe_append(2000, 110)
    assert len(index) == 2
    assert index.path.read_bytes() == struct.pack(">qiqi", 1000, 1, 2000, 10)
    with pytest.raises(ValueError):
        index.maybe_append(3000, 109)


def test_time_index_lookup_and_truncate(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    for timestamp, offset in [(1000, 101), (2000, 110), (3000, 120)]:
        index.maybe_append(timestamp, offset)
    assert index.lookup(999) == TimestampOffset(NO_TIMESTAMP, BASE)
    assert index.lookup(1000) == TimestampOffset(1000, 101)
    assert index.lookup(2999) == TimestampOffset(2000, 110)
    assert index.lookup(10**15) == TimestampOffset(3000, 120)
    index.truncate_to(111)
    assert index.last_entry == TimestampOffset(2000, 110)
    reopened = time_index(tmp_path)
    reopened.sanity_check()
    assert reopened.lookup(5000) == TimestampOffset(2000, 110)


def test_time_index_full_check_can_be_skipped_for_the_final_entry(tmp_path: Path) -> None:
    index = time_index(tmp_path, max_size=12)
    assert index.maybe_append(1000, 101)
    assert index.is_full
    assert not index.maybe_append(2000, 102)
    assert index.maybe_append(2000, 102, skip_full_check=True)


@pytest.mark.parametrize(
    "content",
    [b"\x07" * 13, struct.pack(">qiqi", 5000, 1, 1000, 2), struct.pack(">qi", 5000, -1)],
)
def test_time_index_sanity_check_catches_corruption(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "00000000000000000100.timeindex").write_bytes(content)
    with pytest.raises(CorruptIndexError):
        time_index(tmp_path).sanity_check()


def test_lookups_see_entries_appended_after_the_first_load(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(101, 10)
    assert index.lookup(150) == OffsetPosition(101, 10)  # loads the in-memory copy
    index.append(140, 70)
    assert index.lookup(150) == OffsetPosition(140, 70)
