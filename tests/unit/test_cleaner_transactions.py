"""Compaction of logs holding transactions, by Kafka's cleaner rules: aborted records are
removed and never shadow committed ones, markers stay while their transaction's data may
remain and go after their delete horizon, the `.txnindex` keeps only what is still needed,
producers' last batches and markers stay (emptied), and nothing at or past the LSO is
touched. Logs mix committed, aborted and open transactions with plain records and tombstones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.maintenance.cleaner import (
    CleanerStats,
    LogCleaningAborted,
    build_offset_map,
    clean_log,
    first_uncleanable_offset,
)
from loglake.maintenance.offset_map import OffsetMap
from loglake.record.aborted import AbortedTransactionFilter
from loglake.record.batch import decode_batches, encode_batch
from loglake.record.control import EndTransactionMarker, encode_marker_batch
from loglake.record.header import DELETE_HORIZON_MASK, RecordBatchHeader
from loglake.storage.log import Log
from loglake.storage.segment import now_ms
from loglake.storage.transaction_index import AbortedTxn

NOW = now_ms()
RETENTION = 1000
A, B, C, D = 1000, 2000, 3000, 4000
Rows = list[tuple[bytes, bytes | None]]


class Producer:
    """A transactional producer writing straight into a leader log, its sequence kept."""

    def __init__(self, log: Log, producer_id: int, epoch: int = 0) -> None:
        self.log, self.producer_id, self.epoch, self.seq = log, producer_id, epoch, 0

    def send(self, rows: Rows) -> int:
        batch = encode_batch(
            [(k, v, (), NOW) for k, v in rows],
            NOW,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            transactional=True,
        )
        self.seq += len(rows)
        return self.log.append_as_leader(batch, 0).first_offset

    def end(self, commit: bool, epoch: int | None = None) -> int:
        if epoch is not None and epoch != self.epoch:
            self.epoch, self.seq = epoch, 0
        marker = encode_marker_batch(self.producer_id, self.epoch, EndTransactionMarker(commit, 5), NOW)
        return self.log.append_as_leader(marker, 0, from_coordinator=True).first_offset


def plain(log: Log, rows: Rows) -> int:
    return log.append_as_leader(encode_batch([(k, v, (), NOW) for k, v in rows], NOW), 0).first_offset


def open_log(tmp_path: Path, name: str = "txn-compacted-0") -> Log:
    config = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20, delete_retention_ms=RETENTION)
    return Log.open(tmp_path / name, config)


def clean(log: Log, now: int = NOW) -> None:
    stats = CleanerStats()
    offset_map = OffsetMap(1 << 20)
    build_offset_map(log, 0, first_uncleanable_offset(log, log.log_end_offset, now), offset_map, stats)
    clean_log(log, offset_map, now, stats)


def batches(log: Log, start: int = 0) -> list[tuple[RecordBatchHeader, list]]:
    out = []
    for segment in log.segments:
        out.extend(decode_batches(segment.log.read(0, segment.size)))
    return [(h, rs) for h, rs in out if h.last_offset >= start]


def records(log: Log, committed: bool, end: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a consumer reads from offset 0 (read_committed: up to the LSO, aborted skipped)."""
    end = log.last_stable_offset(log.log_end_offset) if committed and end is None else end or log.log_end_offset
    skip = AbortedTransactionFilter(
        [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(0, end)] if committed else []
    )
    out = []
    for header, rs in batches(log):
        if header.base_offset >= end:
            break
        if header.is_control or skip.skips(header):
            continue
        out.extend((r.offset, r.key, r.value) for r in rs)
    return out


