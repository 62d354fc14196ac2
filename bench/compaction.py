"""MB/s of the broker's log cleaner vs a plain read + write of the same bytes, same run.

One compacted partition of `--mb` megabytes (default 1024; LOGLAKE_BENCH_COMPACTION_MB
overrides it for quick runs) holding 100k distinct keys with 100-byte values, written in
batches of 1000 records (uncompressed, as producers with linger send them) and rolled into
segments of `segment.bytes` (default 1 GiB, as Kafka's). The cleaner's side is one
`LogCleaner.clean_filthiest_log()`: the same call the broker's cleaner thread makes (offset
map over the dirty range, rewrite of every rolled segment, fsync, swap). The baseline reads
every segment file and writes the bytes to a new file, in 8 MB pieces, then fsyncs it:
the least any rewrite of the log must do. Ratio = cleaner MB/s / baseline MB/s, target >= 0.3.

    python -m bench.compaction [--mb 1024] [--keys 100000] [--segment-mb 1024]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from loglake.config import LogConfig
from loglake.maintenance.cleaner_manager import LogCleanerManager
from loglake.maintenance.log_cleaner import CleanerConfig, LogCleaner
from loglake.record.batch import encode_batch
from loglake.storage.log_manager import LogManager

VALUE_BYTES = 100
BATCH_RECORDS = 1000
PIECE = 8 * 1024 * 1024


def fill(log_manager: LogManager, config: LogConfig, target_bytes: int, keys: int) -> int:
    """Append batches of 1000 records, key i % keys, until the log holds `target_bytes`."""
    log = log_manager.get_or_create_log("compacted", 0, config)
    value = bytes(range(VALUE_BYTES))
    now = int(time.time() * 1000)
    # A few distinct batches, reused: encoding is not what is measured.
    batches = [
        encode_batch(
            [(b"key-%06d" % ((b * BATCH_RECORDS + i) % keys), value, (), now) for i in range(BATCH_RECORDS)], now
        )
        for b in range(max(1, keys // BATCH_RECORDS))
    ]
    n = 0
    while log.size < target_bytes:
        log.append_as_leader(batches[n % len(batches)], leader_epoch=0)
        n += 1
    log.roll()
    log.flush()
    return log.size


def baseline(dir: Path, out: Path) -> float:
    """Seconds to read every .log under `dir` and write it to `out`, fsynced."""
    start = time.perf_counter()
    with open(out, "wb") as w:
        for path in sorted(dir.glob("*.log")):
            with open(path, "rb") as r:
                while piece := r.read(PIECE):
                    w.write(piece)
        w.flush()
        os.fsync(w.fileno())
    return time.perf_counter() - start


def drop_page_cache_hint(dir: Path) -> None:
    """Both sides read from the page cache: each runs right after the other touched the files."""
    for path in dir.glob("*.log"):
        with open(path, "rb") as f:
            while f.read(PIECE):
                pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=int(os.environ.get("LOGLAKE_BENCH_COMPACTION_MB", "1024")))
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--segment-mb", type=int, default=1024)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        config = LogConfig(
            cleanup_policy="compact", segment_bytes=args.segment_mb * 1024 * 1024, min_cleanable_dirty_ratio=0.01
        )
        log_manager = LogManager([root / "logs"], config)
        t = time.perf_counter()
        size = fill(log_manager, config, args.mb * 1024 * 1024, args.keys)
        log = log_manager.get_log("compacted", 0)
        assert log is not None
        segments = len(log.segments) - 1
        print(
            f"log: {size / 2**20:.0f} MB in {segments} rolled segments, {args.keys} keys, filled in "
            f"{time.perf_counter() - t:.1f} s"
        )

        drop_page_cache_hint(log.dir)
        base_s = baseline(log.dir, root / "copy.bin")
        (root / "copy.bin").unlink()
        base_mbs = size / 2**20 / base_s
        print(f"plain read + write: {base_s:.2f} s, {base_mbs:.0f} MB/s")

        cleaner = LogCleaner(CleanerConfig(), LogCleanerManager(log_manager, lambda lg: lg.log_end_offset))
        drop_page_cache_hint(log.dir)
        t = time.perf_counter()
        assert cleaner.clean_filthiest_log()
        clean_s = time.perf_counter() - t
        clean_mbs = size / 2**20 / clean_s
        last = cleaner.manager.last_cleanings[("compacted", 0)]
        print(
            f"log cleaner: {clean_s:.2f} s, {clean_mbs:.0f} MB/s ({last.bytes_read / 2**20:.0f} MB in, "
            f"{last.bytes_written / 2**20:.1f} MB out)"
        )
        print(f"ratio (cleaner / plain read + write): {clean_mbs / base_mbs:.2f}  (target >= 0.3)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
