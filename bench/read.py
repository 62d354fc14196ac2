"""Read a ~1 GB partition end to end from offset 0, vs reading the segment files raw.

The log is written once, then read twice in the same run (page cache warm for both):
raw `readinto` of every segment file, and `Log.read` slices of up to 1 MB from offset 0
to the end, each slice's bytes read out (what a fetch sends).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from loglake.config import LogConfig
from loglake.record.batch import RecordRow, encode_batch
from loglake.storage.log import Log

FETCH_BYTES = 1024 * 1024


def write_log(path: Path, megabytes: int) -> Log:
    log = Log.open(path, LogConfig(segment_bytes=256 * 1024 * 1024))
    rows: list[RecordRow] = [(b"key-%06d" % i, os.urandom(100), [], None) for i in range(8000)]
    batch = encode_batch(rows, int(time.time() * 1000))
    for _ in range(megabytes * 1024 * 1024 // len(batch)):
        log.append_as_leader(batch, leader_epoch=0)
    log.flush()
    return log


def read_raw(path: Path) -> tuple[float, int]:
    buf = bytearray(FETCH_BYTES)
    total = 0
    start = time.perf_counter()
    for segment in sorted(path.glob("*.log")):
        with open(segment, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return time.perf_counter() - start, total


def read_log(log: Log) -> tuple[float, int]:
    total = 0
    offset = log.log_start_offset
    start = time.perf_counter()
    while offset < log.log_end_offset:
        piece = log.read(offset, FETCH_BYTES)
        total += len(piece.read_bytes())
        offset = piece.next_offset
    return time.perf_counter() - start, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
        path = Path(tmp) / "bench-0"
        log = write_log(path, args.megabytes)
        raw = min(read_raw(path) for _ in range(args.rounds))
        read = min(read_log(log) for _ in range(args.rounds))
        log.close()
    print(f"raw segment reads: {raw[1] / raw[0] / 1e6:10,.0f} MB/s ({raw[1] / 1e6:,.0f} MB)")
    print(f"Log.read slices  : {read[1] / read[0] / 1e6:10,.0f} MB/s ({read[1] / 1e6:,.0f} MB)")
    print(f"ratio log/raw    : {raw[0] / read[0]:.2f}")


if __name__ == "__main__":
    main()
