"""The broker's compacted internal topics and what their coordinators share.

`__consumer_offsets` (the group coordinator's state) and `__transaction_state` (the
transaction coordinator's) are both compacted topics that only the broker writes, where a
key (a group id, a transactional id) lives in partition abs(hashCode) % partitions, and
whose coordinator serves a key only while this broker leads its partition: on becoming
leader it replays the partition (immigration), on losing it it forgets its keys
(emigration). `InternalTopicLog` is the persistence seam both coordinators use and
`PartitionLoads` their ownership bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from loglake.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

_LOAD_YIELD_EVERY = 1000  # records replayed between yields to the event loop while loading


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()`: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: str, num_partitions: int) -> int:
    """The internal topic partition of a group or transactional id: abs(hashCode) % partitions.

    Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


@dataclass(frozen=True)
class TransactionalRecord:
    """A record written in a producer's transaction (TxnOffsetCommit): it counts only if
    the producer's next marker on the partition is a COMMIT."""

    producer_id: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True)
class TransactionMarker:
    """A COMMIT or ABORT marker ending a producer's transaction on the partition."""

    producer_id: int
    commit: bool


# What replaying an internal topic gives: a plain (key, value) record, or a transaction's.
InternalTopicEntry = tuple[bytes, bytes | None] | TransactionalRecord | TransactionMarker


class InternalTopicLog(Protocol):
    """One internal topic as a coordinator needs it (wired to the real log by the broker)."""

    async def append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None
    ) -> None:
        """Append (key, value) records, all or none; durable (acks=all) when it returns.
        With `producer` (id, epoch), as one batch of that producer's transaction.

        Fails with `KafkaError` carrying the produce error (e.g. NOT_LEADER_OR_FOLLOWER,
        INVALID_PRODUCER_EPOCH), or OSError for a storage failure.
        """
        ...

    def read(self, partition: int) -> Iterable[InternalTopicEntry]:
        """Every record and transaction marker of the partition, in offset order."""
        ...


class PartitionLoads:
    """Which partitions of an internal topic a coordinator owns, and which it is loading.

    A load replays the partition's records into `apply`; an unload during the replay
    abandons it (the partition then is neither owned nor loading).
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.owned: set[int] = set()
        # Partition -> token of the load in progress; a load whose token was replaced or
        # removed (unloaded meanwhile) stops.
        self._loading: dict[int, object] = {}

    @property
    def any_loading(self) -> bool:
        return bool(self._loading)

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def all(self) -> set[int]:
        """Every partition owned or loading."""
        return self.owned | self._loading.keys()

    async def load(
        self,
        partition: int,
        topic_log: InternalTopicLog,
        apply: Callable[[bytes, bytes | None], None],
        on_transaction: Callable[[TransactionalRecord | TransactionMarker], None] | None = None,
    ) -> bool:
        """Replay `partition` into `apply(key, value)` (and its transactions' records and
        markers into `on_transaction`; without it there must be none, as in
        `__transaction_state`); True when the replay completed (the
        caller installs what it gathered and `mark_owned`s it, with no await in between),
        False if it was owned or loading already or was unloaded meanwhile.

        A record `apply` cannot decode (ValueError) is logged and skipped: one bad record
        must not take every key of the partition offline. Errors reading the log propagate,
        leaving the partition unowned.
        """
        if partition in self.owned or partition in self._loading:
            return False
        token = self._loading[partition] = object()
        try:
            for count, entry in enumerate(topic_log.read(partition), 1):
                try:
                    if isinstance(entry, tuple):
                        apply(*entry)
                    elif on_transaction is not None:
                        on_transaction(entry)
                except ValueError as exc:
                    log.warning("%s-%d: skipping a record that does not decode: %s", self.topic, partition, exc)
                if count % _LOAD_YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # let other keys' requests run during a long load
                    if self._loading.get(partition) is not token:
                        return False
            return self._loading.get(partition) is token
        finally:
            if self._loading.get(partition) is token:
                del self._loading[partition]

    def mark_owned(self, partition: int) -> None:
        self.owned.add(partition)

    def unload(self, partition: int) -> None:
        self._loading.pop(partition, None)
        self.owned.discard(partition)


def map_append_error(exc: Exception, too_large: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> ErrorCode:
    """The error a client sees when a coordinator's append to its internal topic fails,
    as Kafka maps it (`too_large`: what a record over the size limits becomes)."""
    if not isinstance(exc, KafkaError):
        return ErrorCode.NOT_COORDINATOR if isinstance(exc, OSError) else ErrorCode.UNKNOWN_SERVER_ERROR
    code = exc.code
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return too_large
    return code
