"""Append throughput of ~1 MB batches against a plain file.write loop of the same bytes.

Slow and timing-based (shared machines drift), so best-of-several in the same run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from loglake.config import LogConfig
from loglake.storage.log import Log

ROUNDS = 5
MEGABYTES = 128


def one_megabyte_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        batch_size=1 << 30,
    )
    for i in range(8000):  # 100-byte values: per-record work would show
        builder.append(i, timestamp=1_700_000_000_000, key=b"key-%06d" % i, value=os.urandom(100), headers=[])
    return bytes(builder.build())


def file_write_seconds(path: Path, batch: bytes, count: int) -> float:
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(count):
            f.write(batch)
        f.flush()
    return time.perf_counter() - start


def log_append_seconds(path: Path, batch: bytes, count: int) -> float:
    log = Log.open(path, LogConfig(segment_bytes=1 << 30, max_message_bytes=2 << 20))
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(batch, leader_epoch=0)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


@pytest.mark.slow
def test_append_keeps_up_with_file_write(tmp_path: Path) -> None:
    batch = one_megabyte_batch()
    count = MEGABYTES * 1024 * 1024 // len(batch)
    raw = appended = float("inf")
    for i in range(ROUNDS):
        raw = min(raw, file_write_seconds(tmp_path / f"raw{i}.bin", batch, count))
        (tmp_path / f"raw{i}.bin").unlink()
        appended = min(appended, log_append_seconds(tmp_path / f"bench-{i}", batch, count))
        for segment in (tmp_path / f"bench-{i}").glob("*"):
            segment.unlink()
    assert raw / appended >= 0.7, f"append/raw throughput ratio {raw / appended:.2f}"
