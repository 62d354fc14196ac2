"""The segment-rewrite core on a real Log in a temp dir: latest value per key, offsets
kept, tombstones and their delete horizon, producer metadata, grouping, swap recovery."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from loglake.config import LogConfig
from loglake.maintenance.cleaner import CleanerStats, build_offset_map, clean_log, first_uncleanable_offset
from loglake.maintenance.offset_map import OffsetMap
from loglake.record.batch import decode_batches, encode_batch
from loglake.record.compression import CompressionType
from loglake.record.header import DELETE_HORIZON_MASK, RecordBatchHeader
from loglake.storage.log import Log


NOW = int(time.time() * 1000)  # producers older than a day would expire


def open_log(tmp_path: Path, **config: object) -> Log:
    defaults = {"segment_bytes": 4096, "delete_retention_ms": 1000, "cleanup_policy": "compact"}
    return Log.open(tmp_path / "compacted-0", LogConfig(**{**defaults, **config}))


def produce(log: Log, rows: list[tuple[bytes, bytes | None]], compression=CompressionType.NONE, **kw) -> None:
    batch = encode_batch([(k, v, (), NOW) for k, v in rows], NOW, compression=compression, **kw)
    log.append_as_leader(batch, leader_epoch=0)


def read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        piece = log.read(offset, 1 << 20)
        if not piece.size:
            break
        for _, records in decode_batches(piece.read_bytes()):
            out.extend((r.offset, r.key, r.value) for r in records if r.offset >= offset)
        offset = piece.next_offset
    return out


def clean(log: Log, now: int = NOW, capacity: int = 1 << 20) -> CleanerStats:
    stats = CleanerStats()
    offset_map = OffsetMap(capacity)
    build_offset_map(log, 0, first_uncleanable_offset(log, log.log_end_offset, now), offset_map, stats)
    clean_log(log, offset_map, now, stats)
    return stats


def versions(log: Log, keys: int, rounds: int, **kw) -> dict[bytes, tuple[int, bytes | None]]:
    latest = {}
    for r in range(rounds):
        rows = [(b"k%03d" % k, b"v%d-%d" % (r, k) * 5) for k in range(keys)]
        base = log.log_end_offset
        produce(log, rows, **kw)
        for i, (k, v) in enumerate(rows):
            latest[k] = (base + i, v)
    return latest


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
def test_latest_value_per_key_at_unchanged_offsets(tmp_path: Path, compression: CompressionType) -> None:
    log = open_log(tmp_path)
    latest = versions(log, 20, 30, compression=compression)
    log.roll()
    size_before = log.size
    end_before = log.log_end_offset
    clean(log)
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == read_all(log)
    assert log.log_end_offset == end_before
    assert log.size < size_before / 5
    # The next cleaning groups the small cleaned segments into one (up to segment.bytes).
    clean(log)
    assert len(log.segments) == 2  # one cleaned segment and the active one
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == read_all(log)
    log.close()
    reopened = Log.open(log.dir, log.config)
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == read_all(reopened)


def test_tombstones_get_a_delete_horizon_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    versions(log, 10, 3)
    produce(log, [(b"k001", None), (b"k002", None)])
    log.roll()
    clean(log)
    records = read_all(log)
    assert [(k, v) for _, k, v in records if v is None] == [(b"k001", None), (b"k002", None)]
    tombstone_batch = [h for h in _headers(log) if h.attributes & DELETE_HORIZON_MASK]
    assert [h.base_timestamp for h in tombstone_batch] == [NOW + 1000]
    # Record timestamps survive the rewrite against the horizon.
    piece = log.read(records[-1][0], 1 << 20)
    assert all(r.timestamp == NOW for _, rs in decode_batches(piece.read_bytes()) for r in rs)
    clean(log, now=NOW + 999)
    assert len([r for r in read_all(log) if r[2] is None]) == 2
    clean(log, now=NOW + 1000)
    assert sorted(k for _, k, v in read_all(log)) == [b"k%03d" % k for k in range(10) if k not in (1, 2)]


def test_last_batch_of_a_live_producer_is_kept_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, [(b"a", b"1")], producer_id=7, producer_epoch=0, base_sequence=0)
    produce(log, [(b"a", b"2")], producer_id=7, producer_epoch=0, base_sequence=1)
    produce(log, [(b"a", b"3")])
    produce(log, [(b"b", b"1")])
    log.roll()
    clean(log)
    headers = _headers(log)
    kept = [(h.base_offset, h.record_count, h.producer_id, h.base_sequence) for h in headers]
    # offset 1 is the producer's last batch: kept with no record; the group's last batch stays too.
    assert kept == [(1, 0, 7, 1), (2, 1, -1, -1), (3, 1, -1, -1)]
    # The producer's retry of its last batch is still recognised as a duplicate.
    retry = encode_batch([(b"a", b"2", (), NOW)], NOW, producer_id=7, producer_epoch=0, base_sequence=1)
    assert log.append_as_leader(retry, leader_epoch=0).duplicate


def test_full_offset_map_cleans_in_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    latest = versions(log, 40, 5)
    log.roll()
    stats = CleanerStats()
    offset_map = OffsetMap(25)
    build_offset_map(log, 0, log.log_end_offset, offset_map, stats)
    assert 0 < offset_map.end_offset < log.log_end_offset
    clean_log(log, offset_map, NOW, stats)
    assert {k: (o, v) for o, k, v in read_all(log)}.items() >= latest.items()
    clean(log)
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == read_all(log)


@pytest.mark.parametrize("step", ["after-cleaned", "after-swap", "mid-deleted", "after-deleted", "after-rename"])
def test_a_crash_at_each_swap_step_recovers_old_or_new(tmp_path: Path, step: str, monkeypatch) -> None:
    """The swap's renames stop at `step` (as a kill -9 would); reopening gives old or new."""
    log = open_log(tmp_path)
    latest = versions(log, 20, 20)
    log.roll()
    before = read_all(log)

    class Crash(BaseException):
        pass

    def crash(signum_pid, sig) -> None:
        raise Crash

    monkeypatch.setenv("LOGLAKE_FAULT", f"cleaner-{step}")
    monkeypatch.setattr(os, "kill", crash)
    with pytest.raises(Crash):
        clean(log)
    monkeypatch.delenv("LOGLAKE_FAULT")
    reopened = Log.open(log.dir, log.config, had_clean_shutdown=False)
    after = read_all(reopened)
    if step in ("after-cleaned",):
        assert after == before
    else:
        assert {k: (o, v) for o, k, v in after}.items() >= latest.items()
        assert [o for o, _, _ in after] == sorted({o for o, _, _ in after})
        assert set(after) <= set(before)
    assert not [p for p in reopened.dir.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted", ".swap-end")]


def _headers(log: Log) -> list[RecordBatchHeader]:
    out = []
    for segment in log.segments:
        data = segment.log.read(0, segment.size)
        pos = 0
        while pos < len(data):
            header = RecordBatchHeader.parse(data, pos)
            out.append(header)
            pos += header.size
    return out


def test_a_reader_inside_a_swapped_range_goes_on_at_the_next_kept_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    latest = versions(log, 20, 10)
    log.roll()
    held = log.read(0, 1 << 20)  # a fetch answered just before the swap, not yet sent
    expected_bytes = held.read_bytes()
    clean(log)
    # The old files are gone from the directory, but what was handed out still reads.
    assert held.read_bytes() == expected_bytes
    kept = sorted(o for o, _ in latest.values())
    for offset in (0, 5, kept[0] - 1, kept[3] - 1):
        piece = log.read(offset, 1 << 20)
        first = next(r.offset for _, rs in decode_batches(piece.read_bytes()) for r in rs if r.offset >= offset)
        assert first == min(o for o in kept if o >= offset)
