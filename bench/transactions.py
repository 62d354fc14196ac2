"""Transactions on one loglake broker, two ratios measured in the same run.

Produce: confluent-kafka, 100-byte records, a transaction committed every 100 ms, records/s
against the same producer idempotent without transactions, producing without pause and
flushing at the end (target >= 0.7).
Consume: one consumer reading the committed topic from the start with
isolation.level=read_committed, against read_uncommitted on the same topic (target >= 0.9).
Best of the rounds of each side, sides alternated so machine noise hits both.

    python -m bench.transactions [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.kafka_common import create_topic, loglake_broker

PARTITIONS = 6
VALUE = b"v" * 100
COMMIT_EVERY_S = 0.1
PRODUCER_SETTINGS = {"linger.ms": 5, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000}


def produce_for(bootstrap: str, topic: str, seconds: float, transactional_id: str | None) -> int:
    """Records produced (and acknowledged, and committed if transactional) in `seconds`."""
    settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_SETTINGS}
    if transactional_id is not None:
        settings["transactional.id"] = transactional_id
    producer = Producer(settings)
    if transactional_id is not None:
        producer.init_transactions(30)
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        if transactional_id is not None:
            producer.begin_transaction()
        window_end = time.perf_counter() + COMMIT_EVERY_S
        while time.perf_counter() < window_end:
            for _ in range(1000):
                try:
                    producer.produce(topic, VALUE, partition=sent % PARTITIONS)
                except BufferError:
                    producer.poll(0.01)
                    continue
                sent += 1
            producer.poll(0)
        if transactional_id is not None:
            producer.commit_transaction(30)  # flushes, then ends the transaction
    producer.flush(30)  # the baseline streams on; its records count once acknowledged
    elapsed = time.perf_counter() - start
    return int(sent / elapsed)


def consume_all(bootstrap: str, topic: str, isolation: str) -> float:
    """Records/s of one consumer reading the whole topic from the start."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-txn-{isolation}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    at_end: set[int] = set()
    start = time.perf_counter()
    while len(at_end) < PARTITIONS:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                seen += 1
            else:
                partition = msg.partition()
                assert partition is not None  # an end-of-partition event names its partition
                at_end.add(partition)
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    overrides = {"transaction.state.log.num.partitions": "4"}
    with loglake_broker(overrides) as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "bench-idempotent", PARTITIONS)
        create_topic(bootstrap, "bench-transactional", PARTITIONS)
        plain, txn = [], []
        for round_number in range(args.rounds):
            plain.append(produce_for(bootstrap, "bench-idempotent", args.seconds, None))
            txn.append(produce_for(bootstrap, "bench-transactional", args.seconds, f"bench-{round_number}"))
            print(f"round {round_number}: idempotent {plain[-1]:,} records/s, transactional {txn[-1]:,} records/s")
        print(
            f"produce: transactional {max(txn):,} vs idempotent {max(plain):,} records/s, "
            f"ratio {max(txn) / max(plain):.2f} (target 0.7)"
        )
        committed, uncommitted = [], []
        for round_number in range(args.rounds):
            uncommitted.append(consume_all(bootstrap, "bench-transactional", "read_uncommitted"))
            committed.append(consume_all(bootstrap, "bench-transactional", "read_committed"))
            print(
                f"round {round_number}: read_uncommitted {uncommitted[-1]:,.0f} records/s, "
                f"read_committed {committed[-1]:,.0f} records/s"
            )
        print(
            f"consume: read_committed {max(committed):,.0f} vs read_uncommitted {max(uncommitted):,.0f} records/s, "
            f"ratio {max(committed) / max(uncommitted):.2f} (target 0.9)"
        )


if __name__ == "__main__":
    main()
