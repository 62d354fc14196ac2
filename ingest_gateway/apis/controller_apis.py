"""The controller-to-broker APIs a cluster broker serves: LeaderAndIsr, StopReplica and
UpdateMetadata, each fenced by the controller epoch (a request from a deposed controller
gets STALE_CONTROLLER_EPOCH and changes nothing)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from loglake.coordination.model import LeaderAndIsrPartition, PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    LeaderAndIsrRequest,
    LeaderAndIsrRequestLeaderAndIsrPartitionState,
    LeaderAndIsrRequestLeaderAndIsrTopicState,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

from ingest_gateway.apis.request_router import handles
from ingest_gateway.metadata.update_metadata import update_from_body
from ingest_gateway.network.request_context import RequestContext

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.metadata.metadata_thread import MetadataThread
    from ingest_gateway.replica.replica_manager import ReplicaManager


class ControllerApis:
    def __init__(
        self,
        store: MetadataStore,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        metadata_thread: MetadataThread,
        inter_broker_listener: str,
    ) -> None:
        self._store = store
        self._inter_broker_listener = inter_broker_listener
        self._metadata_thread = metadata_thread
        self._replica_manager = replica_manager
        self._cache = cache

    @handles(ApiKey.LEADER_AND_ISR, 0, 7)
    async def leader_and_isr(self, context: RequestContext, body: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        header = context.header
        if header.request_api_version < 2:  # partition states not yet grouped by topic
            by_topic: dict[str, list[LeaderAndIsrRequestLeaderAndIsrPartitionState]] = {}
            for ps in body["ungrouped_partition_states"]:
                by_topic.setdefault(ps["topic_name"], []).append(ps)
            topic_states: list[LeaderAndIsrRequestLeaderAndIsrTopicState] = [
                {"topic_name": n, "partition_states": ps} for n, ps in by_topic.items()
            ]
        else:
            topic_states = body["topic_states"]
        # The topics' configs (not in the request): read for these topics only.
        topics = await self._metadata_thread.run(self._store.topics_named, [t["topic_name"] for t in topic_states])
        entries: list[LeaderAndIsrPartition] = []
        for t in topic_states:
            topic = topics.get(t["topic_name"])
            config = topic.config if topic is not None else {}
            if header.request_api_version < 5:  # topics travel by name only; the id is the store's
                t["topic_id"] = uuid.UUID(topic.topic_id) if topic is not None else uuid.UUID(int=0)
            topic_id = t["topic_id"]
            for ps in t["partition_states"]:
                state = PartitionState(
                    ps["leader"], ps["leader_epoch"], tuple(ps["isr"]), ps["controller_epoch"], ps["partition_epoch"]
                )
                entries.append(
                    LeaderAndIsrPartition(
                        t["topic_name"], str(topic_id), ps["partition_index"], tuple(ps["replicas"]), state, config
                    )
                )
        error = ErrorCode.NONE
        try:
            self._replica_manager.become_leader_or_follower(body["controller_epoch"], entries)
        except KafkaError as exc:
            error = exc.code
        return {
            "error_code": error,
            "partition_errors": [  # up to v4
                {"topic_name": t["topic_name"], "partition_index": ps["partition_index"], "error_code": error}
                for t in topic_states
                for ps in t["partition_states"]
            ],
            "topics": [  # from v5
                {
                    "topic_id": t["topic_id"],
                    "partition_errors": [
                        {"partition_index": ps["partition_index"], "error_code": error} for ps in t["partition_states"]
                    ],
                }
                for t in topic_states
            ],
        }

    @handles(ApiKey.STOP_REPLICA, 0, 4)
    async def stop_replica(self, context: RequestContext, body: StopReplicaRequest) -> StopReplicaResponse:
        header = context.header
        error = ErrorCode.NONE
        by_delete: dict[bool, list[tuple[str, int]]] = {}
        version = header.request_api_version
        if version == 0:
            by_delete[body["delete_partitions"]] = [
                (p["topic_name"], p["partition_index"]) for p in body["ungrouped_partitions"]
            ]
        elif version <= 2:
            by_delete[body["delete_partitions"]] = [
                (t["name"], p) for t in body["topics"] for p in t["partition_indexes"]
            ]
        for t in body["topic_states"] if version >= 3 else []:
            for ps in t["partition_states"]:
                by_delete.setdefault(ps["delete_partition"], []).append((t["topic_name"], ps["partition_index"]))
        try:
            for delete, partitions in by_delete.items():
                self._replica_manager.stop_replicas(body["controller_epoch"], partitions, delete)
        except KafkaError as exc:
            error = exc.code
        return {
            "error_code": error,
            "partition_errors": [
                {"topic_name": topic, "partition_index": p, "error_code": error}
                for partitions in by_delete.values()
                for topic, p in partitions
            ],
        }

    @handles(ApiKey.UPDATE_METADATA, 0, 8)
    async def update_metadata(self, context: RequestContext, body: UpdateMetadataRequest) -> UpdateMetadataResponse:
        """The live brokers and changed partition states, applied to this broker's image."""
        epoch = body["controller_epoch"]
        if epoch < self._replica_manager.controller_epoch:
            return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH}
        self._replica_manager.controller_epoch = epoch
        await self._cache.apply_from_controller(update_from_body(body, self._inter_broker_listener))
        return {"error_code": ErrorCode.NONE}
