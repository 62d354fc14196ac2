"""Transaction markers: `MarkerWriter` writes COMMIT/ABORT control batches on the partitions
this broker leads; `BrokerMarkerChannel` is the transaction coordinator's `MarkerChannel`,
which sends each partition's marker to its leader (this broker's through the writer, the
others' over WriteTxnMarkers)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Collection
from typing import TYPE_CHECKING

from loglake.errors import ErrorCode
from loglake.groups import TopicPartition
from loglake.internal_topics import OFFSETS_TOPIC
from loglake.protocol import ApiKey
from loglake.record.control import EndTransactionMarker, encode_marker_batch

from ingest_gateway.network.kafka_client import KafkaClient

if TYPE_CHECKING:
    from loglake.groups import GroupCoordinator
    from loglake.security.client import ClientSecurity

    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_MARKER_TIMEOUT_MS = 5000
_WRITE_TXN_MARKERS_VERSION = 1


class MarkerWriter:
    """Writes transaction markers on the partitions this broker leads (WriteTxnMarkers)."""

    def __init__(self, replica_manager: ReplicaManager, group_coordinator: GroupCoordinator) -> None:
        self._replica_manager = replica_manager
        self._group_coordinator = group_coordinator

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        now_ms = int(time.time() * 1000)
        batch = encode_marker_batch(
            producer_id, producer_epoch, EndTransactionMarker(commit, coordinator_epoch), now_ms
        )
        results = await self._replica_manager.append_records(
            {(tp.topic, tp.partition): batch for tp in partitions}, -1, _MARKER_TIMEOUT_MS, from_coordinator=True
        )
        errors = {}
        for tp in partitions:
            result = results[(tp.topic, tp.partition)]
            errors[tp] = ErrorCode.NONE if result.error is None else result.error.code
            if result.error is None and tp.topic == OFFSETS_TOPIC:
                # The marker on the group's partition makes its transactional offsets visible.
                self._group_coordinator.complete_txn(producer_id, commit, tp.partition)
        return errors


class BrokerMarkerChannel:
    """The coordinator's `MarkerChannel`: each partition's marker goes to its leader, this
    broker's own partitions directly, the others' over WriteTxnMarkers."""

    def __init__(
        self, broker_id: int, cache: MetadataCache, inter_broker_security: ClientSecurity, writer: MarkerWriter
    ) -> None:
        self._broker_id = broker_id
        self._cache = cache
        self._inter_broker_security = inter_broker_security
        self._writer = writer
        self._clients: dict[int, KafkaClient] = {}

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        image = self._cache.image
        errors: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            state = image.partition_states.get(tp.topic, {}).get(tp.partition)
            if tp.topic not in image.topics or state is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif state.leader not in image.brokers:
                errors[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                by_leader[state.leader].append(tp)
        args = (producer_id, producer_epoch, commit, coordinator_epoch)
        sends = [self._send(leader, tps, *args) for leader, tps in by_leader.items()]
        for answer in await asyncio.gather(*sends):
            errors.update(answer)
        return errors

    async def _send(
        self,
        leader: int,
        partitions: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, ErrorCode]:
        if leader == self._broker_id:
            return await self._writer.write(producer_id, producer_epoch, commit, coordinator_epoch, partitions)
        endpoint = self._cache.image.brokers[leader]
        client = self._clients.get(leader)
        if client is None or (client.host, client.port) != (endpoint.host, endpoint.port):
            client = self._clients[leader] = KafkaClient(
                endpoint.host, endpoint.port, security=self._inter_broker_security
            )
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        marker = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
            "coordinator_epoch": coordinator_epoch,
        }
        try:
            response = await client.request(ApiKey.WRITE_TXN_MARKERS, _WRITE_TXN_MARKERS_VERSION, {"markers": [marker]})
        except (ConnectionError, TimeoutError) as exc:
            log.warning("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in partitions}
        return {
            TopicPartition(t["name"], p["partition_index"]): ErrorCode(p["error_code"])
            for m in response["markers"]
            for t in m["topics"]
            for p in t["partitions"]
        }

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
