"""End-to-end latency, produce -> consume, at a steady 10,000 records/s (acks=1 and all).

A confluent-kafka producer (linger.ms=5, its default) sends 100-byte records in 1 ms ticks, each carrying its send
time; a consumer (assigned partitions, reading from the end) records receive - send.
Prints p50/p99/max for loglake and for librdkafka's mock cluster in the same run.
"""

from __future__ import annotations

import argparse
import struct
import threading
import time

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.kafka_common import create_topic, loglake_cluster, mock_cluster

PARTITIONS = 6
RATE = 10_000
_SENT = struct.Struct(">d")


def measure(
    bootstrap: str, topic: str, partitions: int, acks: str, seconds: float, rate: int = RATE, linger_ms: int = 5
) -> tuple[list[float], int]:
    """Latencies (ms) of the records received, and how many were sent, during `seconds`
    at `rate` records/s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    latencies: list[float] = []
    stop = threading.Event()

    def receive() -> None:
        # poll() hands over each record as soon as it arrives; consume(n, timeout) would
        # hold records back until n of them are there.
        while not stop.is_set():
            msg = consumer.poll(0.1)
            value = None if msg is None or msg.error() is not None else msg.value()
            if value is not None and len(value) == 100:
                latencies.append((time.perf_counter() - _SENT.unpack_from(value)[0]) * 1000)

    receiver = threading.Thread(target=receive)
    receiver.start()
    time.sleep(2)  # let the consumer settle at the end of the log
    # linger.ms=5 is librdkafka's default: a few ms of batching, as clients run in production.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms})
    padding = bytes(100 - _SENT.size)
    per_tick = rate // 1000
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            producer.produce(topic, _SENT.pack(time.perf_counter()) + padding)
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, start + (sent + per_tick) / rate - time.perf_counter()))
    producer.flush(30)
    time.sleep(1)
    stop.set()
    receiver.join()
    consumer.close()
    return latencies, sent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    rows = []
    for name, cluster, mock in (("mock", mock_cluster, True), ("loglake", loglake_cluster, False)):
        with cluster() as bootstrap:
            for acks in ("1", "all"):
                topic = f"bench-latency-{acks}"
                partitions = create_topic(bootstrap, topic, PARTITIONS, mock=mock)
                lat, sent = measure(bootstrap, topic, partitions, acks, args.seconds)
                rows.append((name, acks, percentile(lat, 0.5), percentile(lat, 0.99), max(lat), len(lat), sent))
    print(f"{'cluster':8} {'acks':4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'received':>9} {'sent':>8}")
    for name, acks, p50, p99, worst, received, sent in rows:
        print(f"{name:8} {acks:4} {p50:8.2f} {p99:8.2f} {worst:8.2f} {received:9} {sent:8}")


if __name__ == "__main__":
    main()
