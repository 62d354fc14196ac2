"""Replica assignment as Kafka's AdminUtils: partition p leads on the broker at
(p + start) in the sorted broker list, its further replicas follow at a shift that grows by
one every full round of brokers; the start and the shift are drawn at random for each topic
(so leaders of many topics spread over the brokers); rack-aware (Kafka's rule too) when the
brokers have racks."""

from __future__ import annotations

import random
from collections.abc import Mapping

from loglake.errors import ErrorCode, KafkaError


def assign_replicas(
    brokers: list[int],
    num_partitions: int,
    replication_factor: int,
    first_partition: int = 0,
    start_index: int | None = None,
    racks: Mapping[int, str | None] | None = None,
    replica_shift: int | None = None,
) -> dict[int, tuple[int, ...]]:
    """Kafka's rule over the sorted broker ids; rack-aware (Kafka's rule too) when every
    broker has a rack in `racks` and there are several.

    `start_index` picks which broker leads partition `first_partition`, `replica_shift` how
    far its followers sit: both at random unless given (Kafka: a fixed start index fixes the
    shift too), so that topics do not all lead on the same broker. `first_partition` lets
    added partitions continue the pattern of the existing ones.
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
    if start_index is None:
        start_index = random.randrange(n)
        shift = random.randrange(n) if replica_shift is None else replica_shift
    else:
        shift = start_index if replica_shift is None else replica_shift
    rack_of = {b: rack for b in ordered if (rack := (racks or {}).get(b))}
    if len(rack_of) == len(ordered) and len(set(rack_of.values())) > 1:
        return _assign_rack_aware(rack_of, num_partitions, replication_factor, first_partition, start_index, shift)
    assignment = {}
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        followers = (ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1))
        assignment[p] = (ordered[first], *followers)
    return assignment


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's AdminUtils.replicaIndex: where the j-th follower of a leader at `first` sits."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_alternated(rack_of: Mapping[int, str]) -> list[int]:
    """The brokers taking one of each rack in turn (racks and brokers sorted), so that
    consecutive brokers sit in different racks."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(rack_of.items()):
        by_rack.setdefault(rack, []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns))) for column in columns if i < len(column)]


def _assign_rack_aware(
    rack_of: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    first_partition: int,
    start_index: int,
    shift: int,
) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-aware assignment: leaders round-robin over the rack-alternated broker
    list; each further replica the next broker (shifted per round of partitions) whose rack
    holds no replica yet, unless every rack already does."""
    arranged = _rack_alternated(rack_of)
    n, num_racks = len(arranged), len(set(rack_of.values()))
    assignment = {}
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [arranged[first]]
        racks_used = {rack_of[arranged[first]]}
        k = 0
        while len(replicas) < replication_factor:
            broker = arranged[_replica_index(first, shift * num_racks, k, n)]
            k += 1
            if broker in replicas:
                continue
            if rack_of[broker] not in racks_used or len(racks_used) == num_racks:
                replicas.append(broker)
                racks_used.add(rack_of[broker])
        assignment[p] = tuple(replicas)
    return assignment


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
