"""Kafka's transaction coordinator, independent of any transport.

It serves the transactional ids of the `__transaction_state` partitions it has loaded
(`load_partition` / `unload_partition`, as the broker gains or loses their leadership).
Every state change is prepared, written to the partition (acks=all) through the
`InternalTopicLog`, then applied. Ending a transaction writes PrepareCommit/PrepareAbort,
answers the producer, then has the markers written on every partition of the transaction
through the `MarkerChannel` (retrying until each is written) and writes
CompleteCommit/CompleteAbort. A coordinator that loads a partition completes the
PrepareCommit/PrepareAbort it finds there, so a failover finishes what the old one began.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from loglake.errors import ErrorCode, KafkaError
from loglake.faults import crash_point
from loglake.groups.api import TopicPartition
from loglake.internal_topics import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    InternalTopicLog,
    PartitionLoads,
    map_append_error,
    partition_for_key,
)
from loglake.transactions.api import (
    InitProducerIdResult,
    MarkerChannel,
    ProducerIdAllocator,
    TransactionDescription,
    TransactionListing,
)
from loglake.transactions.records import TransactionLogValue, decode_key, decode_value, encode_key, encode_value
from loglake.transactions.state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
)

log = logging.getLogger(__name__)

_MARKER_RETRY_BACKOFF_S = 0.1
_PREPARED = {TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT}
_OPEN_STATES = {TransactionState.ONGOING, *_PREPARED}


@dataclass
class TransactionCounters:
    """Transactions this coordinator completed or timed out since start-up (its metrics)."""

    committed: int = 0
    aborted: int = 0
    timed_out: int = 0


@dataclass(frozen=True)
class TransactionConfig:
    """The broker settings the coordinator uses, with Kafka's defaults."""

    transaction_state_log_num_partitions: int = 50
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    offsets_topic_num_partitions: int = 50

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TransactionConfig:
        base = cls()

        def get(name: str, default: int) -> int:
            return int(props[name]) if name in props else default

        return cls(
            get("transaction.state.log.num.partitions", base.transaction_state_log_num_partitions),
            get("transaction.max.timeout.ms", base.transaction_max_timeout_ms),
            get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                base.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            ),
            get("offsets.topic.num.partitions", base.offsets_topic_num_partitions),
        )


