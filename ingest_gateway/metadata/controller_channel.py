"""How the active controller's decisions reach the brokers of a cluster (Kafka's
ControllerChannelManager): LeaderAndIsr, StopReplica and UpdateMetadata requests over the
Kafka protocol, each stamped with the controller epoch.

The controller decides synchronously, on the metadata thread, and enqueues (on the event
loop); one sender task per broker sends that broker's requests in order and retries until
the broker answers or leaves the cluster. Decisions for the controller's own broker are
applied by a call on the event loop, as embedded.

An UpdateMetadata waits until the LeaderAndIsr requests enqueued before it that make their
broker a leader have been answered (or dropped: their broker left), so no broker names a
leader that has not yet taken the role; a broker that does not answer holds the others' metadata back at most
`LEADER_AND_ISR_WAIT_S` after the update was decided (however many updates queue behind).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loglake.coordination.model import LeaderAndIsrPartition, MetadataUpdate, topic_uuid
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

from ingest_gateway.metadata.update_metadata import UPDATE_METADATA_VERSION, update_metadata_body
from ingest_gateway.network.kafka_client import KafkaClient

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore
    from loglake.security.client import ClientSecurity

    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.metadata.metadata_thread import MetadataThread
    from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

LEADER_AND_ISR_VERSION = 5
STOP_REPLICA_VERSION = 3
_RETRY_S = 0.5
LEADER_AND_ISR_WAIT_S = 5.0


@dataclass
class _Request:
    api_key: ApiKey
    version: int
    body: Mapping[str, Any]
    # Set once the broker answered it, or it was dropped.
    done: asyncio.Future[None]
    # Requests of other brokers this one must wait for (an UpdateMetadata: the LeaderAndIsr
    # requests sent before it), until `wait_until` (the event loop's clock) at the latest.
    after: list[asyncio.Future[None]] = field(default_factory=list)
    wait_until: float = 0.0


class ControllerChannelManager:
    """The BrokerChannel of a cluster controller."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        inter_broker_security: ClientSecurity,
        metadata_thread: MetadataThread,
    ) -> None:
        self._broker_id = broker_id
        self._store = store
        # This broker's own decisions are applied directly, as embedded.
        self._local = LocalBrokerChannel(broker_id, replica_manager, cache, metadata_thread)
        self._inter_broker_security = inter_broker_security
        self._metadata_thread = metadata_thread
        self._queues: dict[int, asyncio.Queue[_Request]] = {}
        self._senders: dict[int, asyncio.Task] = {}
        # LeaderAndIsr requests not yet followed by an UpdateMetadata (on the event loop).
        self._leader_and_isr_pending: list[asyncio.Future[None]] = []

    # BrokerChannel ------------------------------------------------------------------------

    def send_leader_and_isr(
        self, broker_id: int, controller_epoch: int, partitions: list[LeaderAndIsrPartition]
    ) -> None:
        if broker_id == self._broker_id:
            self._local.send_leader_and_isr(broker_id, controller_epoch, partitions)
            return
        by_topic: dict[str, list[LeaderAndIsrPartition]] = {}
        for p in partitions:
            by_topic.setdefault(p.topic, []).append(p)
        body = {
            "controller_id": self._broker_id,
            "controller_epoch": controller_epoch,
            "type": 0,
            "topic_states": [
                {
                    "topic_name": topic,
                    "topic_id": topic_uuid(entries[0].topic_id),
                    "partition_states": [
                        {
                            "partition_index": e.partition,
                            "controller_epoch": e.state.controller_epoch,
                            "leader": e.state.leader,
                            "leader_epoch": e.state.leader_epoch,
                            "isr": list(e.state.isr),
                            "partition_epoch": e.state.version,
                            "replicas": list(e.replicas),
                        }
                        for e in entries
                    ],
                }
                for topic, entries in by_topic.items()
            ],
            "live_leaders": [],
        }
        leads = any(p.state.leader == broker_id for p in partitions)
        self._metadata_thread.on_loop(self._put, broker_id, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, body, leads)

    def send_stop_replica(
        self, broker_id: int, controller_epoch: int, partitions: list[tuple[str, int]], delete: bool
    ) -> None:
        if broker_id == self._broker_id:
            self._local.send_stop_replica(broker_id, controller_epoch, partitions, delete)
            return
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        body = {
            "controller_id": self._broker_id,
            "controller_epoch": controller_epoch,
            "topic_states": [
                {
                    "topic_name": topic,
                    "partition_states": [
                        {"partition_index": p, "leader_epoch": -1, "delete_partition": delete} for p in ps
                    ],
                }
                for topic, ps in by_topic.items()
            ],
        }
        self._enqueue(broker_id, ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION, body)

    def send_update_metadata(self, update: MetadataUpdate) -> None:
        self._local.send_update_metadata(update)
        body = update_metadata_body(update)
        others = [b for b in sorted(update.brokers) if b != self._broker_id]
        self._metadata_thread.on_loop(self._put_update_metadata, others, body)

    # Sending ---------------------------------------------------------------------------

    def _enqueue(self, broker_id: int, api_key: ApiKey, version: int, body: Mapping[str, Any]) -> None:
        self._metadata_thread.on_loop(self._put, broker_id, api_key, version, body)

    def _put(self, broker_id: int, api_key: ApiKey, version: int, body: Mapping[str, Any], leads: bool = False) -> None:
        request = _Request(api_key, version, body, asyncio.get_running_loop().create_future())
        if leads:
            # A LeaderAndIsr making its broker leader of something: metadata naming that
            # leader waits for it (a follower's does not hold anyone back).
            self._leader_and_isr_pending.append(request.done)
        self._queue(broker_id).put_nowait(request)

    def _put_update_metadata(self, broker_ids: list[int], body: Mapping[str, Any]) -> None:
        after, self._leader_and_isr_pending = self._leader_and_isr_pending, []
        loop = asyncio.get_running_loop()
        wait_until = loop.time() + LEADER_AND_ISR_WAIT_S
        for broker_id in broker_ids:
            request = _Request(
                ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION, body, loop.create_future(), after, wait_until
            )
            self._queue(broker_id).put_nowait(request)

    def _queue(self, broker_id: int) -> asyncio.Queue[_Request]:
        queue = self._queues.get(broker_id)
        if queue is None:
            queue = self._queues[broker_id] = asyncio.Queue()
            self._senders[broker_id] = asyncio.get_running_loop().create_task(self._send_loop(broker_id, queue))
        return queue

    async def _send_loop(self, broker_id: int, queue: asyncio.Queue[_Request]) -> None:
        client: KafkaClient | None = None
        try:
            while True:
                request = await queue.get()
                try:
                    client = await self._send(broker_id, request, client)
                finally:
                    if not request.done.done():
                        request.done.set_result(None)
        finally:
            if client is not None:
                await client.close()

    async def _send(self, broker_id: int, request: _Request, client: KafkaClient | None) -> KafkaClient | None:
        """Send until the broker answers or leaves the cluster; the client to use next."""
        api_key, version, body = request.api_key, request.version, request.body
        pending = [f for f in request.after if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, request.wait_until - asyncio.get_running_loop().time()))
        while True:
            endpoint = (await self._metadata_thread.run(self._store.brokers)).get(broker_id)
            if endpoint is None:
                log.info("broker %d left the cluster; dropping a %s for it", broker_id, api_key.name)
                return client
            try:
                if client is None:
                    client = KafkaClient(endpoint.host, endpoint.port, security=self._inter_broker_security)
                response = await client.request(api_key, version, dict(body))
                if response.get("error_code"):
                    log.warning(
                        "broker %d answered %s with %s", broker_id, api_key.name, ErrorCode(response["error_code"]).name
                    )
                return client
            except (TimeoutError, OSError, ConnectionError) as exc:
                log.debug("sending %s to broker %d failed (%s); retrying", api_key.name, broker_id, exc)
                if client is not None:
                    await client.close()
                    client = None
                await asyncio.sleep(_RETRY_S)

    async def close(self) -> None:
        for task in self._senders.values():
            task.cancel()
        await asyncio.gather(*self._senders.values(), return_exceptions=True)
        self._senders.clear()
        self._queues.clear()


