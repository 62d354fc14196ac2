"""MB/s of the broker's log cleaner vs a plain read + write of the same bytes, same run.

One compacted partition of `--mb` megabytes (default 1024; LOGLAKE_BENCH_COMPACTION_MB
overrides it for quick runs) holding 100k distinct keys with 100-byte values, written in
batches of 1000 records (uncompressed, as producers with linger send them) and rolled into
segments of `segment.bytes` (default 1 GiB, as Kafka's). The cleaner's side is one
`LogCleaner.clean_filthiest_log()`: the same call the broker's cleaner thread makes (offset
map over the dirty range, rewrite of every rolled segment, fsync, swap). The baseline reads
every segment file and writes the bytes to a new file, in 8 MB pieces, then fsyncs it:
the least any rewrite of the log must do. Ratio = cleaner MB/s / baseline MB/s, target >= 0.3.

With `--spark`, the same work is then done by the Spark executor: a broker process hosts the
same log (topic with `loglake.compaction.executor=spark`), and `jobs/compact.py`'s `run`
(Spark `local[*]` reading the dirty range through the `loglake` source, one aggregation,
the plan posted to the broker, which rewrites its segments) is timed, its session already
started.

    python -m bench.compaction [--mb 1024] [--keys 100000] [--segment-mb 1024] [--spark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from loglake.config import LogConfig
from loglake.maintenance.cleaner_manager import LogCleanerManager
from loglake.maintenance.log_cleaner import CleanerConfig, LogCleaner
from loglake.record.batch import encode_batch
from loglake.storage.log import Log
from loglake.storage.log_manager import LogManager

from harness.process import BrokerProcess

ROOT = Path(__file__).resolve().parent.parent

VALUE_BYTES = 100
BATCH_RECORDS = 1000
PIECE = 8 * 1024 * 1024


def fill_log(log: Log, target_bytes: int, keys: int) -> int:
    """Append batches of 1000 records, key i % keys, until the log holds `target_bytes`."""
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


def spark_executor_seconds(root: Path, config: LogConfig, target_bytes: int, keys: int) -> tuple[float, int]:
    """Seconds of `jobs.compact.run` over a broker process holding a log like the cleaner's,
    and the log's size after."""
    from loglake.spark import job_session

    from jobs.compact import parse_args, run

    topic = "compacted-spark"
    log_dir = root / "broker-logs"
    overrides = {"log.cleaner.enable": "false"}
    topic_configs = {"cleanup.policy": "compact", "loglake.compaction.executor": "spark"}
    topic_configs["segment.bytes"] = str(config.segment_bytes)
    with BrokerProcess(log_dir, config=ROOT / "conf/server.properties", overrides=overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config=topic_configs)])[topic].result(30)
        del admin  # before the broker stops: no reconnection attempts in the output
    # The broker is stopped: fill its log in place, then start it again on the same ports.
    log_manager = LogManager([log_dir], config)
    log = log_manager.get_or_create_log(topic, 0, config)
    fill_log(log, target_bytes, keys)
    log_manager.shutdown()
    with BrokerProcess(
        log_dir, ROOT / "conf/server.properties", overrides, kafka_port=broker.kafka_port, http_port=broker.http_port
    ) as broker:
        args = ["--bootstrap-servers", broker.bootstrap, "--topics", topic]
        with job_session("bench-compaction") as spark:
            t = time.perf_counter()
            answers = run(spark, parse_args([*args, "--timeout-s", "600"]))
            seconds = time.perf_counter() - t
        assert answers and all(a["cleaned_up_to"] > 0 for a in answers), answers
    size = sum(p.stat().st_size for p in (log_dir / f"{topic}-0").glob("*.log"))
    return seconds, size


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
    parser.add_argument("--spark", action="store_true", help="also time the Spark executor on the same work")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        config = LogConfig(
            cleanup_policy="compact", segment_bytes=args.segment_mb * 1024 * 1024, min_cleanable_dirty_ratio=0.01
        )
        log_manager = LogManager([root / "logs"], config)
        t = time.perf_counter()
        log = log_manager.get_or_create_log("compacted", 0, config)
        size = fill_log(log, args.mb * 1024 * 1024, args.keys)
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
        if args.spark:
            spark_s, after = spark_executor_seconds(root, config, args.mb * 1024 * 1024, args.keys)
            print(
                f"Spark executor (jobs/compact.py run, local[*]): {spark_s:.2f} s, {size / 2**20 / spark_s:.0f} MB/s, "
                f"log {after / 2**20:.1f} MB after; {spark_s / clean_s:.1f}x the broker cleaner's time"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
