"""A streaming query's offsets: the per-partition JSON map Spark keeps in the checkpoint
({"topic": {"0": 42}}, the shape of Spark's Kafka source), and how far one trigger reads."""

from __future__ import annotations

import math

from loglake.spark.protocol_client import TopicPartition

PartitionOffsets = dict[TopicPartition, int]


def to_json_map(offsets: PartitionOffsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json_map(offsets: dict[str, dict[str, int]]) -> PartitionOffsets:
    return {TopicPartition(topic, int(p)): o for topic, parts in offsets.items() for p, o in parts.items()}


def rate_limit(begin: PartitionOffsets, latest: PartitionOffsets, max_records: int) -> PartitionOffsets:
    """Spark's Kafka source rule for maxOffsetsPerTrigger: each partition gets its share of
    the limit in proportion to its backlog (at least one record when it has any)."""
    backlog = {tp: latest[tp] - begin[tp] for tp in latest if latest[tp] > begin[tp]}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    out = dict(latest)
    for tp, size in backlog.items():
        share = max_records * size / total
        out[tp] = min(latest[tp], begin[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return out
