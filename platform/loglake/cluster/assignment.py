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


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def numbered_assignment(entries: list[tuple[int, list[int]]]) -> dict[int, tuple[int, ...]]:
    """A topic's manual assignment given as (partition index, replicas) pairs; the indexes
    must be 0..n-1, each once (as Kafka requires)."""
    indexes = sorted(p for p, _ in entries)
    if indexes != list(range(len(entries))):
        raise _invalid(f"partitions should be a consecutive 0-based integer sequence, not {indexes}")
    return {p: tuple(replicas) for p, replicas in entries}


def validate_manual_assignment(
    assignment: dict[int, tuple[int, ...]], brokers: set[int], replication_factor: int | None = None
) -> None:
    """Kafka's checks of replica lists an admin chose: not empty, no broker twice, only
    registered brokers, and one replica count for all (`replication_factor`, if the topic
    has one already)."""
    for p, replicas in sorted(assignment.items()):
        if not replicas:
            raise _invalid(f"Cannot have replication factor of 0 for partition id {p}.")
        if len(set(replicas)) != len(replicas):
            raise _invalid(
                f"Duplicate brokers not allowed in replica assignment: {list(replicas)} for partition id {p}."
            )
        unknown = sorted(set(replicas) - brokers)
        if unknown:
            raise _invalid(f"Unknown broker(s) in replica assignment: {unknown} (registered: {sorted(brokers)}).")
    counts = {p: len(replicas) for p, replicas in assignment.items()}
    expected = replication_factor if replication_factor is not None else next(iter(counts.values()), 0)
    odd = {p: n for p, n in sorted(counts.items()) if n != expected}
    if odd:
        raise _invalid(
            f"All partitions should have the same number of replicas ({expected}); "
            f"partitions {list(odd)} have {list(odd.values())}."
        )
