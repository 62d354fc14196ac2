"""Helpers of the exactly-once sink tests: a topic's values at each isolation level, the
last stable offsets, and the progress the sink's tasks recorded in their groups."""

from __future__ import annotations

import time

from source_helpers import with_options

from harness.process import BrokerProcess
from loglake.protocol import IsolationLevel
from loglake.spark.group_offsets import committed_with_metadata
from loglake.spark.offset_ranges import list_offsets
from loglake.spark.protocol_client import LATEST_TIMESTAMP, ProtocolClient, TopicPartition
from loglake.spark.transactional_producer import SinkProgress


def topic_values(spark, broker: BrokerProcess, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Every value of the topic as the loglake source reads it at `isolation`, sorted."""
    frame = with_options(spark.read, broker, {"subscribe": topic, "kafka.isolation.level": isolation}).load()
    return sorted(bytes(r.value) for r in frame.select("value").collect())


def latest_offsets(broker: BrokerProcess, topic: str, partitions: int, level: IsolationLevel) -> list[int]:
    with ProtocolClient(broker.bootstrap, isolation_level=level) as client:
        client.metadata([topic])
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        found = list_offsets(client, dict.fromkeys(tps, LATEST_TIMESTAMP))
        return [found[tp] for tp in tps]


def wait_until_stable(broker: BrokerProcess, topic: str, partitions: int, timeout: float = 30.0) -> list[int]:
    """Wait until no transaction is open on the topic (every last stable offset is its high
    watermark: the markers of ended transactions are written asynchronously); the offsets."""
    deadline = time.monotonic() + timeout
    while True:
        stable = latest_offsets(broker, topic, partitions, IsolationLevel.READ_COMMITTED)
        high = latest_offsets(broker, topic, partitions, IsolationLevel.READ_UNCOMMITTED)
        if stable == high:
            return high
        assert time.monotonic() < deadline, f"{topic}: last stable offsets {stable} stay below {high}"
        time.sleep(0.1)


def sink_progress(broker: BrokerProcess, group_id: str) -> tuple[SinkProgress | None, dict[TopicPartition, int]]:
    """The latest micro-batch a sink task's group records, and its committed offsets."""
    with ProtocolClient(broker.bootstrap) as client:
        committed = committed_with_metadata(client, group_id, None)
    progress = [SinkProgress.decode(metadata) for _, metadata in committed.values()]
    latest = max(progress, key=lambda p: p.batch_id, default=None)
    return latest, {tp: offset for tp, (offset, _) in committed.items()}
