"""Compaction plans made by the Spark executor (jobs/compact.py), applied by each replica.

The plan is an Arrow IPC stream of (key binary, offset int64): each key's latest offset
below `end_offset`. A replica rewrites its own segments with it; the plan must lie below
this replica's high watermark (committed records only, the same on every replica), else
NOT_ENOUGH_REPLICAS: the job retries once the replica has caught up.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from fastapi import APIRouter, Request
from loglake.errors import ErrorCode, KafkaError
from loglake.maintenance.cleaner import LogCleaningAborted

from ingest_gateway.http.errors import BadRequest

if TYPE_CHECKING:
    from loglake.maintenance.log_cleaner import LogCleaner

    from ingest_gateway.replica.replica_manager import ReplicaManager


def compaction_routes(broker_id: int, replica_manager: ReplicaManager, log_cleaner: LogCleaner) -> APIRouter:
    router = APIRouter()

    @router.post("/admin/compaction/{topic}/{partition}")
    async def apply_compaction_plan(
        topic: str, partition: int, request: Request, end_offset: int, now_ms: int
    ) -> dict[str, Any]:
        """The Spark executor's plan for one partition; `now_ms` dates delete horizons."""
        try:
            plan = pa.ipc.open_stream(await request.body()).read_all()
            keys, offsets = plan.column("key").combine_chunks(), plan.column("offset").to_numpy()
        except (pa.ArrowException, KeyError) as exc:
            raise BadRequest(422, f"the body is not an Arrow stream of (key, offset): {exc}", 2) from exc
        local = replica_manager.partitions.get((topic, partition))
        if local is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"broker {broker_id} has no {topic}-{partition}")
        if local.high_watermark < end_offset:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the high watermark of {topic}-{partition} on broker {broker_id} is "
                f"{local.high_watermark}, below the plan's end {end_offset}; retry",
            )
        log_ = local.log
        try:
            result = await asyncio.to_thread(log_cleaner.clean_with_plan, log_, keys, offsets, end_offset, now_ms)
        except LogCleaningAborted as exc:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS, f"{exc}") from exc
        stats = result.stats
        return {
            "broker_id": broker_id,
            "end_offset": result.end_offset,
            # Offsets below this are cleaned with the plan; the active segment never is.
            "cleaned_up_to": min(result.end_offset, log_.active_segment.base_offset),
            "bytes_read": stats.bytes_read,
            "bytes_written": stats.bytes_written,
            "segments_swapped": stats.segments_swapped,
        }

    return router
