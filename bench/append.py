"""In-process append throughput through the partition's append path vs plain file.write.

~1 MB batches of 100-byte records (built once, outside the timed loop) are appended with
`Partition.append_records_to_leader` (leader check, validate, CRC, assign offsets, stamp
the leader epoch, index, roll, high watermark); the baseline writes the same bytes with a
`file.write` loop in the same run. Neither side fsyncs: like Kafka, durability comes from
replication and the flush policy, not from each append. Target ratio >= 0.7.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from loglake.cluster.partition import Partition
from loglake.config import LogConfig
from loglake.coordination.model import PartitionState
from loglake.record.batch import encode_batch
from loglake.storage.log import Log

RECORD_VALUE = 100


def build_batch(records: int) -> bytes:
    rows = [(b"key-%06d" % i, os.urandom(RECORD_VALUE), [], None) for i in range(records)]
    return encode_batch(rows, int(time.time() * 1000))


def bench_file_write(path: Path, batch: bytes, count: int) -> float:
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(count):
            f.write(batch)
    return time.perf_counter() - start


def bench_partition_append(log_dir: Path, batch: bytes, count: int) -> float:
    log = Log.open(log_dir / "bench-0", LogConfig(segment_bytes=512 * 1024 * 1024))
    partition = Partition("bench", 0, "bench-topic-id", log, broker_id=0)
    partition.make_leader(PartitionState(leader=0, leader_epoch=0, isr=(0,), controller_epoch=1), (0,), 0)
    start = time.perf_counter()
    for _ in range(count):
        partition.append_records_to_leader(batch, required_acks=1)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # ~1 MB, under the default max.message.bytes (1048588) including the batch header.
    per_batch = 1_000_000 // (RECORD_VALUE + 20)
    batch = build_batch(per_batch)
    count = args.megabytes * 1024 * 1024 // len(batch)
    records = count * per_batch
    mb = count * len(batch) / 1e6
    best_raw = best_log = float("inf")
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
            best_raw = min(best_raw, bench_file_write(Path(tmp) / "raw.bin", batch, count))
        with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
            best_log = min(best_log, bench_partition_append(Path(tmp), batch, count))
    print(f"batch size          : {len(batch):,} bytes, {count} batches, {mb:,.0f} MB")
    print(f"file.write baseline : {mb / best_raw:10,.0f} MB/s")
    print(f"partition append      : {mb / best_log:10,.0f} MB/s  {records / best_log:14,.0f} records/s")
    print(f"ratio append/raw    : {best_raw / best_log:.2f} (target >= 0.7)")


if __name__ == "__main__":
    main()
