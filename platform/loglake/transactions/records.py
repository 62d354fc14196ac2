"""The records of `__transaction_state`, byte for byte as Kafka 3.x writes them.

Key (TransactionLogKey v0): version int16 (0) | transactionalId string.
Value (TransactionLogValue v0): version int16 (0) | producerId int64 | producerEpoch int16 |
transactionTimeoutMs int32 | transactionStatus int8 | transactionPartitions (nullable
array: int32 count, per topic: topic string | partitionIds int32 count + int32s) |
transactionLastUpdateTimestampMs int64 | transactionStartTimestampMs int64.
A null value is a tombstone (an expired transactional id).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from loglake.groups.api import TopicPartition
from loglake.record.struct_codec import StructReader, StructWriter
from loglake.transactions.state import TransactionState

KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_last_update_timestamp: int
    txn_start_timestamp: int


def encode_key(transactional_id: str) -> bytes:
    return StructWriter().int16(KEY_VERSION).string(transactional_id).getvalue()


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this coordinator does not know."""
    r = StructReader(data)
    return r.string() if r.int16() == KEY_VERSION else None


def encode_value(value: TransactionLogValue) -> bytes:
    w = StructWriter().int16(VALUE_VERSION).int64(value.producer_id).int16(value.producer_epoch)
    w.int32(value.txn_timeout_ms).int8(value.state)
    if value.state is TransactionState.EMPTY and not value.partitions:
        w.int32(-1)  # Kafka writes no partitions as null only for Empty; an empty array otherwise
    else:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in sorted(value.partitions, key=lambda tp: (tp.topic, tp.partition)):
            by_topic[tp.topic].append(tp.partition)
        w.int32(len(by_topic))
        for topic, partitions in by_topic.items():
            w.string(topic).int32(len(partitions))
            for p in partitions:
                w.int32(p)
    return w.int64(value.txn_last_update_timestamp).int64(value.txn_start_timestamp).getvalue()


def decode_value(data: bytes) -> TransactionLogValue:
    r = StructReader(data)
    version = r.int16()
    if version != VALUE_VERSION:
        raise ValueError(f"unknown transaction log value version {version}")
    producer_id, producer_epoch, timeout_ms, status = r.int64(), r.int16(), r.int32(), r.int8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise ValueError(f"unknown transaction status {status}") from None
    partitions = set()
    for _ in range(max(r.int32(), 0)):
        topic = r.string()
        for _ in range(r.int32()):
            partitions.add(TopicPartition(topic, r.int32()))
    return TransactionLogValue(
        producer_id, producer_epoch, timeout_ms, state, frozenset(partitions), r.int64(), r.int64()
    )
