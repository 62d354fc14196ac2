"""confluent-kafka producer throughput: loglake vs librdkafka's mock cluster, same run.

Large batches (default): 100-byte values, linger.ms=5, large batches, N records (default
2,000,000) to a 6-partition topic (the mock cluster's auto-created topics have 4), for
acks=1 and acks=all. Prints records/s and MB/s for both and the ratio loglake / mock
(target >= 0.8: the broker must not be the bottleneck).

`--small`: small requests, what latency-sensitive producers send: linger.ms=0,
batch.num.messages=1 (one 100-byte record per Produce request), acks=1. Prints requests/s
for both, the ratio (target >= 0.5), and the CPU seconds of each process (the mock cluster
runs inside the client process, so its CPU is the client's).
"""

from __future__ import annotations

import argparse
import os
import time

from confluent_kafka import KafkaException, Producer

from bench.kafka_common import create_topic, loglake_broker, loglake_cluster, mock_cluster
from bench.process_cpu import process_cpu_seconds

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


# One record per Produce request, sent as soon as it is produced.
SMALL_REQUESTS = {"linger.ms": 0, "batch.num.messages": 1}


def run_small(bootstrap: str, records: int, mock: bool, broker_pid: int | None) -> tuple[float, float, float]:
    """Requests/s of the small-request mode, and the CPU seconds the client process and
    the broker process (0 for the mock, which is inside the client) used meanwhile."""
    topic = "bench-produce-small"
    create_topic(bootstrap, topic, PARTITIONS, mock=mock)
    produce(bootstrap, topic, 1000, "1", **SMALL_REQUESTS)  # connections up, code paths warm
    client_cpu, broker_cpu = time.process_time(), 0.0 if broker_pid is None else process_cpu_seconds(broker_pid)
    rate = records / produce(bootstrap, topic, records, "1", **SMALL_REQUESTS)
    client_cpu = time.process_time() - client_cpu
    if broker_pid is not None:
        broker_cpu = process_cpu_seconds(broker_pid) - broker_cpu
    return rate, client_cpu, broker_cpu


def main_small(records: int, rounds: int) -> None:
    rows = []
    for _ in range(rounds):
        # Alternate the sides so load from other work on the machine falls on both.
        with mock_cluster() as bootstrap:
            mock = run_small(bootstrap, records, True, None)
        with loglake_broker() as broker:
            assert broker.proc is not None
            ours = run_small(broker.bootstrap, records, False, broker.proc.pid)
        rows.append((mock, ours))
    print(f"small requests: linger.ms=0, batch.num.messages=1, acks=1, {VALUE_BYTES}-byte records, {records:,} each")
    for (mock_rate, m_client, _), (our_rate, o_client, o_broker) in rows:
        print(
            f"  mock {mock_rate:9,.0f} requests/s (client+mock CPU {m_client:5.2f} s)   "
            f"loglake {our_rate:9,.0f} requests/s (client CPU {o_client:5.2f} s, broker CPU {o_broker:5.2f} s, "
            f"{o_broker / records * 1e6:5.1f} µs/request)   ratio {our_rate / mock_rate:.2f} (target >= 0.5)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=None, help="default 2,000,000 (large), 200,000 (--small)")
    parser.add_argument("--small", action="store_true", help="one record per request (linger.ms=0)")
    parser.add_argument("--rounds", type=int, default=2, help="--small: alternating rounds")
    args = parser.parse_args()
    if args.small:
        main_small(args.records or 200_000, args.rounds)
        return
    records = args.records or 2_000_000
    results = {}
    with mock_cluster() as bootstrap:
        for acks in ("1", "all"):
            results[("mock", acks)] = run(bootstrap, records, acks, mock=True)
    with loglake_cluster() as bootstrap:
        for acks in ("1", "all"):
            results[("loglake", acks)] = run(bootstrap, records, acks, mock=False)
    mb = VALUE_BYTES / 1e6
    for acks in ("1", "all"):
        mock, ours = results[("mock", acks)], results[("loglake", acks)]
        print(f"acks={acks:3}  mock cluster: {mock:12,.0f} records/s {mock * mb:7.1f} MB/s")
        print(f"acks={acks:3}  loglake     : {ours:12,.0f} records/s {ours * mb:7.1f} MB/s")
        print(f"acks={acks:3}  ratio loglake/mock: {ours / mock:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
