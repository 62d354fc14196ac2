"""Client quotas with unmodified clients: a producer and a consumer over their byte-rate
quota are throttled to within 20 % of it (throttle_time_ms and a muted connection, as
Kafka), clients without a quota are not."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from client_helpers import create_topic

pytestmark = pytest.mark.slow

QUOTA = 500_000  # bytes/s
VALUE = bytes(1000)


def loglake(broker, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "loglake.cli", *args, "--bootstrap-http", broker.http_url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def produce_rate(bootstrap: str, topic: str, client_id: str, seconds: float) -> float:
    """Bytes/s acknowledged for a producer pushing as hard as it can, after a warm-up second."""
    producer = Producer(
        # 64 KB requests: a measuring window sees the rate, not the edges of a few big batches.
        {"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 65536}
    )
    acked = [0]

    def delivered(err, msg) -> None:
        if err is None:
            acked[0] += len(msg.value())

    done = threading.Event()

    def push() -> None:
        while not done.is_set():
            try:
                producer.produce(topic, VALUE, on_delivery=delivered)
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)

    pusher = threading.Thread(target=push, daemon=True)
    pusher.start()
    time.sleep(1.0)
    start, t0 = acked[0], time.monotonic()
    time.sleep(seconds)
    rate = (acked[0] - start) / (time.monotonic() - t0)
    done.set()
    pusher.join(10)
    producer.purge()
    producer.flush(10)
    return rate


def consume_rate(bootstrap: str, topic: str, client_id: str, seconds: float) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": client_id,
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 65536,
            "fetch.max.bytes": 65536,
            "message.max.bytes": 65536,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    received = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # warm-up second
        consumer.consume(1000, 0.1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        received += sum(len(m.value() or b"") for m in consumer.consume(1000, 0.1) if m.error() is None)
    rate = received / (time.monotonic() - t0)
    consumer.close()
    return rate


def test_producers_and_consumers_over_their_quota_are_throttled_to_it(broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    for entity, config in (("--client-id", "producer_byte_rate"), ("--client-id", "consumer_byte_rate")):
        altered = loglake(broker, "quotas", "alter", entity, "throttled", "--add-config", f"{config}={QUOTA}")
        assert altered.returncode == 0, altered.stderr
    described = loglake(broker, "quotas", "describe").stdout
    assert f"clients/throttled are consumer_byte_rate={QUOTA}, producer_byte_rate={QUOTA}" in described

    throttled = produce_rate(broker.bootstrap, topic, "throttled", 5.0)
    free = produce_rate(broker.bootstrap, topic, "free", 2.0)
    assert 0.8 * QUOTA <= throttled <= 1.2 * QUOTA, f"{throttled:,.0f} B/s for a {QUOTA:,} B/s quota"
    assert free > 2 * QUOTA, f"an unthrottled producer made only {free:,.0f} B/s"

    slow = consume_rate(broker.bootstrap, topic, "throttled", 5.0)
    assert 0.8 * QUOTA <= slow <= 1.2 * QUOTA, f"{slow:,.0f} B/s read for a {QUOTA:,} B/s quota"
    assert consume_rate(broker.bootstrap, topic, "reader", 1.0) > 2 * QUOTA

    # Bad input: not a quota, not a number; nothing changes.
    for bad in ("producer_byte_rate=fast", "retention.ms=5"):
        refused = loglake(broker, "quotas", "alter", "--client-id", "throttled", "--add-config", bad)
        assert refused.returncode == 1, refused.stdout
    assert loglake(broker, "quotas", "describe").stdout == described
