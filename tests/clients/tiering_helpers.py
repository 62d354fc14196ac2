"""What the tiering tests share: a broker whose retention runs often, a topic whose segments
are tiered as soon as they roll, small batches to fill them, and the leader's tiering state."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from confluent_kafka import Producer

DEADLINE_S = 60
# Segments of 2000 bytes, deleted locally as soon as they are tiered; nothing expires.
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "retention.ms": "-1", "segment.bytes": "2000"}


def tiering_overrides(lake: Path) -> dict[str, str]:
    """Broker configs: the lake root, and retention passes and file deletions 100 ms apart."""
    return {
        "rsm.config.lake.root": str(lake),
        "log.retention.check.interval.ms": "100",
        "file.delete.delay.ms": "100",
    }


def produce(broker, topic: str, first: int, count: int, timestamp: int = 0) -> list[tuple[bytes, bytes]]:
    # Batches of at most 1000 bytes: an append must fit in segment.bytes.
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1000})
    records = [(b"k%d" % i, b"value-%05d" % i) for i in range(first, first + count)]
    errors = []
    for key, value in records:
        p.produce(
            topic,
            value,
            key=key,
            partition=0,
            timestamp=timestamp,  # 0: the producer's clock
            on_delivery=lambda err, _: err and errors.append(err),
        )
    assert p.flush(30) == 0 and not errors, errors
    return records


def state(broker, topic: str) -> dict:
    return httpx.get(f"{broker.http_url}/topics/{topic}/partitions/0/tiering", timeout=10).json()


def wait_for_local_deletion(broker, topic: str) -> dict:
    """Retention deletes what is tiered (local.retention.ms=0): the log then starts at
    the first segment not wholly tiered."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        s = state(broker, topic)
        if s["tiered_offset"] > 0 and s["log_start_offset"] > 0:
            return s
        assert time.monotonic() < deadline, f"local segments not deleted: {s}"
        time.sleep(0.05)
