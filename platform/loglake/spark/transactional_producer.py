"""Kafka transactions over loglake's protocol client: what the exactly-once sink needs.

A Spark task opens a transaction (InitProducerId of its transactional id: the epoch is bumped,
so an earlier attempt of the task is fenced and its open transaction aborted), produces its
rows in it and, for a streaming query, records its progress in it (TxnOffsetCommit); it
leaves the transaction open. Spark's driver ends every task's transaction (EndTxn) once the
micro-batch commits: the coordinator accepts EndTxn from any client naming the transactional
id with its producer id and epoch. A confluent-kafka producer does not fit the task's side:
librdkafka does not tell its producer id and epoch, and what becomes of its open transaction
when the producer is destroyed or its process exits is not part of its contract (today it is
left open until transaction.timeout.ms).

Records go as idempotent batches (the producer id, epoch and a sequence per partition from 0
in each epoch), so a Produce retried after a lost answer is not stored twice.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

from loglake.errors import ErrorCode
from loglake.record.batch import RecordRow, encode_batches
from loglake.record.compression import CompressionType
from loglake.record.header import RecordBatchHeader
from loglake.spark.group_offsets import committed_with_metadata, with_coordinator
from loglake.spark.protocol_client import (
    RETRIABLE_PARTITION_ERRORS,
    BrokerUnavailable,
    CoordinatorType,
    ProducerIdAndEpoch,
    ProtocolClient,
    TopicPartition,
)

# Under Kafka's default max.message.bytes (1 MiB + 12): one record batch per request and partition.
MAX_BATCH_BYTES = 1_000_000
# Answers after which the same request is sent again: the coordinator is moving or loading,
# or the previous transaction of the id is still being completed.
_RETRIABLE_TXN_ERRORS = RETRIABLE_PARTITION_ERRORS | {ErrorCode.CONCURRENT_TRANSACTIONS}
_BACKOFF_S = 0.05

T = TypeVar("T")


class TransactionError(RuntimeError):
    """The broker refused a step of a transaction (fenced, timed out, bad request)."""


@dataclass(frozen=True)
class SinkProgress:
    """What a task records in its transaction: the micro-batch it wrote."""

    batch_id: int

    def encode(self) -> str:
        return json.dumps({"batch": self.batch_id})

    @classmethod
    def decode(cls, metadata: str) -> SinkProgress:
        try:
            return cls(int(json.loads(metadata)["batch"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise TransactionError(f"offset metadata {metadata!r} is not a sink's progress ({exc})") from exc


def committed_progress(client: ProtocolClient, group_id: str) -> SinkProgress | None:
    """The latest progress a committed transaction recorded in `group_id` (None: none)."""
    committed = committed_with_metadata(client, group_id, None)
    progress = [SinkProgress.decode(metadata) for _, metadata in committed.values()]
    return max(progress, key=lambda p: p.batch_id, default=None)


def _at_coordinator(
    client: ProtocolClient,
    what: str,
    transactional_id: str,
    call: Callable[[tuple[str, int]], tuple[Collection[ErrorCode], T]],
    group_id: str | None = None,
) -> T:
    """`call(address)` at the transaction coordinator of `transactional_id` (or at the group
    coordinator of `group_id`), sent again while it answers a retriable error; another error
    raises TransactionError."""

    def attempt(address: tuple[str, int]) -> tuple[T] | None:
        errors, result = call(address)
        unexpected = set(errors) - {ErrorCode.NONE}
        if not unexpected:
            return (result,)
        if unexpected & _RETRIABLE_TXN_ERRORS:
            return None
        raise TransactionError(f"{what} of transactional id {transactional_id!r}: {sorted(e.name for e in unexpected)}")

    if group_id is None:
        (result,) = with_coordinator(client, transactional_id, attempt, CoordinatorType.TRANSACTION)
    else:
        (result,) = with_coordinator(client, group_id, attempt, CoordinatorType.GROUP)
    return result


class TransactionalProducer:
    """One transactional id's producer, in one task: `begin`, `send`, `record_progress`; the
    transaction stays open for the driver's `end_transactions`."""

    def __init__(
        self,
        client: ProtocolClient,
        transactional_id: str,
        transaction_timeout_ms: int,
        compression: CompressionType = CompressionType.NONE,
    ) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.compression = compression
        self.producer: ProducerIdAndEpoch | None = None
        self.records = 0
        # The offset after this transaction's last record, per partition written.
        self.end_offsets: dict[TopicPartition, int] = {}
        self._sequences: dict[TopicPartition, int] = {}

    def begin(self) -> ProducerIdAndEpoch:
        """InitProducerId: fences every earlier producer of the id, aborting its open transaction."""
        client, tid = self.client, self.transactional_id

        def init(address: tuple[str, int]) -> tuple[list[ErrorCode], ProducerIdAndEpoch]:
            error, producer = client.init_producer_id_from(address, tid, self.transaction_timeout_ms)
            return [error], producer

        self.producer = _at_coordinator(client, "InitProducerId", tid, init)
        return self.producer

    def last_progress(self, group_id: str) -> SinkProgress | None:
        """The latest progress a committed transaction recorded in `group_id` (after `begin`,
        no transaction of the id is open: what the group holds is stable)."""
        return committed_progress(self.client, group_id)

    def send(self, rows: Mapping[TopicPartition, list[RecordRow]]) -> None:
        """Produce `rows` in the transaction and wait for every acknowledgement (acks=all)."""
        producer = self._require_open()
        new = [tp for tp in rows if tp not in self._sequences]
        if new:

            def add(address: tuple[str, int]) -> tuple[set[ErrorCode], None]:
                return self.client.add_partitions_to_txn_to(address, producer, new), None

            _at_coordinator(self.client, "AddPartitionsToTxn", producer.transactional_id, add)
            self._sequences.update(dict.fromkeys(new, 0))
        now_ms = int(time.time() * 1000)
        pending: dict[TopicPartition, deque[bytes]] = {}
        for tp, tp_rows in rows.items():
            pending[tp] = deque(
                encode_batches(
                    tp_rows,
                    now_ms,
                    MAX_BATCH_BYTES,
                    compression=self.compression,
                    producer_id=producer.producer_id,
                    producer_epoch=producer.producer_epoch,
                    base_sequence=self._sequences[tp],
                    transactional=True,
                )
            )
            self._sequences[tp] += len(tp_rows)
        self._produce(pending)
        self.records += sum(len(tp_rows) for tp_rows in rows.values())

    def _produce(self, pending: dict[TopicPartition, deque[bytes]]) -> None:
        """Each partition's batches in order, one per request; a retriable error (a leader
        moving) sends the same batch again, which idempotence keeps from being stored twice."""
        deadline = time.monotonic() + self.client.timeout_s
        topics = sorted({tp.topic for tp in pending})
        last_error = ""
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"produce of {self.transactional_id!r} not acknowledged in time ({last_error})")
            by_leader: dict[tuple[str, int], dict[TopicPartition, bytes]] = {}
            refresh = False
            for tp, batches in pending.items():
                address = self.client.leader_address(tp)
                if address is None:
                    refresh = True
                else:
                    by_leader.setdefault(address, {})[tp] = batches[0]
            for address, leader_batches in by_leader.items():
                try:
                    answers = self.client.produce_to(address, self.transactional_id, leader_batches)
                except BrokerUnavailable as exc:
                    refresh, last_error = True, str(exc)
                    continue
                for tp, (error, base_offset) in answers.items():
                    if error is ErrorCode.NONE:
                        header = RecordBatchHeader.parse(pending[tp].popleft())
                        self.end_offsets[tp] = base_offset + header.last_offset_delta + 1
                        if not pending[tp]:
                            del pending[tp]
                    elif error in RETRIABLE_PARTITION_ERRORS:
                        refresh, last_error = True, f"{tp.topic}-{tp.partition}: {error.name}"
                    else:
                        raise TransactionError(
                            f"produce of {self.transactional_id!r} to {tp.topic}-{tp.partition}: {error.name}"
                        )
            if refresh:
                time.sleep(_BACKOFF_S)
                self.client.metadata(topics)

    def record_progress(self, group_id: str, progress: SinkProgress) -> None:
        """TxnOffsetCommit, in the transaction, of the end offsets written, with `progress` as
        their metadata: the group shows it once the transaction commits, never before."""
        producer = self._require_open()

        def add_offsets(address: tuple[str, int]) -> tuple[list[ErrorCode], None]:
            return [self.client.add_offsets_to_txn_to(address, producer, group_id)], None

        def commit(address: tuple[str, int]) -> tuple[set[ErrorCode], None]:
            metadata = progress.encode()
            return self.client.txn_offset_commit_to(address, producer, group_id, self.end_offsets, metadata), None

        _at_coordinator(self.client, "AddOffsetsToTxn", producer.transactional_id, add_offsets)
        _at_coordinator(self.client, "TxnOffsetCommit", producer.transactional_id, commit, group_id=group_id)

    def _require_open(self) -> ProducerIdAndEpoch:
        if self.producer is None:
            raise TransactionError(f"transactional id {self.transactional_id!r}: begin() first")
        return self.producer


def end_transaction(client: ProtocolClient, producer: ProducerIdAndEpoch, commit: bool) -> None:
    """EndTxn (commit or abort) of the producer's open transaction. Ending it again the same
    way is a no-op for the coordinator, so a retried commit is safe; a transaction that is no
    longer the producer's (fenced, or aborted by transaction.timeout.ms) raises."""

    def end(address: tuple[str, int]) -> tuple[list[ErrorCode], None]:
        return [client.end_txn_to(address, producer, commit)], None

    _at_coordinator(client, "EndTxn (commit)" if commit else "EndTxn (abort)", producer.transactional_id, end)
