"""Replica assignment: partition i leads on broker i % n, its j-th replica on (i + j) % n."""

from __future__ import annotations

from loglake.errors import ErrorCode, KafkaError


def assign_replicas(
    brokers: list[int],
    num_partitions: int,
    replication_factor: int,
    first_partition: int = 0,
    start_index: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Kafka's round-robin rule over the sorted broker ids, without rack awareness.

    `start_index` shifts which broker leads partition 0 (Kafka picks it at random to
    spread leaders of many topics); `first_partition` lets added partitions continue the
    pattern of the existing ones.
    """
    if replication_factor < 1:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be at least 1")
    ordered = sorted(brokers)
    if replication_factor > len(ordered):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the {len(ordered)} available brokers",
        )
    n = len(ordered)
    return {
        p: tuple(ordered[(p + start_index + j) % n] for j in range(replication_factor))
        for p in range(first_partition, first_partition + num_partitions)
    }
