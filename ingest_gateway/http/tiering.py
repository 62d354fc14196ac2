"""HTTP for tiered storage: what the tier job (jobs/tier.py) asks a partition's leader
before copying, and where it records the tiered offset once its Delta commit is done.

The tiered offset goes to the metadata store, so every replica (and any later leader)
reads the same value when its retention decides what may go locally. Its reads and writes run
on the broker's metadata thread; a store that does not answer within `timeout_ms` is answered
504 (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from loglake.errors import ErrorCode, KafkaError

from ingest_gateway.http.errors import BadRequest
from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.metadata.metadata_thread import MetadataThread
    from ingest_gateway.replica.replica_manager import ReplicaManager


def tiering_routes(
    replica_manager: ReplicaManager,
    store: MetadataStore,
    metadata_thread: MetadataThread,
    timeout_ms: int = ADMIN_TIMEOUT_MS,
) -> APIRouter:
    router = APIRouter()

    def leader_with_remote_storage(topic: str, partition: int):
        p = replica_manager.leader_partition(topic, partition)
        if not p.log.config.remote_storage_enable:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"topic {topic} does not have remote.storage.enable=true")
        return p

    @router.get("/topics/{topic}/partitions/{partition}/tiering")
    async def tiering_state(topic: str, partition: int) -> dict[str, Any]:
        """What may be tiered: offsets below `tierable_end` are in rolled segments and below
        the last stable offset (Kafka's RemoteLogManager copies exactly those: never an
        undecided transaction). `size`, the local
        log's bytes, is the log's part of the history that retention.bytes bounds."""
        p = leader_with_remote_storage(topic, partition)
        log = p.log
        tiered = await metadata_thread.run(store.tiered_offset, topic, partition, timeout_ms=timeout_ms)
        log_start, size = log.start_and_size()
        return {
            "log_start_offset": log_start,
            "tierable_end": min(log.active_segment.base_offset, log.last_stable_offset(p.high_watermark)),
            "high_watermark": p.high_watermark,
            "size": size,
            "tiered_offset": tiered or 0,
        }

    @router.post("/topics/{topic}/partitions/{partition}/tiered-offset")
    async def record_tiered_offset(topic: str, partition: int, request: Request) -> dict[str, Any]:
        """Every offset below `offset` is now in the topic's Delta table."""
        try:
            offset = (await request.json())["offset"]
        except (ValueError, KeyError, TypeError):
            raise BadRequest(422, 'body must be {"offset": <int>}', 2) from None
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise BadRequest(422, "'offset' must be an integer", 2)
        p = leader_with_remote_storage(topic, partition)
        if not 0 <= offset <= p.high_watermark:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"tiered offset {offset} of {topic}-{partition} is outside [0, {p.high_watermark}] (the high watermark)",
            )
        stored = await metadata_thread.run(store.record_tiered_offset, topic, partition, offset, timeout_ms=timeout_ms)
        return {"tiered_offset": stored}

    return router
