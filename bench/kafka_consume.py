"""confluent-kafka consumer throughput: loglake vs librdkafka's mock cluster, same run.

Fills a topic with N records of 100 bytes, then times one consumer reading them all from
the beginning (assigned partitions, no group), best of several rounds. Prints records/s,
MB/s and the ratio loglake / mock.

N defaults to 150,000, not the produce benchmark's 2,000,000: the mock cluster keeps only
about 5 MB per partition and silently drops older records, so a larger N could not be
read back from it.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.kafka_common import create_topic, loglake_cluster, mock_cluster
from bench.kafka_produce import PARTITIONS, VALUE_BYTES, produce


def consume(bootstrap: str, topic: str, partitions: int, records: int, **config: object) -> float:
    """Seconds for one consumer to read `records` records from the start of `topic`
    (`config`: consumer settings over these)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-consume",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 262_144,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 300
    while seen < records and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None and msg.value():
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if seen < records:
        raise RuntimeError(f"read {seen} of {records} records")
    return elapsed


def run(bootstrap: str, records: int, rounds: int, mock: bool) -> float:
    topic = "bench-consume"
    partitions = create_topic(bootstrap, topic, PARTITIONS, mock=mock)
    produce(bootstrap, topic, records, "1")
    return records / min(consume(bootstrap, topic, partitions, records) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with mock_cluster() as bootstrap:
        mock = run(bootstrap, args.records, args.rounds, mock=True)
    with loglake_cluster() as bootstrap:
        ours = run(bootstrap, args.records, args.rounds, mock=False)
    mb = VALUE_BYTES / 1e6
    print(f"mock cluster: {mock:12,.0f} records/s {mock * mb:7.1f} MB/s")
    print(f"loglake     : {ours:12,.0f} records/s {ours * mb:7.1f} MB/s")
    print(f"ratio loglake/mock: {ours / mock:.2f}")


if __name__ == "__main__":
    main()
