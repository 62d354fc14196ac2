"""Tiering into Delta on a 3-broker cluster (ZooKeeper): after jobs/tier.py every replica
deletes local segments only below the tiered offset, a new leader knows the tiered offset
(it is in ZooKeeper) and the next tier run goes on from the table's end through it, and a
Spark read from earliest across the lake/log seam equals what was produced."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from cluster_helpers import FAST, create_topic, partition_of, serving_get
from harness.local_cluster import LocalCluster
from jobs.tier import parse_args, run
from loglake.spark.lake import tier_app_id

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

TOPIC = "tiered"
TIERED = {
    "remote.storage.enable": "true",
    "local.retention.ms": "0",
    "retention.ms": "-1",
    "segment.bytes": "2000",
    "min.insync.replicas": "2",
}


def produce(cluster: LocalCluster, first: int, count: int) -> list[bytes]:
    # Batches of at most 1000 bytes: an append must fit in segment.bytes.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1000})
    values = [b"value-%05d" % i for i in range(first, first + count)]
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(60) == 0
    return values


def segment_bases(cluster: LocalCluster, broker_id: int) -> list[int]:
    return sorted(int(p.name[:20]) for p in (Path(cluster.brokers[broker_id].log_dir) / f"{TOPIC}-0").glob("*.log"))


def wait_for_local_deletion(cluster: LocalCluster, replicas: list[int], tiered: int) -> dict[int, list[int]]:
    """Until each replica has deleted its segments wholly below `tiered` (local.retention.ms=0);
    then each must still hold `tiered` itself: nothing at or past the tiered offset goes."""
    deadline = time.monotonic() + 60
    while True:
        bases = {b: segment_bases(cluster, b) for b in replicas}
        if all(len(s) < 2 or s[1] > tiered for s in bases.values()):
            assert all(0 < s[0] <= tiered for s in bases.values()), bases
            return bases
        assert time.monotonic() < deadline, f"replicas kept segments below {tiered}: {bases}"
        time.sleep(0.1)


def tiering(cluster: LocalCluster, broker_id: int) -> dict:
    return serving_get(f"{cluster.http_url(broker_id)}/topics/{TOPIC}/partitions/0/tiering")


def read_earliest(spark: object, bootstrap: str) -> list[tuple[int, bytes]]:
    frame = (
        spark.read.format("loglake")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
    )
    return sorted((r.offset, bytes(r.value)) for r in frame.select("offset", "value").collect())


def test_replicas_delete_only_tiered_segments_and_a_new_leader_keeps_the_tiered_offset(
    loglake_spark, tmp_path: Path, zk_connect: str
) -> None:
    lake = tmp_path / "lake"
    overrides = {
        **FAST,
        "rsm.config.lake.root": str(lake),
        "log.retention.check.interval.ms": "100",
        "file.delete.delay.ms": "100",
    }
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        create_topic(cluster, TOPIC, 1, 3, TIERED)
        produced = produce(cluster, 0, 400)
        run(loglake_spark, parse_args(["--bootstrap-servers", cluster.bootstrap, "--topics", TOPIC]))

        table = DeltaTable(str(lake / TOPIC))
        tiered = table.transaction_version(tier_app_id(TOPIC, 0))
        assert tiered and sorted(table.to_pyarrow_table(columns=["offset"])["offset"].to_pylist()) == list(
            range(tiered)
        )
        wait_for_local_deletion(cluster, list(cluster.brokers), tiered)

        old_leader = partition_of(cluster.status(), TOPIC)["leader"]
        cluster.kill(old_leader)
        status = cluster.wait_for(
            lambda s: partition_of(s, TOPIC)["leader"] not in (-1, old_leader), exclude=(old_leader,)
        )
        new_leader = partition_of(status, TOPIC)["leader"]
        assert tiering(cluster, new_leader)["tiered_offset"] == tiered  # from ZooKeeper

        produced += produce(cluster, 400, 300)
        live = [b for b in cluster.brokers if b != old_leader]
        bootstrap = ",".join(cluster.brokers[b].bootstrap for b in live)
        run(loglake_spark, parse_args(["--bootstrap-servers", bootstrap, "--topics", TOPIC]))
        table = DeltaTable(str(lake / TOPIC))
        retiered = table.transaction_version(tier_app_id(TOPIC, 0))
        assert retiered > tiered
        assert sorted(table.to_pyarrow_table(columns=["offset"])["offset"].to_pylist()) == list(range(retiered))
        assert tiering(cluster, new_leader)["tiered_offset"] == retiered
        wait_for_local_deletion(cluster, live, retiered)

        assert read_earliest(loglake_spark, bootstrap) == list(enumerate(produced))
