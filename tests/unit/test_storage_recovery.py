"""Crash recovery of a Log: torn tails cut, indexes rebuilt, complete batches kept with their offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_storage_support import make_batch, split_batches

from loglake.config import LogConfig
from loglake.record.header import RecordBatchHeader
from loglake.storage.leader_epoch_cache import EpochEntry
from loglake.storage.log import Log

CONFIG = LogConfig(segment_bytes=900, index_interval_bytes=80)


def write_log(path: Path, batches: int, epoch: int = 0) -> tuple[Log, list[bytes]]:
    """A log of `batches` appends (left open, as a crashed broker leaves it) and the stored batches."""
    log = Log.open(path, CONFIG)
    for i in range(batches):
        log.append_as_leader(make_batch(1 + i % 3, timestamp=1000 + i, value_size=20, tag=i), epoch)
    return log, stored_batches(log)


def stored_batches(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        piece = log.read(offset, 10**6)
        out += split_batches(piece.read_bytes())
        offset = piece.next_offset
    return out


def next_offset(batch: bytes) -> int:
    return RecordBatchHeader.parse(batch).next_offset


def segment_files(path: Path, suffix: str) -> list[Path]:
    return sorted(path.glob(f"*{suffix}"))


@pytest.mark.parametrize("damage", ["half_batch", "garbage", "crc", "zeros", "short"])
@pytest.mark.parametrize("indexes", ["kept", "deleted", "corrupt"])
def test_torn_tail_is_cut_and_indexes_rebuilt(tmp_path: Path, damage: str, indexes: str) -> None:
    path = tmp_path / "events-0"
    _, batches = write_log(path, 40)
    active = segment_files(path, ".log")[-1]
    data = active.read_bytes()
    last = batches[-1]
    assert data.endswith(last)
    good = data[: len(data) - len(last)]
    tails = {
        "half_batch": last[: len(last) // 2],
        "garbage": last + b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00garbage",
        "crc": last[:30] + bytes([last[30] ^ 0x55]) + last[31:],
        "zeros": last + bytes(4096),
        "short": last + b"\xff" * 7,
    }
    active.write_bytes(good + tails[damage])
    for index in segment_files(path, "index"):
        if indexes == "deleted":
            index.unlink()
        elif indexes == "corrupt":
            index.write_bytes(b"\x01" * 5)
    survivors = batches if damage in ("garbage", "zeros", "short") else batches[:-1]

    log = Log.open(path, CONFIG)  # no clean shutdown: recover from the start

    assert log.log_end_offset == next_offset(survivors[-1])
    assert active.read_bytes() == good + (last if survivors is batches else b"")
    assert stored_batches(log) == survivors
    for batch in survivors:  # every offset of every batch is found through the rebuilt index
        header = RecordBatchHeader.parse(batch)
        for offset in range(header.base_offset, header.next_offset):
            assert log.read(offset, 1).read_bytes() == batch
    assert all(p.stat().st_size % 8 == 0 for p in segment_files(path, ".index"))
    assert log.append_as_leader(make_batch(1), 0).first_offset == next_offset(survivors[-1])


def test_corruption_in_an_unflushed_middle_segment_drops_everything_after_it(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log, batches = write_log(path, 60)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 4
    victim = segment_files(path, ".log")[2]
    raw = bytearray(victim.read_bytes())
    raw[-5] ^= 0xFF  # a bit flip inside the last batch of the third segment
    victim.write_bytes(bytes(raw))

    # Flushed up to the second segment: the damage is after the recovery point.
    recovered = Log.open(path, CONFIG, recovery_point=bases[1] + 1)

    kept = [b for b in batches if next_offset(b) <= bases[3]][:-1]
    assert stored_batches(recovered) == kept
    assert [s.base_offset for s in recovered.segments] == bases[:3]
    assert [int(p.stem) for p in segment_files(path, ".log")] == bases[:3]
    assert recovered.log_end_offset == next_offset(kept[-1])


def test_segments_below_the_recovery_point_are_trusted(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log, batches = write_log(path, 60)
    bases = [s.base_offset for s in log.segments]
    victim = segment_files(path, ".log")[1]
    raw = bytearray(victim.read_bytes())
    raw[100] ^= 0xFF  # inside a record, not a header: only a CRC check would notice
    victim.write_bytes(bytes(raw))
    trusted = Log.open(path, CONFIG, recovery_point=bases[3])
    assert trusted.log_end_offset == log.log_end_offset  # not rescanned, as in Kafka
    trusted.close()
    rescanned = Log.open(path, CONFIG, recovery_point=0)
    assert rescanned.log_end_offset < bases[2]
    assert [s.base_offset for s in rescanned.segments] == bases[:2]


def test_clean_shutdown_skips_recovery_but_still_checks_indexes(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log, batches = write_log(path, 30)
    log.flush()
    log.close()
    active = segment_files(path, ".log")[-1]
    raw = bytearray(active.read_bytes())
    raw[-1] ^= 0xFF  # a CRC error a recovery would find
    active.write_bytes(bytes(raw))
    first_index = segment_files(path, ".index")[0]
    first_index.write_bytes(b"\x00" * 16)
    clean = Log.open(path, CONFIG, recovery_point=log.log_end_offset, had_clean_shutdown=True)
    assert clean.log_end_offset == log.log_end_offset  # the tail was not re-validated
    assert first_index.read_bytes() != b"\x00" * 16  # but the zeroed index was rebuilt
    for batch in batches[:-1]:
        assert clean.read(RecordBatchHeader.parse(batch).base_offset, 1).read_bytes() == batch


def test_leader_epoch_cache_is_rebuilt_and_kept_within_the_log(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    log = Log.open(path, CONFIG)
    for epoch in (1, 1, 3, 3, 6):
        log.append_as_leader(make_batch(2), epoch)
    log.assign_leader_epoch(8, log.log_end_offset)  # elected, nothing written yet
    assert log.leader_epoch_cache.entries[-1] == EpochEntry(8, 10)
    (path / "leader-epoch-checkpoint").unlink()
    rebuilt = Log.open(path, CONFIG)
    assert rebuilt.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(3, 4), EpochEntry(6, 8))
    rebuilt.assign_leader_epoch(8, 10)
    active = segment_files(path, ".log")[-1]
    active.write_bytes(active.read_bytes()[:-3])  # tear the epoch-6 batch
    cut = Log.open(path, CONFIG)
    assert cut.log_end_offset == 8
    assert cut.leader_epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(3, 4))


def test_orphan_index_files_are_removed_and_start_offset_respected(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    path.mkdir()
    (path / "00000000000000000042.index").write_bytes(b"")
    (path / "00000000000000000042.timeindex").write_bytes(b"")
    log = Log.open(path, CONFIG, log_start_offset=300)
    assert sorted(p.name for p in path.glob("0*")) == [
        "00000000000000000300.index",
        "00000000000000000300.log",
        "00000000000000000300.timeindex",
    ]
    assert (log.log_start_offset, log.log_end_offset) == (300, 300)
    log.append_as_leader(make_batch(2), 0)
    log.close()
    # A log start beyond the data (everything below it deleted) restarts the log there.
    moved = Log.open(path, CONFIG, log_start_offset=500)
    assert (moved.log_start_offset, moved.log_end_offset) == (500, 500)
