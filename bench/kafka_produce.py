"""confluent-kafka producer throughput: loglake vs librdkafka's mock cluster, same run.

100-byte values, linger.ms=5, large batches, N records (default 2,000,000) to a
6-partition topic (the mock cluster's auto-created topics have 4), for acks=1 and acks=all.
Prints records/s and MB/s for both and the
ratio loglake / mock (target >= 0.8: the broker must not be the bottleneck).
"""

from __future__ import annotations

import argparse
import os
import time

from confluent_kafka import KafkaException, Producer

from bench.kafka_common import create_topic, loglake_cluster, mock_cluster

VALUE_BYTES = 100
PARTITIONS = 6


def produce(bootstrap: str, topic: str, records: int, acks: str, **config: object) -> float:
    """Seconds to produce and have acknowledged `records` records (`config`: producer
    settings over the large-batch ones)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
            **config,
        }
    )
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    value = os.urandom(VALUE_BYTES)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic, value, key=b"%d" % (i % 1000), on_delivery=on_delivery if i % 1000 == 0 else None
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records still in flight after 120 s")
    elapsed = time.perf_counter() - start
    if errors:
        raise KafkaException(errors[0])
    return elapsed


def run(bootstrap: str, records: int, acks: str, mock: bool) -> float:
    topic = f"bench-produce-acks-{acks}"
    create_topic(bootstrap, topic, PARTITIONS, mock=mock)
    return records / produce(bootstrap, topic, records, acks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    args = parser.parse_args()
    results = {}
    with mock_cluster() as bootstrap:
        for acks in ("1", "all"):
            results[("mock", acks)] = run(bootstrap, args.records, acks, mock=True)
    with loglake_cluster() as bootstrap:
        for acks in ("1", "all"):
            results[("loglake", acks)] = run(bootstrap, args.records, acks, mock=False)
    mb = VALUE_BYTES / 1e6
    for acks in ("1", "all"):
        mock, ours = results[("mock", acks)], results[("loglake", acks)]
        print(f"acks={acks:3}  mock cluster: {mock:12,.0f} records/s {mock * mb:7.1f} MB/s")
        print(f"acks={acks:3}  loglake     : {ours:12,.0f} records/s {ours * mb:7.1f} MB/s")
        print(f"acks={acks:3}  ratio loglake/mock: {ours / mock:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
