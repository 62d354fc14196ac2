"""Transactions in the log: markers (Kafka's control batch format), open transactions
and the first unstable offset / LSO, the `.txnindex` of aborted transactions (Kafka's
entry format), followers, truncation, snapshots and recovery, and compaction's rules."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.maintenance.cleaner import CleanerStats, build_offset_map, clean_log, first_uncleanable_offset
from loglake.maintenance.offset_map import OffsetMap
from loglake.record.batch import decode_batches, encode_batch
from loglake.record.control import EndTransactionMarker, decode_marker, encode_marker_batch
from loglake.record.header import RecordBatchHeader
from loglake.storage.log import Log
from loglake.storage.segment import now_ms
from loglake.storage.transaction_index import AbortedTxn

NOW = now_ms()
A, B = 1000, 2000


def txn_batch(producer_id: int, seq: int, count: int = 2, epoch: int = 0, key: bytes | None = None) -> bytes:
    rows = [(key, b"v%d" % (seq + i), (), NOW) for i in range(count)]
    return encode_batch(rows, NOW, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq, transactional=True)


def marker(producer_id: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 3) -> bytes:
    return encode_marker_batch(producer_id, epoch, EndTransactionMarker(commit, coordinator_epoch), NOW)


def open_log(path: Path, name: str = "t-0", **config: object) -> Log:
    return Log.open(path / name, LogConfig(**config))


def end_txn(log: Log, producer_id: int, commit: bool, epoch: int = 0) -> int:
    return log.append_as_leader(marker(producer_id, commit, epoch), 0, from_coordinator=True).first_offset


def all_aborted(log: Log) -> list[AbortedTxn]:
    return log.collect_aborted_transactions(0, log.log_end_offset)


def test_a_marker_is_kafkas_control_batch() -> None:
    data = marker(A, commit=True, epoch=2, coordinator_epoch=7)
    ((header, records),) = decode_batches(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (A, 2, -1)
    assert records[0].key == struct.pack(">hh", 0, 1)  # version 0, COMMIT
    assert records[0].value == struct.pack(">hi", 0, 7)  # version 0, coordinator epoch
    assert decode_marker(data) == EndTransactionMarker(True, 7)
    assert decode_marker(marker(A, commit=False)) == EndTransactionMarker(False, 3)
    with pytest.raises(KafkaError):
        decode_marker(txn_batch(A, 0))


def test_open_transactions_bound_the_lso_and_markers_close_them(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(encode_batch([(None, b"plain", (), NOW)], NOW), 0)  # offset 0
    assert log.first_unstable_offset is None and log.last_stable_offset(1) == 1
    log.append_as_leader(txn_batch(A, 0), 0)  # 1-2
    log.append_as_leader(txn_batch(B, 0), 0)  # 3-4
    log.append_as_leader(txn_batch(A, 2), 0)  # 5-6: A's transaction still starts at 1
    assert log.first_unstable_offset == 1
    assert log.last_stable_offset(log.log_end_offset) == 1
    assert log.last_stable_offset(0) == 0  # never past the high watermark
    assert end_txn(log, A, commit=True) == 7
    assert log.first_unstable_offset == 3
    assert all_aborted(log) == []  # commits are not indexed
    assert end_txn(log, B, commit=False) == 8
    assert log.first_unstable_offset is None
    assert log.last_stable_offset(log.log_end_offset) == 9
    assert all_aborted(log) == [AbortedTxn(B, 3, 8, 9)]
    # A's next transaction starts at its first batch after the marker.
    log.append_as_leader(txn_batch(A, 4), 0)
    assert log.first_unstable_offset == 9


def test_the_aborted_entry_records_the_lso_left_by_other_open_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(A, 0), 0)  # 0-1
    log.append_as_leader(txn_batch(B, 0), 0)  # 2-3
    end_txn(log, B, commit=False)  # 4: A still open from 0
    end_txn(log, A, commit=False)  # 5
    assert all_aborted(log) == [AbortedTxn(B, 2, 4, 0), AbortedTxn(A, 0, 5, 6)]
    # Kafka's 34-byte entries: version, producerId, firstOffset, lastOffset, lastStableOffset.
    raw = log.active_segment.txn_index.path.read_bytes()
    assert raw == struct.pack(">hqqqq", 0, B, 2, 4, 0) + struct.pack(">hqqqq", 0, A, 0, 5, 6)
    # A fetch sees only the transactions overlapping what it reads.
    assert log.collect_aborted_transactions(5, 6) == [AbortedTxn(A, 0, 5, 6)]
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(A, 0, 5, 6)]


def test_markers_come_only_from_the_coordinator_and_not_from_an_older_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(A, 0, epoch=1), 0)
    end = log.log_end_offset
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(marker(A, commit=True, epoch=1), 0)
    assert caught.value.code == ErrorCode.INVALID_RECORD
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(marker(A, commit=True, epoch=0), 0, from_coordinator=True)
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == end and log.first_unstable_offset == 0


def test_an_abort_with_a_bumped_epoch_fences_the_old_epoch(tmp_path: Path) -> None:
    """InitProducerId bumps the epoch and the coordinator aborts with the new one: the old
    epoch is refused, the new one starts at sequence 0."""
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(A, 0, epoch=0), 0)
    end_txn(log, A, commit=False, epoch=1)
    assert all_aborted(log) == [AbortedTxn(A, 0, 2, 3)]
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(txn_batch(A, 2, epoch=0), 0)
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as caught:
        log.append_as_leader(txn_batch(A, 5, epoch=1), 0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(txn_batch(A, 0, epoch=1), 0)
    assert log.first_unstable_offset == 3


def test_a_marker_for_a_producer_without_data_here_changes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    end_txn(log, A, commit=False)
    assert all_aborted(log) == [] and log.first_unstable_offset is None


def _history(log: Log) -> None:
    """Segments rolled between transactions: aborted, committed and one left open."""
    log.append_as_leader(txn_batch(A, 0), 0)
    log.append_as_leader(txn_batch(B, 0), 0)
    end_txn(log, A, commit=False)
    log.roll()
    end_txn(log, B, commit=True)
    log.append_as_leader(txn_batch(A, 0, epoch=1), 0)
    log.append_as_leader(txn_batch(B, 2), 0)
    end_txn(log, B, commit=False)
    log.roll()
    log.append_as_leader(txn_batch(A, 2, epoch=1), 0)  # A's transaction stays open


def test_followers_replicate_markers_into_the_same_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path)
    _history(leader)
    follower = open_log(tmp_path, "f-0")
    offset = 0
    while offset < leader.log_end_offset:
        piece = leader.read(offset, 1 << 20)
        follower.append_as_follower(piece.read_bytes())
        offset = piece.next_offset
    assert all_aborted(follower) == all_aborted(leader) == [AbortedTxn(A, 0, 4, 2), AbortedTxn(B, 8, 10, 6)]
    assert follower.first_unstable_offset == leader.first_unstable_offset == 6


def test_clean_restart_keeps_open_transactions_in_the_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    _history(log)
    expected = all_aborted(log)
    log.flush()
    log.close()
    reopened = Log.open(log.dir, log.config, recovery_point=log.log_end_offset, had_clean_shutdown=True)
    assert reopened.first_unstable_offset == 6
    assert all_aborted(reopened) == expected
    end_txn(reopened, A, commit=True, epoch=1)
    assert reopened.first_unstable_offset is None


@pytest.mark.parametrize("lost", ["txnindex", "snapshots", "both"])
def test_unclean_shutdown_rebuilds_the_txnindex_and_the_lso(tmp_path: Path, lost: str) -> None:
    log = open_log(tmp_path)
    _history(log)
    expected = all_aborted(log)
    crashed = tmp_path / "crashed-0"
    shutil.copytree(log.dir, crashed)
    if lost in ("txnindex", "both"):
        for index in crashed.glob("*.txnindex"):
            index.write_bytes(index.read_bytes()[:-3])  # torn: not a whole entry
    if lost in ("snapshots", "both"):
        for snapshot in crashed.glob("*.snapshot"):
            snapshot.unlink()
    recovered = Log.open(crashed, log.config, recovery_point=0, had_clean_shutdown=False)
    assert all_aborted(recovered) == expected
    assert recovered.first_unstable_offset == 6
    assert sorted(p.name for p in crashed.glob("*.txnindex")) == sorted(p.name for p in log.dir.glob("*.txnindex"))


def test_truncation_drops_the_entries_and_transactions_past_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(A, 0), 0)  # 0-1
    end_txn(log, A, commit=False)  # 2
    log.append_as_leader(txn_batch(B, 0), 0)  # 3-4
    end_txn(log, B, commit=False)  # 5
    log.truncate_to(5)
    assert all_aborted(log) == [AbortedTxn(A, 0, 2, 3)]
    assert log.first_unstable_offset == 3  # B's transaction is open again
    log.truncate_to(2)
    assert all_aborted(log) == [] and log.first_unstable_offset == 0


def _clean(log: Log) -> None:
    stats = CleanerStats()
    offset_map = OffsetMap(1 << 20)
    build_offset_map(log, 0, first_uncleanable_offset(log, log.log_end_offset, NOW), offset_map, stats)
    clean_log(log, offset_map, NOW, stats)


def test_compaction_keeps_markers_and_their_index_and_stops_at_the_lso(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact", segment_bytes=4096)
    log.append_as_leader(txn_batch(A, 0, count=1, key=b"k"), 0)  # 0
    end_txn(log, A, commit=False)  # 1
    log.append_as_leader(txn_batch(A, 1, count=1, key=b"k"), 0)  # 2
    end_txn(log, A, commit=True)  # 3
    log.append_as_leader(encode_batch([(b"k", b"plain", (), NOW)], NOW), 0)  # 4
    log.roll()
    log.append_as_leader(txn_batch(B, 0, count=1, key=b"k"), 0)  # 5: open
    log.roll()
    # The open transaction at 5 bounds cleaning, although its segment is rolled.
    assert first_uncleanable_offset(log, log.log_end_offset, NOW) == 5
    _clean(log)
    headers = [h for s in log.segments for h in _headers(s)]
    kept = [(h.base_offset, h.record_count, h.is_control) for h in headers]
    # Both markers stay; the superseded values of k go.
    assert (1, 1, True) in kept and (3, 1, True) in kept
    assert (4, 1, False) in kept and (5, 1, False) in kept
    assert all_aborted(log) == [AbortedTxn(A, 0, 1, 2)]
    assert log.segments[0].txn_index.path.exists()


def _headers(segment) -> list[RecordBatchHeader]:
    data = segment.log.read(0, segment.size)
    return [h for h, _ in decode_batches(data)]