def latest(rs: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {k: (o, v) for o, k, v in rs}


def markers(log: Log) -> list[tuple[int, int, bool]]:
    """(offset, record count, delete horizon set) of every control batch."""
    return [
        (h.base_offset, h.record_count, bool(h.attributes & DELETE_HORIZON_MASK))
        for h, _ in batches(log)
        if h.is_control
    ]


def all_aborted(log: Log) -> list[AbortedTxn]:
    return log.collect_aborted_transactions(0, log.log_end_offset)


def history(log: Log) -> dict[str, int]:
    """Committed, aborted and open transactions among plain records and a tombstone; the
    aborted values are the newest of their keys, so they would win if they entered the map."""
    a, b, c = Producer(log, A), Producer(log, B), Producer(log, C)
    at = {"p0": plain(log, [(b"k1", b"p0"), (b"k2", b"p0"), (b"k3", b"p0")])}  # 0-2
    at["a"] = a.send([(b"k1", b"aborted"), (b"k2", b"aborted")])  # 3-4
    at["b"] = b.send([(b"k3", b"b-committed")])  # 5
    at["tombstone"] = plain(log, [(b"k2", None)])  # 6
    at["a2"] = a.send([(b"k4", b"aborted")])  # 7
    at["abort_a"] = a.end(commit=False)  # 8
    at["commit_b"] = b.end(commit=True)  # 9
    at["b2"] = b.send([(b"k1", b"b2-committed"), (b"k5", b"b2")])  # 10-11
    at["commit_b2"] = b.end(commit=True)  # 12
    at["p13"] = plain(log, [(b"k3", b"p13")])  # 13
    log.roll()
    at["c"] = c.send([(b"k1", b"open"), (b"k5", b"open")])  # 14-15: C stays open
    at["p16"] = plain(log, [(b"k5", b"p16")])  # 16
    at["a3"] = a.send([(b"k6", b"a-later")])  # 17: A's last data moves on
    at["commit_a3"] = a.end(commit=True)  # 18
    log.roll()
    return at


def test_aborted_records_go_and_never_shadow_committed_ones(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    at = history(log)
    lso = log.last_stable_offset(log.log_end_offset)
    assert lso == at["c"] == first_uncleanable_offset(log, log.log_end_offset, NOW)
    committed_before = latest(records(log, committed=True))
    tail_before = batches(log, lso)
    clean(log)
    # Latest committed value per key: k1 is B's (never A's aborted one), k2's tombstone kept,
    # k4 (only ever written by the aborted transaction) is gone; read_uncommitted reads the same.
    expected = {
        b"k1": (10, b"b2-committed"),
        b"k2": (6, None),
        b"k3": (13, b"p13"),
        b"k5": (11, b"b2"),
    }
    assert latest(records(log, committed=True)) == expected == committed_before
    assert latest(records(log, committed=False, end=lso)) == expected
    assert not [r for r in records(log, committed=False, end=lso) if r[2] == b"aborted"]
    # Past the LSO nothing changed: the open transaction, and what follows it.
    assert batches(log, lso) == tail_before
    assert log.last_stable_offset(log.log_end_offset) == lso
    # Markers stay this round (their transactions had data in it); A's abort keeps its entry.
    assert markers(log) == [(8, 1, False), (9, 1, False), (12, 1, False), (18, 1, False)]
    assert all_aborted(log) == [AbortedTxn(A, 3, 8, 5)]


def test_markers_get_a_horizon_once_their_data_is_gone_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    history(log)
    clean(log)
    expected = latest(records(log, committed=True))
    clean(log)
    # A's aborted data went last round: its marker now waits for its horizon, and the index
    # forgets it. B's first transaction's batch (superseded) went too. B's second stays: its
    # batch still holds k1 and k5.
    assert markers(log) == [(8, 1, True), (9, 1, True), (12, 1, False), (18, 1, False)]
    assert all_aborted(log) == []
    horizons = [h.base_timestamp for h, _ in batches(log) if h.is_control and h.attributes & DELETE_HORIZON_MASK]
    assert horizons == [NOW + RETENTION] * 2
    clean(log, now=NOW + RETENTION - 1)
    assert [m[0] for m in markers(log)] == [8, 9, 12, 18]
    clean(log, now=NOW + RETENTION)
    assert markers(log) == [(12, 1, False), (18, 1, False)]
    expected = {k: v for k, v in expected.items() if v[1] is not None}  # k2's tombstone went too
    assert latest(records(log, committed=True)) == expected
    # Reopened after a crash, the replay rebuilds the same state from the cleaned log.
    log.close()
    reopened = Log.open(log.dir, log.config, recovery_point=0, had_clean_shutdown=False)
    assert reopened.first_unstable_offset == 14 and all_aborted(reopened) == []
    assert latest(records(reopened, committed=True)) == expected


def test_a_producers_last_batch_and_marker_are_kept_emptied(tmp_path: Path) -> None:
    """D's transaction is aborted with a bumped epoch (as InitProducerId does): its data goes,
    but the marker carrying D's current epoch stays (it fences older epochs), emptied
    after its horizon; E's aborted batch is its last and stays as an empty header."""
    log = open_log(tmp_path)
    d, e = Producer(log, D), Producer(log, D + 1)
    d.send([(b"k", b"d")])  # 0
    d.end(commit=False, epoch=1)  # 1
    e.send([(b"k", b"e")])  # 2
    e.end(commit=False)  # 3
    plain(log, [(b"k", b"plain")])  # 4
    log.roll()
    clean(log)
    clean(log)
    clean(log, now=NOW + RETENTION)
    kept = [(h.base_offset, h.record_count, h.is_control, h.producer_id) for h, _ in batches(log)]
    assert kept == [(1, 0, True, D), (2, 0, False, D + 1), (3, 1, True, D + 1), (4, 1, False, -1)]
    # E's aborted batch, though empty, is still in the log: so are its marker and entry.
    assert all_aborted(log) == [AbortedTxn(D + 1, 2, 3, 4)]
    # D's old epoch is still fenced; E's retry of its last batch is still a duplicate.
    stale = encode_batch(
        [(b"k", b"d", (), NOW)], NOW, producer_id=D, producer_epoch=0, base_sequence=0, transactional=True
    )
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(stale, 0)
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    retry = encode_batch(
        [(b"k", b"e", (), NOW)], NOW, producer_id=D + 1, producer_epoch=0, base_sequence=0, transactional=True
    )
    assert log.append_as_leader(retry, 0).duplicate
    # A follower copying the cleaned log (an emptied marker included) ends in the same state.
    follower = open_log(tmp_path, "follower-0")
    for segment in log.segments[:-1]:  # the active one is empty
        follower.append_as_follower(segment.log.read(0, segment.size))
    assert follower.log_end_offset == log.log_end_offset
    assert follower.first_unstable_offset is None and all_aborted(follower) == all_aborted(log)


def test_cleaning_never_passes_an_open_transaction(tmp_path: Path) -> None:
    """A plan ending past the LSO (made elsewhere, on a replica that saw a marker this one
    has not) is refused and changes nothing."""
    log = open_log(tmp_path)
    history(log)
    before = batches(log)
    plan = OffsetMap.of(pa.array([b"k1"]), np.array([16]), log.log_end_offset)
    with pytest.raises(LogCleaningAborted, match="open"):
        clean_log(log, plan, NOW, CleanerStats())
    assert batches(log) == before


def test_an_aborted_transaction_ending_in_a_later_segment_is_found(tmp_path: Path) -> None:
    """Entries are found past segments that already gave some (Kafka's LSO rule)."""
    log = open_log(tmp_path)
    a, b = Producer(log, A), Producer(log, B)
    a.send([(b"x", b"1")])  # 0
    b.send([(b"y", b"1")])  # 1
    a.end(commit=False)  # 2
    log.roll()
    plain(log, [(b"z", b"1")])  # 3
    log.roll()
    b.end(commit=False)  # 4
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(A, 0, 2, 1), AbortedTxn(B, 1, 4, 5)]
    assert log.collect_aborted_transactions(3, 4) == [AbortedTxn(B, 1, 4, 5)]
