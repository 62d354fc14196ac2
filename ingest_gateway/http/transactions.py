"""HTTP for operators of transactions, what `loglake transactions` (as kafka-transactions.sh)
asks: the transactions this broker coordinates (ListTransactions, DescribeTransactions), the
producers of a partition it leads with their open transactions (DescribeProducers), and
aborting a hanging transaction by writing its ABORT marker (as the tool's `abort` sends
WriteTxnMarkers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Query, Request
from loglake.errors import ErrorCode, KafkaError
from loglake.groups import TopicPartition

from ingest_gateway.http.errors import BadRequest

if TYPE_CHECKING:
    from loglake.transactions import TransactionCoordinator

    from ingest_gateway.coordinators.transaction_markers import MarkerWriter
    from ingest_gateway.replica.replica_manager import ReplicaManager


def transaction_routes(
    broker_id: int, coordinator: TransactionCoordinator, replica_manager: ReplicaManager, marker_writer: MarkerWriter
) -> APIRouter:
    router = APIRouter()

    @router.get("/transactions")
    async def list_transactions(
        state: list[str] = Query(default=[]), producer_id: list[int] = Query(default=[])
    ) -> dict[str, Any]:
        """The transactional ids this broker coordinates (of the `__transaction_state`
        partitions it leads), filtered by state names and producer ids."""
        error, listings = coordinator.list_transactions(state, producer_id)
        if error is not ErrorCode.NONE:
            raise KafkaError(error, "the coordinator is loading its transactions; retry")
        return {
            "broker_id": broker_id,
            "transactions": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state}
                for t in sorted(listings, key=lambda t: t.transactional_id)
            ],
        }

    @router.get("/transactions/{transactional_id}")
    async def describe_transaction(transactional_id: str) -> dict[str, Any]:
        """One transactional id, from its coordinator (NOT_COORDINATOR elsewhere)."""
        (d,) = coordinator.describe_transactions([transactional_id])
        if d.error is not ErrorCode.NONE:
            raise KafkaError(d.error, f"transactional id {transactional_id!r}: {d.error.name}")
        return {
            "transactional_id": d.transactional_id,
            "coordinator": broker_id,
            "state": d.state,
            "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch,
            "transaction_timeout_ms": d.txn_timeout_ms,
            "transaction_start_time_ms": d.txn_start_timestamp,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in d.partitions],
        }

    @router.get("/topics/{topic}/partitions/{partition}/producers")
    async def describe_producers(topic: str, partition: int) -> dict[str, Any]:
        """The producers of a partition this broker leads, as DescribeProducers answers:
        current_txn_start_offset is the first offset of the producer's open transaction, -1
        if none."""
        leader = replica_manager.leader_partition(topic, partition)
        producers = list(leader.log.producer_state.producers.values())
        return {
            "topic": topic,
            "partition": partition,
            "last_stable_offset": leader.log.last_stable_offset(leader.high_watermark),
            "producers": [
                {
                    "producer_id": e.producer_id,
                    "producer_epoch": e.producer_epoch,
                    "last_sequence": e.last_seq,
                    "last_timestamp": e.last_timestamp,
                    "current_txn_start_offset": e.current_txn_first_offset,
                }
                for e in sorted(producers, key=lambda e: e.producer_id)
            ],
        }

    @router.post("/topics/{topic}/partitions/{partition}/abort-transaction")
    async def abort_transaction(topic: str, partition: int, request: Request) -> dict[str, Any]:
        """Abort the open transaction starting at `start_offset` on this partition (a
        hanging one): its producer's ABORT marker, written as a coordinator would."""
        try:
            start_offset = (await request.json())["start_offset"]
        except (ValueError, KeyError, TypeError):
            raise BadRequest(422, 'body must be {"start_offset": <int>}', 2) from None
        if not isinstance(start_offset, int) or isinstance(start_offset, bool):
            raise BadRequest(422, "'start_offset' must be an integer", 2)
        log = replica_manager.leader_partition(topic, partition).log
        entry = next(
            (e for e in list(log.producer_state.producers.values()) if e.current_txn_first_offset == start_offset),
            None,
        )
        if entry is None:
            raise BadRequest(404, f"no open transaction of {topic}-{partition} starts at offset {start_offset}", 4)
        tp = TopicPartition(topic, partition)
        errors = await marker_writer.write(entry.producer_id, entry.producer_epoch, False, -1, [tp])
        if errors[tp] is not ErrorCode.NONE:
            raise KafkaError(errors[tp], f"writing the ABORT marker on {topic}-{partition} failed")
        return {"producer_id": entry.producer_id, "producer_epoch": entry.producer_epoch, "aborted": True}

    return router
