"""What the transaction coordinator answers, and the seams it is built on."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from loglake.errors import ErrorCode
from loglake.groups.api import TopicPartition


@dataclass(frozen=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class TransactionDescription:
    """DescribeTransactions of one id (error NONE), or why not (TRANSACTIONAL_ID_NOT_FOUND, ...)."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    txn_timeout_ms: int = 0
    txn_start_timestamp: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


class MarkerChannel(Protocol):
    """How COMMIT/ABORT markers reach the partitions' leaders (WriteTxnMarkers; the
    broker itself included). Wired to the real brokers by the process."""

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the marker on every partition; the error of each (NONE when written)."""
        ...


class ProducerIdAllocator(Protocol):
    def __call__(self) -> int:
        """A producer id never handed out before in the cluster."""
        ...
