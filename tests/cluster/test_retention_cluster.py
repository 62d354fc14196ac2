"""Retention on every replica of a 3-broker cluster: the leader and both followers delete
the expired segments and end with the same log start offset, checkpointed in each
broker's `log-start-offset-checkpoint`; a consumer reading from the start gets the rest."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cluster_helpers import FAST, create_topic, read_all
from harness.local_cluster import LocalCluster
from loglake.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT, OffsetCheckpointFile

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HOUR_MS = 3_600_000


def replica_state(cluster: LocalCluster, broker_id: int, topic: str) -> tuple[int | None, list[int]]:
    """(checkpointed log start offset, base offsets of the live segment files) of a replica."""
    logs = Path(cluster.brokers[broker_id].log_dir)
    checkpoint = OffsetCheckpointFile(logs / LOG_START_OFFSET_CHECKPOINT).read().get((topic, 0))
    return checkpoint, sorted(int(p.name[:20]) for p in (logs / f"{topic}-0").glob("*.log"))


def test_every_replica_ends_with_the_same_log_start_offset(tmp_path: Path, zk_connect: str) -> None:
    overrides = {**FAST, "log.retention.check.interval.ms": "100", "file.delete.delay.ms": "100"}
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        topic = "expiring"
        # segment.ms of an hour: the first record two hours newer than the old ones rolls
        # the segment on every replica, so exactly the 60 old records expire everywhere.
        config = {"retention.ms": str(HOUR_MS), "segment.ms": str(HOUR_MS), "segment.bytes": "400"}
        create_topic(cluster, topic, 1, 3, config)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
        old_ts = int(time.time() * 1000) - 2 * HOUR_MS
        for i in range(60):
            producer.produce(topic, b"old-%d" % i, partition=0, timestamp=old_ts)
            producer.flush(30)
        new = [b"new-%d" % i for i in range(20)]
        for value in new:
            producer.produce(topic, value, partition=0)
        assert producer.flush(30) == 0

        deadline = time.monotonic() + 60
        states = {}
        while time.monotonic() < deadline:
            states = {b: replica_state(cluster, b, topic) for b in cluster.brokers}
            if all(checkpoint == 60 and segments[:1] == [60] for checkpoint, segments in states.values()):
                break
            time.sleep(0.1)
        assert all(checkpoint == 60 and segments[:1] == [60] for checkpoint, segments in states.values()), states
        assert read_all(cluster.bootstrap, topic, 1, len(new))[0] == new
