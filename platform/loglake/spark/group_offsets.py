"""A consumer group's committed offsets, read and written by Spark queries.

The queries are not group members: they commit the way Kafka's "simple consumer" does
(generation -1, no member id), so `loglake groups describe` and Kafka's tools show the
query's position and lag like any consumer's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from loglake.errors import ErrorCode
from loglake.spark.protocol_client import (
    RETRIABLE_PARTITION_ERRORS,
    BrokerUnavailable,
    CoordinatorType,
    ProtocolClient,
    TopicPartition,
)

T = TypeVar("T")

_BACKOFF_S = 0.1


class GroupOffsetsError(RuntimeError):
    """The coordinator refused to read or commit the group's offsets."""


def with_coordinator(
    client: ProtocolClient,
    key: str,
    call: Callable[[tuple[str, int]], T | None],
    key_type: CoordinatorType = CoordinatorType.GROUP,
) -> T:
    """Run `call` against the coordinator of a group (or a transactional id) until it
    answers without a retriable error (`call` returns None for those), finding the
    coordinator again each time."""
    kind = "group" if key_type is CoordinatorType.GROUP else "transactional id"
    deadline = time.monotonic() + client.timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            error, address = client.find_coordinator(key, key_type)
            if address is not None:
                result = call(address)
                if result is not None:
                    return result
                last = "coordinator moving or loading"
            elif error not in RETRIABLE_PARTITION_ERRORS:
                raise GroupOffsetsError(f"FindCoordinator for {kind} {key!r} failed: {error.name}")
            else:
                last = error.name
        except BrokerUnavailable as exc:
            last = str(exc)
        time.sleep(_BACKOFF_S)
    raise TimeoutError(f"{kind} {key!r}: no coordinator answered within the request timeout ({last})")


def committed_offsets(
    client: ProtocolClient, group_id: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """The group's committed offsets of `partitions`; partitions without one are left out."""
    return {tp: offset for tp, (offset, _) in committed_with_metadata(client, group_id, partitions).items()}


def committed_with_metadata(
    client: ProtocolClient, group_id: str, partitions: list[TopicPartition] | None
) -> dict[TopicPartition, tuple[int, str]]:
    """The group's committed offsets of `partitions` (None: all it has) with their metadata
    strings; partitions without an offset are left out."""

    def fetch(address: tuple[str, int]) -> dict[TopicPartition, tuple[int, str]] | None:
        error, answers = client.offset_fetch_from(address, group_id, partitions)
        errors = {error} | {e for e, _, _ in answers.values()}
        if errors & RETRIABLE_PARTITION_ERRORS or ErrorCode.UNSTABLE_OFFSET_COMMIT in errors:
            return None
        if errors != {ErrorCode.NONE}:
            raise GroupOffsetsError(f"OffsetFetch for group {group_id!r} failed: {sorted(e.name for e in errors)}")
        return {tp: (offset, metadata) for tp, (_, offset, metadata) in answers.items() if offset >= 0}

    return with_coordinator(client, group_id, fetch)


def commit_offsets(
    client: ProtocolClient,
    group_id: str,
    offsets: dict[TopicPartition, int],
    metadata: Mapping[TopicPartition, str] | None = None,
) -> None:
    """Commit `offsets` (the next offset to read, per partition) to the group, each with its
    `metadata` string (none by default)."""
    if not offsets:
        return

    def commit(address: tuple[str, int]) -> bool | None:
        errors = set(client.offset_commit_to(address, group_id, offsets, metadata).values())
        if errors & RETRIABLE_PARTITION_ERRORS:
            return None
        if errors != {ErrorCode.NONE}:
            raise GroupOffsetsError(f"OffsetCommit for group {group_id!r} failed: {sorted(e.name for e in errors)}")
        return True

    with_coordinator(client, group_id, commit)