class TransactionCoordinator:
    """`clock` returns seconds (like time.time); timestamps are in ms from it."""

    def __init__(
        self,
        config: TransactionConfig,
        txn_log: InternalTopicLog,
        markers: MarkerChannel,
        allocate_producer_id: ProducerIdAllocator,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._log = txn_log
        self._markers = markers
        self._allocate_producer_id = allocate_producer_id
        self._clock = clock
        self._txns: dict[str, TransactionMetadata] = {}
        self._partitions = PartitionLoads(TRANSACTION_STATE_TOPIC)
        self._coordinator_epochs: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._expiry_task: asyncio.Task[None] | None = None
        self.counters = TransactionCounters()

    # ---------------------------------------------------------------- lifecycle

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_key(transactional_id, self._config.transaction_state_log_num_partitions)

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def start(self) -> None:
        """Abort timed-out transactions every transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        if self._expiry_task is None:
            self._expiry_task = asyncio.get_running_loop().create_task(self._abort_periodically())

    async def stop(self) -> None:
        tasks = [t for t in (self._expiry_task, *self._tasks) if t is not None]
        self._expiry_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for partition in sorted(self._partitions.all()):
            self.unload_partition(partition)

    async def load_partition(self, partition: int, coordinator_epoch: int = 0) -> None:
        """Become coordinator of the ids of `partition` (its leader epoch is the
        coordinator epoch markers carry), then complete the transactions it finds prepared."""
        loaded: dict[str, TransactionLogValue] = {}

        def apply(key_bytes: bytes, value_bytes: bytes | None) -> None:
            transactional_id = decode_key(key_bytes)
            if transactional_id is None:
                return
            if value_bytes is None:
                loaded.pop(transactional_id, None)
            else:
                loaded[transactional_id] = decode_value(value_bytes)

        if not await self._partitions.load(partition, self._log, apply):
            return
        self._coordinator_epochs[partition] = coordinator_epoch
        for transactional_id, v in loaded.items():
            self._txns[transactional_id] = TransactionMetadata(
                transactional_id,
                v.producer_id,
                v.producer_epoch,
                v.txn_timeout_ms,
                v.state,
                set(v.partitions),
                v.txn_start_timestamp,
                v.txn_last_update_timestamp,
            )
        self._partitions.mark_owned(partition)
        for txn in [t for t in self._txns.values() if self.partition_for(t.transactional_id) == partition]:
            if txn.state in _PREPARED:
                self._spawn(self._complete_with_markers(txn, txn.state is TransactionState.PREPARE_COMMIT))

    def unload_partition(self, partition: int) -> None:
        self._partitions.unload(partition)
        self._coordinator_epochs.pop(partition, None)
        for transactional_id in [t for t in self._txns if self.partition_for(t) == partition]:
            del self._txns[transactional_id]

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---------------------------------------------------------------- requests

    async def init_producer_id(
        self,
        transactional_id: str,
        txn_timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        """InitProducerId with a transactional id: a new id gets a producer id and epoch
        0; a known one keeps its producer id with the epoch bumped (fencing the previous
        producer). An open transaction is aborted first: the answer is then
        CONCURRENT_TRANSACTIONS and the client retries once the abort is complete.
        `expected_*` (KIP-360) is the producer id and epoch the client had, if any."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not 0 < txn_timeout_ms <= self._config.transaction_max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error = self._check_coordinator(transactional_id)
        if error is not None:
            return InitProducerIdResult(error)
        txn = self._txns.get(transactional_id)
        if txn is None:
            txn = TransactionMetadata(
                transactional_id,
                self._allocate_producer_id(),
                NO_PRODUCER_EPOCH,
                txn_timeout_ms,
                TransactionState.EMPTY,
            )
            self._txns[transactional_id] = txn
        if txn.pending is not None or txn.state in _PREPARED:
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if expected_producer_id != NO_PRODUCER_ID:
            if expected_producer_id != txn.producer_id:
                return InitProducerIdResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            if expected_epoch not in (txn.producer_epoch, txn.last_producer_epoch):
                return InitProducerIdResult(ErrorCode.PRODUCER_FENCED)
            if expected_epoch == txn.last_producer_epoch and txn.state is not TransactionState.ONGOING:
                # A retry of the InitProducerId that made the current epoch.
                return InitProducerIdResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)
        if txn.state is TransactionState.ONGOING:
            # Fence the producer of the open transaction and abort it with the bumped epoch.
            await self._fence_and_abort(txn)
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        producer_id, epoch = txn.producer_id, txn.producer_epoch + 1
        if epoch > MAX_PRODUCER_EPOCH:
            producer_id, epoch = self._allocate_producer_id(), 0
        error = await self._transition(
            txn,
            TransactionState.EMPTY,
            producer_id=producer_id,
            producer_epoch=epoch,
            txn_timeout_ms=txn_timeout_ms,
            partitions=set(),
            txn_start_timestamp=-1,
        )
        if error is not ErrorCode.NONE:
            return InitProducerIdResult(error)
        return InitProducerIdResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)

    async def add_partitions_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> ErrorCode:
        """AddPartitionsToTxn: the partitions join the open transaction (which this
        begins); one error for all of them, as Kafka answers."""
        txn, error = self._validate(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return error
        if txn.pending is not None or txn.state in _PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if txn.state is TransactionState.ONGOING and set(partitions) <= txn.partitions:
            return ErrorCode.NONE
        starting = txn.state is not TransactionState.ONGOING
        return await self._transition(
            txn,
            TransactionState.ONGOING,
            partitions=txn.partitions | set(partitions),
            txn_start_timestamp=self.now_ms() if starting else txn.txn_start_timestamp,
        )

    async def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction
        (its markers make the TxnOffsetCommit visible to the group on commit)."""
        offsets_partition = partition_for_key(group_id, self._config.offsets_topic_num_partitions)
        return await self.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, [TopicPartition(OFFSETS_TOPIC, offsets_partition)]
        )

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleVerifyPartitionsInTransaction (KIP-890; AddPartitionsToTxn v4+ with
        `verify_only`, which a group coordinator sends before a TxnOffsetCommit): whether each
        partition is in the producer's open transaction, changing nothing. The producer first,
        one error for all (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, NOT_COORDINATOR, ...),
        then a transaction being ended answers CONCURRENT_TRANSACTIONS, and a partition not in
        the transaction TRANSACTION_ABORTABLE."""
        txn, error = self._validate(transactional_id, producer_id, producer_epoch)
        if txn is not None and txn.state in _PREPARED:
            txn, error = None, ErrorCode.CONCURRENT_TRANSACTIONS
        if txn is None:
            return dict.fromkeys(partitions, error)
        return {tp: ErrorCode.NONE if tp in txn.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: prepare the commit or abort, answer, and have the markers written."""
        txn, error = self._validate(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return error
        if txn.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = txn.state
        if state is TransactionState.ONGOING:
            target = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
            error = await self._transition(txn, target)
            if error is ErrorCode.NONE:
                crash_point("txn-after-prepare")
                self._spawn(self._complete_with_markers(txn, commit))
            return error
        if state is (TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT):
            return ErrorCode.NONE  # a retry of an EndTxn that already completed
        if state is (TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    async def abort_timed_out_transactions(self) -> int:
        """Abort (fencing their producers) the open transactions older than their
        transaction.timeout.ms; returns how many."""
        now = self.now_ms()
        expired = [
            t
            for t in self._txns.values()
            if t.state is TransactionState.ONGOING
            and t.pending is None
            and t.txn_start_timestamp + t.txn_timeout_ms <= now
        ]
        for txn in expired:
            await self._fence_and_abort(txn)
        self.counters.timed_out += len(expired)
        return len(expired)

    def ongoing_count(self) -> int:
        """Transactions of the partitions this coordinator owns that are open or ending."""
        return sum(1 for t in self._txns.values() if t.state in _OPEN_STATES)

    def describe_transactions(self, transactional_ids: Collection[str]) -> list[TransactionDescription]:
        out = []
        for transactional_id in transactional_ids:
            error = self._check_coordinator(transactional_id) if transactional_id else ErrorCode.INVALID_REQUEST
            txn = self._txns.get(transactional_id) if error is None else None
            if error is None and (txn is None or txn.producer_epoch == NO_PRODUCER_EPOCH):
                error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            if txn is None or error is not None:
                out.append(TransactionDescription(transactional_id, error or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
                continue
            out.append(
                TransactionDescription(
                    transactional_id,
                    ErrorCode.NONE,
                    txn.state.display_name,
                    txn.producer_id,
                    txn.producer_epoch,
                    txn.txn_timeout_ms,
                    txn.txn_start_timestamp,
                    tuple(sorted(txn.partitions, key=lambda tp: (tp.topic, tp.partition))),
                )
            )
        return out

    def list_transactions(
        self, states: Collection[str] = (), producer_ids: Collection[int] = ()
    ) -> tuple[ErrorCode, list[TransactionListing]]:
        """ListTransactions, filtered by state names and producer ids (empty: all)."""
        wanted_states = set(states)
        wanted_ids = set(producer_ids)
        listings = [
            TransactionListing(t.transactional_id, t.producer_id, t.state.display_name)
            for t in self._txns.values()
            if t.producer_epoch != NO_PRODUCER_EPOCH
            and (not wanted_states or t.state.display_name in wanted_states)
            and (not wanted_ids or t.producer_id in wanted_ids)
        ]
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._partitions.any_loading else ErrorCode.NONE
        return error, listings

    # ---------------------------------------------------------------- internals

    def _check_coordinator(self, transactional_id: str) -> ErrorCode | None:
        partition = self.partition_for(transactional_id)
        if self._partitions.is_loading(partition):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._partitions.owned:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _validate(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode]:
        if not transactional_id:
            return None, ErrorCode.INVALID_REQUEST
        error = self._check_coordinator(transactional_id)
        if error is not None:
            return None, error
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return txn, ErrorCode.NONE

    async def _fence_and_abort(self, txn: TransactionMetadata) -> None:
        """Kafka's PrepareEpochFence: bump the epoch (so the old producer is fenced) and
        abort the open transaction with it."""
        txn.prepare(TransactionState.PREPARE_EPOCH_FENCE)
        txn.complete(TransactionState.PREPARE_EPOCH_FENCE)  # in memory only, as in Kafka
        if txn.producer_epoch >= MAX_PRODUCER_EPOCH:
            # Cannot bump further; the abort goes with the current epoch.
            epoch = txn.producer_epoch
        else:
            epoch = txn.producer_epoch + 1
        error = await self._transition(txn, TransactionState.PREPARE_ABORT, producer_epoch=epoch)
        if error is ErrorCode.NONE:
            self._spawn(self._complete_with_markers(txn, commit=False))
        else:
            txn.state = TransactionState.ONGOING  # nothing was written: the fence is retried later

    async def _complete_with_markers(self, txn: TransactionMetadata, commit: bool) -> None:
        """Write the markers on every partition until each is written (a partition that
        no longer exists is dropped), then the CompleteCommit/CompleteAbort record."""
        partition = self.partition_for(txn.transactional_id)
        remaining = set(txn.partitions)
        while remaining:
            if partition not in self._partitions.owned or self._txns.get(txn.transactional_id) is not txn:
                return  # emigrated: the next coordinator completes it
            coordinator_epoch = self._coordinator_epochs.get(partition, 0)
            try:
                errors = await self._markers.write_markers(
                    txn.producer_id, txn.producer_epoch, commit, coordinator_epoch, remaining
                )
            except (KafkaError, OSError) as exc:
                log.warning("markers of %s failed: %s; retrying", txn.transactional_id, exc)
                errors = {}
            for tp, code in errors.items():
                if code is ErrorCode.NONE or code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    remaining.discard(tp)
            if remaining:
                await asyncio.sleep(_MARKER_RETRY_BACKOFF_S)  # a leader moved or is down: retry
        target = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        while self._txns.get(txn.transactional_id) is txn and txn.state is not target:
            if await self._transition(txn, target, partitions=set()) is ErrorCode.NONE:
                if commit:
                    self.counters.committed += 1
                else:
                    self.counters.aborted += 1
                return
            if partition not in self._partitions.owned:
                return
            await asyncio.sleep(_MARKER_RETRY_BACKOFF_S)

    async def _transition(
        self,
        txn: TransactionMetadata,
        target: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        partitions: Collection[TopicPartition] | None = None,
        txn_start_timestamp: int | None = None,
    ) -> ErrorCode:
        """Prepare `target` with the given changes (None: unchanged), write it, and apply both
        once written; the error a client sees when the write fails (NOT_COORDINATOR, ...)."""
        txn.prepare(target)
        now = self.now_ms()
        value = TransactionLogValue(
            txn.producer_id if producer_id is None else producer_id,
            txn.producer_epoch if producer_epoch is None else producer_epoch,
            txn.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            target,
            frozenset(txn.partitions if partitions is None else partitions),
            now,
            txn.txn_start_timestamp if txn_start_timestamp is None else txn_start_timestamp,
        )
        partition = self.partition_for(txn.transactional_id)
        try:
            await self._log.append(partition, [(encode_key(txn.transactional_id), encode_value(value))])
        except (KafkaError, OSError) as exc:
            txn.abandon()
            return map_append_error(exc)
        if self._txns.get(txn.transactional_id) is not txn:
            return ErrorCode.NOT_COORDINATOR  # unloaded while writing
        if value.producer_epoch != txn.producer_epoch:
            txn.last_producer_epoch = txn.producer_epoch
        txn.producer_id, txn.producer_epoch = value.producer_id, value.producer_epoch
        txn.txn_timeout_ms, txn.partitions = value.txn_timeout_ms, set(value.partitions)
        txn.txn_start_timestamp, txn.txn_last_update_timestamp = value.txn_start_timestamp, now
        txn.complete(target)
        return ErrorCode.NONE

    async def _abort_periodically(self) -> None:
        interval = self._config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                aborted = await self.abort_timed_out_transactions()
            except Exception:
                log.exception("aborting timed-out transactions failed")
            else:
                if aborted:
                    log.info("aborted %d timed-out transactions", aborted)
