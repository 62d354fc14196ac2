"""Event-shaped records for the lake benchmarks: unique ~100-byte JSON values (a unique id, one
of 100k users, a timestamp, an amount), 12-byte keys, spread over the partitions round-robin;
and peak-RSS sampling of this process and its Python workers."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import KafkaError, Producer

USERS = 100_000
BASE_TS_MS = 1_790_000_000_000


def event(n: int) -> tuple[bytes, bytes]:
    """Record n's key (12 bytes) and value (~100 bytes of JSON, unique by its id)."""
    value = b'{"event_id":"evt-%016x","user":"user-%06d","ts":%d,"amount":%d.%02d,"kind":"purchase"}' % (
        n * 2654435761 % (1 << 64),
        n * 7919 % USERS,
        BASE_TS_MS + n,
        n % 10_000,
        n % 100,
    )
    return b"k-%010d" % n, value


def produce_events(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    """Produce `records` events (acks=1, large batches); returns the seconds it took. A record
    the broker refuses is an error (a topic whose segment.bytes is below a producer batch
    refuses them all with RECORD_LIST_TOO_LARGE)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    failed: Counter[str] = Counter()

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed[error.name()] += 1

    started = time.perf_counter()
    for n in range(records):
        key, value = event(n)
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=n % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    if failed:
        raise RuntimeError(f"{topic}: the broker refused records: {dict(failed)}")
    return time.perf_counter() - started


def rss_bytes(pid: int) -> int:
    """A process's resident set size now (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _python_workers() -> list[int]:
    """Python processes whose ancestors include a java descendant of this process (Spark's workers)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark" in command and (b"daemon" in command or b"worker" in command):
            out.append(int(entry.name))
    return out


@contextmanager
def peak_rss(every_s: float = 0.1) -> Iterator[dict[str, int]]:
    """Sample the RSS of this process (`driver`) and of each Spark Python worker until the
    block ends; the dict holds the peaks (`worker`: the largest single worker)."""
    peaks = {"driver": 0, "worker": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peaks["driver"] = max(peaks["driver"], rss_bytes(os.getpid()))
            for pid in _python_workers():
                peaks["worker"] = max(peaks["worker"], rss_bytes(pid))
            stop.wait(every_s)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        stop.set()
        thread.join()
