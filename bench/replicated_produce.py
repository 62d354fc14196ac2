"""Replicated produce throughput: a 3-broker cluster (RF=3) against one broker (RF=1),
the same confluent-kafka producer as bench/kafka_produce.py, in the same run.

Prints records/s for RF=1 (single broker), RF=3 acks=1 and RF=3 acks=all, the ratios
against RF=1 (target for acks=all: >= 0.4; Kafka's published anchor is about 0.5), and
end-to-end p50/p99 latency at 10,000 records/s with acks=all on the cluster.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.kafka_common import create_topic, loglake_cluster
from bench.kafka_produce import PARTITIONS, produce
from bench.latency import measure, percentile
from harness.local_cluster import LocalCluster


def throughput(bootstrap: str, topic: str, records: int, acks: str, replication: int) -> float:
    create_topic(bootstrap, topic, PARTITIONS, replication=replication)
    return records / produce(bootstrap, topic, records, acks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=10)
    args = parser.parse_args()
    with loglake_cluster() as bootstrap:
        single = throughput(bootstrap, "bench-rf1", args.records, "1", 1)
    with tempfile.TemporaryDirectory(prefix="loglake-bench-cluster-") as tmp:
        overrides = {"group.initial.rebalance.delay.ms": "0"}
        with LocalCluster(Path(tmp), 3, overrides) as cluster:
            rf3_acks1 = throughput(cluster.bootstrap, "bench-rf3-acks1", args.records, "1", 3)
            rf3_all = throughput(cluster.bootstrap, "bench-rf3-acksall", args.records, "all", 3)
            create_topic(cluster.bootstrap, "bench-rf3-latency", PARTITIONS, replication=3)
            latencies, sent = measure(cluster.bootstrap, "bench-rf3-latency", PARTITIONS, "all", args.latency_seconds)
    print(f"RF=1 single broker, acks=1 : {single:12,.0f} records/s")
    print(f"RF=3 cluster,       acks=1 : {rf3_acks1:12,.0f} records/s  ratio {rf3_acks1 / single:.2f}")
    print(f"RF=3 cluster,       acks=all: {rf3_all:12,.0f} records/s  ratio {rf3_all / single:.2f} (target >= 0.4)")
    print(
        f"RF=3 acks=all latency at 10,000 records/s: p50 {percentile(latencies, 0.5):.2f} ms, "
        f"p99 {percentile(latencies, 0.99):.2f} ms ({len(latencies)} of {sent} received)"
    )


if __name__ == "__main__":
    main()
