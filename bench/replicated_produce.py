"""Replicated produce throughput: a 3-broker cluster (RF=3) against one broker (RF=1),
the same confluent-kafka producer as bench/kafka_produce.py, in the same run.

Prints records/s for RF=1 (single broker), RF=3 acks=1 and RF=3 acks=all, the ratios
against RF=1 (target for acks=all: >= 0.4; Kafka's published anchor is about 0.5), and
end-to-end p50/p99 latency on the cluster with acks=all: at 10,000 records/s with
linger.ms=5 (target p99 <= 10 ms), and at 5,000 records/s with linger.ms=0, a request per
record or two (target: keeps up, every record received, p99 <= 20 ms), with the CPU the
three brokers used per record received (less at the mercy of the machine's load than
latency). `--latency-only` skips the throughput runs. `--linger0-rates 2000,3000,4000,5000`
runs the linger.ms=0 case at each rate: how p99 grows as the brokers' CPU nears the
machine's cores.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.kafka_common import create_topic, loglake_cluster
from bench.kafka_produce import PARTITIONS, produce
from bench.latency import measure, percentile
from bench.process_cpu import process_cpu_seconds
from harness.local_cluster import LocalCluster


def throughput(bootstrap: str, topic: str, records: int, acks: str, replication: int) -> float:
    create_topic(bootstrap, topic, PARTITIONS, replication=replication)
    return records / produce(bootstrap, topic, records, acks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=10)
    parser.add_argument("--latency-only", action="store_true")
    parser.add_argument("--linger0-rates", default="5000", help="records/s of the linger.ms=0 runs, comma-separated")
    args = parser.parse_args()
    runs = [(10_000, 5)] + [(int(rate), 0) for rate in args.linger0_rates.split(",")]
    if not args.latency_only:
        with loglake_cluster() as bootstrap:
            single = throughput(bootstrap, "bench-rf1", args.records, "1", 1)
    latency_runs = {}
    with tempfile.TemporaryDirectory(prefix="loglake-bench-cluster-") as tmp:
        overrides = {"group.initial.rebalance.delay.ms": "0"}
        with LocalCluster(Path(tmp), 3, overrides) as cluster:
            if not args.latency_only:
                rf3_acks1 = throughput(cluster.bootstrap, "bench-rf3-acks1", args.records, "1", 3)
                rf3_all = throughput(cluster.bootstrap, "bench-rf3-acksall", args.records, "all", 3)
            for rate, linger_ms in runs:
                topic = f"bench-rf3-latency-{rate}-{linger_ms}"
                create_topic(cluster.bootstrap, topic, PARTITIONS, replication=3)
                cpu = brokers_cpu_seconds(cluster)
                latencies, sent = measure(
                    cluster.bootstrap, topic, PARTITIONS, "all", args.latency_seconds, rate, linger_ms
                )
                latency_runs[(rate, linger_ms)] = latencies, sent, brokers_cpu_seconds(cluster) - cpu
    if not args.latency_only:
        print(f"RF=1 single broker, acks=1 : {single:12,.0f} records/s")
        print(f"RF=3 cluster,       acks=1 : {rf3_acks1:12,.0f} records/s  ratio {rf3_acks1 / single:.2f}")
        print(f"RF=3 cluster,       acks=all: {rf3_all:12,.0f} records/s  ratio {rf3_all / single:.2f} (target >= 0.4)")
    for (rate, linger_ms), (latencies, sent, cpu) in latency_runs.items():
        print(
            f"RF=3 acks=all latency at {rate:,} records/s, linger.ms={linger_ms}: "
            f"p50 {percentile(latencies, 0.5):.2f} ms, p99 {percentile(latencies, 0.99):.2f} ms, "
            f"max {max(latencies):.2f} ms ({len(latencies)} of {sent} received); "
            f"the 3 brokers' CPU {cpu:.2f} s ({cpu / args.latency_seconds:.2f} cores), "
            f"{cpu / max(len(latencies), 1) * 1e6:.0f} µs per record received"
        )


def brokers_cpu_seconds(cluster: LocalCluster) -> float:
    """CPU seconds the cluster's broker processes have used (ZooKeeper's not counted)."""
    return sum(process_cpu_seconds(b.proc.pid) for b in cluster.brokers.values() if b.proc is not None)


if __name__ == "__main__":
    main()