class LocalBrokerChannel:
    """Controller decisions for this broker, applied by direct calls: the whole BrokerChannel
    of an embedded (single-node) controller, and a cluster controller's for its own broker.
    The controller decides on the metadata thread; the replica manager acts on the event loop."""

    def __init__(
        self, broker_id: int, replica_manager: ReplicaManager, cache: MetadataCache, metadata_thread: MetadataThread
    ) -> None:
        self._broker_id = broker_id
        self._replica_manager = replica_manager
        self._cache = cache
        self._metadata_thread = metadata_thread

    def send_leader_and_isr(
        self, broker_id: int, controller_epoch: int, partitions: list[LeaderAndIsrPartition]
    ) -> None:
        if broker_id == self._broker_id:
            self._metadata_thread.on_loop(self._replica_manager.become_leader_or_follower, controller_epoch, partitions)

    def send_stop_replica(
        self, broker_id: int, controller_epoch: int, partitions: list[tuple[str, int]], delete: bool
    ) -> None:
        if broker_id == self._broker_id:
            self._metadata_thread.on_loop(self._replica_manager.stop_replicas, controller_epoch, partitions, delete)

    def send_update_metadata(self, update: MetadataUpdate) -> None:
        self._metadata_thread.on_loop(self._cache.apply, update)

    async def close(self) -> None:
        """Nothing to close: no connections, no sender tasks."""
