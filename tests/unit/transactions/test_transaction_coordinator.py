"""The transaction coordinator's state machine over in-memory seams: InitProducerId
(epoch bumps, fencing, the abort of an open transaction), AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn with markers, timeouts, reload after failover (completing a
prepared transaction), and `__transaction_state` records in Kafka's format."""

from __future__ import annotations

import asyncio
import struct
from collections import defaultdict
from collections.abc import Collection, Coroutine, Iterable
from typing import Any

import pytest

from loglake.errors import ErrorCode, KafkaError
from loglake.groups.api import TopicPartition
from loglake.internal_topics import OFFSETS_TOPIC, partition_for_key
from loglake.transactions import TransactionConfig, TransactionCoordinator, TransactionState
from loglake.transactions.records import TransactionLogValue, decode_key, decode_value, encode_key, encode_value

TID = "txn-1"
T0, T1 = TopicPartition("orders", 0), TopicPartition("payments", 2)
CONFIG = TransactionConfig(transaction_state_log_num_partitions=3, offsets_topic_num_partitions=5)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


class MemoryLog:
    """The InternalTopicLog seam in memory."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        self.fail_with: Exception | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.partitions[partition].extend(records)

    def read(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        return list(self.partitions[partition])

    def states(self, transactional_id: str = TID) -> list[TransactionState]:
        partition = partition_for_key(transactional_id, CONFIG.transaction_state_log_num_partitions)
        return [decode_value(v).state for k, v in self.partitions[partition] if v and decode_key(k) == transactional_id]


class Markers:
    """The MarkerChannel seam: records every marker; `hold` keeps writes waiting, `fail` answers an error."""

    def __init__(self) -> None:
        self.written: list[tuple[int, int, bool, int, frozenset[TopicPartition]]] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.fail: dict[TopicPartition, ErrorCode] = {}
        self.calls = 0

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        self.calls += 1
        await self.hold.wait()
        errors = {tp: self.fail.get(tp, ErrorCode.NONE) for tp in partitions}
        ok = frozenset(tp for tp, e in errors.items() if e is ErrorCode.NONE)
        if ok:
            self.written.append((producer_id, producer_epoch, commit, coordinator_epoch, ok))
        return errors


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now_s


def make(log: MemoryLog | None = None, markers: Markers | None = None, clock: Clock | None = None):
    ids = iter(range(5000, 6000))
    log = log or MemoryLog()
    markers = markers or Markers()
    coordinator = TransactionCoordinator(CONFIG, log, markers, lambda: next(ids), clock or Clock())
    return coordinator, log, markers


async def loaded(coordinator: TransactionCoordinator, epoch: int = 0) -> TransactionCoordinator:
    for p in range(CONFIG.transaction_state_log_num_partitions):
        await coordinator.load_partition(p, epoch)
    return coordinator


async def settle(coordinator: TransactionCoordinator, state: TransactionState, tid: str = TID) -> None:
    """Wait (bounded by the test timeout) for the markers task to reach `state`."""
    while coordinator.describe_transactions([tid])[0].state != state.display_name:
        await asyncio.sleep(0)


def test_records_are_kafkas_format() -> None:
    assert encode_key("ab") == struct.pack(">hh", 0, 2) + b"ab"
    value = TransactionLogValue(7, 3, 60000, TransactionState.ONGOING, frozenset({T0, T1}), 111, 100)
    data = encode_value(value)
    assert data[:17] == struct.pack(">hqhib", 0, 7, 3, 60000, 1)
    assert decode_value(data) == value
    empty = TransactionLogValue(7, 0, 60000, TransactionState.EMPTY, frozenset(), 1, -1)
    assert struct.unpack_from(">i", encode_value(empty), 17)[0] == -1  # null partitions
    assert decode_value(encode_value(empty)) == empty
    with pytest.raises(ValueError):
        decode_value(data[:-1])


def test_init_gives_a_producer_id_and_bumps_the_epoch_on_each_init() -> None:
    async def body() -> None:
        c, log, _ = make()
        await loaded(c)
        first = await c.init_producer_id(TID, 60000)
        assert (first.error, first.producer_epoch) == (ErrorCode.NONE, 0)
        second = await c.init_producer_id(TID, 60000)
        assert (second.error, second.producer_id, second.producer_epoch) == (ErrorCode.NONE, first.producer_id, 1)
        # The first producer is fenced.
        error = await c.add_partitions_to_txn(TID, first.producer_id, 0, [T0])
        assert error is ErrorCode.PRODUCER_FENCED
        assert log.states() == [TransactionState.EMPTY, TransactionState.EMPTY]

    run(body())


def test_bad_input_gets_kafkas_errors_and_writes_nothing() -> None:
    async def body() -> None:
        c, log, _ = make()
        assert (await c.init_producer_id(TID, 60000)).error is ErrorCode.NOT_COORDINATOR
        await loaded(c)
        assert (await c.init_producer_id(TID, 0)).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id(TID, 10**9)).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("", 1000)).error is ErrorCode.INVALID_REQUEST
        assert await c.add_partitions_to_txn("unknown", 1, 0, [T0]) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert not any(log.partitions.values())
        r = await c.init_producer_id(TID, 60000)
        assert await c.add_partitions_to_txn(TID, r.producer_id + 1, 0, [T0]) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await c.end_txn(TID, r.producer_id, 5, True) is ErrorCode.PRODUCER_FENCED
        # EndTxn with no transaction open.
        assert await c.end_txn(TID, r.producer_id, 0, True) is ErrorCode.INVALID_TXN_STATE
        assert log.states() == [TransactionState.EMPTY]
        # KIP-360: a producer id the coordinator does not hold for this id.
        assert (await c.init_producer_id(TID, 60000, 42, 0)).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING

    run(body())


def test_commit_writes_prepare_then_markers_then_complete() -> None:
    async def body() -> None:
        c, log, markers = make()
        await loaded(c, epoch=4)
        r = await c.init_producer_id(TID, 60000)
        pid = r.producer_id
        assert await c.add_partitions_to_txn(TID, pid, 0, [T0]) is ErrorCode.NONE
        assert await c.add_partitions_to_txn(TID, pid, 0, [T0]) is ErrorCode.NONE  # already in: no write
        assert await c.add_offsets_to_txn(TID, pid, 0, "group-a") is ErrorCode.NONE
        offsets_tp = TopicPartition(OFFSETS_TOPIC, partition_for_key("group-a", 5))
        described = c.describe_transactions([TID])[0]
        assert described.state == "Ongoing" and set(described.partitions) == {T0, offsets_tp}
        markers.hold.clear()
        assert await c.end_txn(TID, pid, 0, commit=True) is ErrorCode.NONE
        # Answered after PrepareCommit; the markers are still being written.
        assert c.describe_transactions([TID])[0].state == "PrepareCommit"
        assert await c.add_partitions_to_txn(TID, pid, 0, [T1]) is ErrorCode.CONCURRENT_TRANSACTIONS
        assert await c.end_txn(TID, pid, 0, commit=True) is ErrorCode.CONCURRENT_TRANSACTIONS
        assert await c.end_txn(TID, pid, 0, commit=False) is ErrorCode.INVALID_TXN_STATE
        markers.hold.set()
        await settle(c, TransactionState.COMPLETE_COMMIT)
        assert markers.written == [(pid, 0, True, 4, frozenset({T0, offsets_tp}))]
        assert log.states() == [
            TransactionState.EMPTY,
            TransactionState.ONGOING,
            TransactionState.ONGOING,
            TransactionState.PREPARE_COMMIT,
            TransactionState.COMPLETE_COMMIT,
        ]
        assert await c.end_txn(TID, pid, 0, commit=True) is ErrorCode.NONE  # a retry after completion
        # The next transaction starts from CompleteCommit.
        assert await c.add_partitions_to_txn(TID, pid, 0, [T1]) is ErrorCode.NONE

    run(body())


def test_markers_are_retried_until_every_leader_wrote_them() -> None:
    async def body() -> None:
        c, _, markers = make()
        await loaded(c)
        r = await c.init_producer_id(TID, 60000)
        await c.add_partitions_to_txn(TID, r.producer_id, 0, [T0, T1])
        markers.fail = {T1: ErrorCode.NOT_LEADER_OR_FOLLOWER}
        await c.end_txn(TID, r.producer_id, 0, commit=False)
        while markers.calls < 2:
            await asyncio.sleep(0)
        assert c.describe_transactions([TID])[0].state == "PrepareAbort"
        markers.fail = {}
        await settle(c, TransactionState.COMPLETE_ABORT)
        assert [(w[2], w[4]) for w in markers.written][-2:] == [(False, frozenset({T0})), (False, frozenset({T1}))]

    run(body())


def test_init_with_an_open_transaction_fences_and_aborts_it() -> None:
    async def body() -> None:
        c, log, markers = make()
        await loaded(c)
        old = await c.init_producer_id(TID, 60000)
        await c.add_partitions_to_txn(TID, old.producer_id, 0, [T0])
        retry = await c.init_producer_id(TID, 60000)
        assert retry.error is ErrorCode.CONCURRENT_TRANSACTIONS
        await settle(c, TransactionState.COMPLETE_ABORT)
        # The abort went with the bumped epoch, so the old producer's writes are refused by the logs too.
        assert markers.written == [(old.producer_id, 1, False, 0, frozenset({T0}))]
        assert await c.end_txn(TID, old.producer_id, 0, commit=True) is ErrorCode.PRODUCER_FENCED
        new = await c.init_producer_id(TID, 60000)
        assert (new.error, new.producer_id, new.producer_epoch) == (ErrorCode.NONE, old.producer_id, 2)
        assert TransactionState.PREPARE_ABORT in log.states()

    run(body())


def test_timed_out_transactions_are_aborted_and_their_producer_fenced() -> None:
    async def body() -> None:
        clock = Clock()
        c, _, markers = make(clock=clock)
        await loaded(c)
        r = await c.init_producer_id(TID, 1000)
        await c.add_partitions_to_txn(TID, r.producer_id, 0, [T0])
        assert await c.abort_timed_out_transactions() == 0
        clock.now_s += 1.0
        assert await c.abort_timed_out_transactions() == 1
        await settle(c, TransactionState.COMPLETE_ABORT)
        assert markers.written == [(r.producer_id, 1, False, 0, frozenset({T0}))]
        assert await c.add_partitions_to_txn(TID, r.producer_id, 0, [T0]) is ErrorCode.PRODUCER_FENCED

    run(body())


def test_a_new_coordinator_completes_a_prepared_commit_and_keeps_serving() -> None:
    async def body() -> None:
        log = MemoryLog()
        old, _, old_markers = make(log)
        await loaded(old)
        r = await old.init_producer_id(TID, 60000)
        await old.add_partitions_to_txn(TID, r.producer_id, 0, [T0, T1])
        old_markers.hold.clear()  # the old coordinator dies between EndTxn and its markers
        await old.end_txn(TID, r.producer_id, 0, commit=True)
        await old.stop()
        assert log.states()[-1] is TransactionState.PREPARE_COMMIT
        new, _, markers = make(log)
        await loaded(new, epoch=1)
        await settle(new, TransactionState.COMPLETE_COMMIT)
        assert markers.written == [(r.producer_id, 0, True, 1, frozenset({T0, T1}))]
        again = await new.init_producer_id(TID, 60000)
        assert (again.producer_id, again.producer_epoch) == (r.producer_id, 1)
        error, listing = new.list_transactions()
        assert error is ErrorCode.NONE and [(t.transactional_id, t.state) for t in listing] == [(TID, "Empty")]
        assert new.list_transactions(states=["Ongoing"])[1] == []

    run(body())


def test_a_failed_write_changes_nothing() -> None:
    async def body() -> None:
        c, log, _ = make()
        await loaded(c)
        r = await c.init_producer_id(TID, 60000)
        log.fail_with = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
        assert await c.add_partitions_to_txn(TID, r.producer_id, 0, [T0]) is ErrorCode.NOT_COORDINATOR
        log.fail_with = None
        assert c.describe_transactions([TID])[0].state == "Empty"
        assert await c.add_partitions_to_txn(TID, r.producer_id, 0, [T0]) is ErrorCode.NONE

    run(body())


def test_unloading_forgets_the_partitions_ids() -> None:
    async def body() -> None:
        c, _, _ = make()
        await loaded(c)
        await c.init_producer_id(TID, 60000)
        c.unload_partition(c.partition_for(TID))
        assert c.describe_transactions([TID])[0].error is ErrorCode.NOT_COORDINATOR
        assert (await c.init_producer_id(TID, 60000)).error is ErrorCode.NOT_COORDINATOR

    run(body())
