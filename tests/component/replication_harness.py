"""In-process brokers for replication tests: each is a LogManager, a ReplicaManager, the
Kafka request handlers and a Kafka listener on a loopback port, all in one event loop.

A `Cluster` plays the controller: it keeps every partition's state (leader, epoch, ISR,
version) as ZooKeeper would, answers the leaders' ISR compare-and-set writes, and sends
LeaderAndIsr by calling `become_leader_or_follower` directly. Replication itself goes
over real sockets: followers fetch with the Kafka protocol.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.fetch_apis import FetchApis
from ingest_gateway.apis.kafka_apis import KafkaApis
from ingest_gateway.network.kafka_client import KafkaClient
from ingest_gateway.network.kafka_server import KafkaServer
from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.metadata.metadata_thread import MetadataThread
from ingest_gateway.replica.replica_fetcher import ReplicaFetcherConfig
from ingest_gateway.replica.replica_manager import ReplicaManager
from ingest_gateway.apis.request_router import RequestRouter
from loglake.cluster.metadata_image import MetadataImage
from loglake.config import BrokerConfig, LogConfig
from loglake.coordination.model import LeaderAndIsrPartition, PartitionState, TopicDescription
from loglake.protocol import ApiKey
from loglake.security.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotaManager
from loglake.record.batch import decode_batches, encode_batch
from loglake.storage.log_manager import LogManager

LAG_MS = 500
FETCHER = ReplicaFetcherConfig(fetch_wait_max_ms=100, fetch_backoff_ms=50, socket_timeout_ms=3000)
CONTROLLER_EPOCH = 1


class Node:
    def __init__(self, cluster: Cluster, broker_id: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.dir = cluster.root / f"broker-{broker_id}"
        self.log_manager = LogManager([self.dir], LogConfig(), broker_id)
        self.rm = ReplicaManager(
            broker_id,
            self.log_manager,
            LogConfig(),
            isr_writer=cluster.write_isr,
            endpoint_of=cluster.endpoint_of,
            partition_exists=lambda topic, _: topic in cluster.topics,
            replica_lag_time_max_ms=LAG_MS,
            fetcher_config=FETCHER,
        )
        # Only the APIs replication uses (produce, fetch, offsets), on an image of the
        # cluster's topics; no authorizer, no quotas, no metrics.
        config = BrokerConfig(broker_id=broker_id, auto_create_topics_enable=False)
        self.cache = cache = MetadataCache(store=None, cluster_id="", metadata_thread=MetadataThread())  # type: ignore[arg-type]  # never refreshed
        cache.image = MetadataImage(topics=cluster.topics)
        auth = RequestAuthorization(None)
        self.router = RequestRouter(auth, None, config.inter_broker_listener_name)
        self.router.register_module(KafkaApis(
            config=config,
            cache=cache,
            admin=None,  # type: ignore[arg-type]
            coordinators=None,  # type: ignore[arg-type]
            replica_manager=self.rm,
            log_manager=self.log_manager,
            producer_ids=None,  # type: ignore[arg-type]
            authorization=auth,
            produce_quotas=ClientQuotaManager(PRODUCER_BYTE_RATE),
            dynamic_config=None,  # type: ignore[arg-type]
            init_transactional_producer=None,  # type: ignore[arg-type]
        ))
        self.fetch_apis = FetchApis(config, cache, self.rm, auth, ClientQuotaManager(CONSUMER_BYTE_RATE), None)
        self.router.register_module(self.fetch_apis)
        self.server = KafkaServer("127.0.0.1", 0, self.router.handle, 100 * 1024 * 1024)
        self.running = False

    async def start(self) -> None:
        await self.server.start()
        self.cluster.ports[self.broker_id] = self.server.port
        self.rm.start()
        self.running = True

    async def stop(self) -> None:
        """Stop serving and replicating; close the logs (checkpoints written)."""
        self.running = False
        await self.server.stop()
        await self.rm.stop()
        self.rm.shutdown()
        self.log_manager.shutdown()

    def partition(self, topic: str, p: int = 0):
        return self.rm.partitions[(topic, p)]

    def log_bytes(self, topic: str, p: int = 0) -> bytes:
        log = self.log_manager.get_log(topic, p)
        out = b""
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            piece = log.read(offset, 1 << 20)
            if not piece.size:
                break
            out += piece.read_bytes()
            offset = piece.next_offset
        return out


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.topics: dict[str, TopicDescription] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.nodes: dict[int, Node] = {}
        self.ports: dict[int, int] = {}
        self.isr_writes: list[tuple[str, int, PartitionState]] = []
        self.clients: list[KafkaClient] = []

    # Brokers ---------------------------------------------------------------------------------

    async def start_node(self, broker_id: int) -> Node:
        node = Node(self, broker_id)
        await node.start()
        self.nodes[broker_id] = node
        return node

    async def stop_node(self, broker_id: int) -> None:
        node = self.nodes.pop(broker_id)
        await node.stop()

    def endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        port = self.ports.get(broker_id)
        return None if port is None else ("127.0.0.1", port)

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for broker_id in list(self.nodes):
            await self.stop_node(broker_id)

    # The controller's part ---------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        replicas: tuple[int, ...],
        config: dict[str, str] | None = None,
        send_to: tuple[int, ...] | None = None,
    ) -> None:
        self.topics[name] = TopicDescription(name, str(uuid.uuid4()), {0: replicas}, config or {})
        self.states[(name, 0)] = PartitionState(replicas[0], 0, replicas, CONTROLLER_EPOCH)
        self.leader_and_isr(name, send_to)

    def write_isr(self, topic: str, partition: int, proposed: PartitionState) -> PartitionState | None:
        """The leader's compare-and-set of /brokers/topics/<t>/partitions/<p>/state."""
        current = self.states[(topic, partition)]
        if current.version != proposed.version or current.leader_epoch != proposed.leader_epoch:
            return None
        stored = replace(proposed, version=current.version + 1)
        self.states[(topic, partition)] = stored
        self.isr_writes.append((topic, partition, stored))
        return stored

    def elect(self, topic: str, leader: int, isr: tuple[int, ...], send_to: tuple[int, ...] | None = None) -> None:
        """A new leader at the next epoch (the controller's write, then LeaderAndIsr)."""
        current = self.states[(topic, 0)]
        self.states[(topic, 0)] = PartitionState(
            leader, current.leader_epoch + 1, isr, CONTROLLER_EPOCH, current.version + 1
        )
        self.leader_and_isr(topic, send_to)

    def leader_and_isr(self, topic: str, send_to: tuple[int, ...] | None = None) -> None:
        desc = self.topics[topic]
        entry = LeaderAndIsrPartition(topic, desc.topic_id, 0, desc.assignment[0], self.states[(topic, 0)], desc.config)
        for broker_id in send_to if send_to is not None else desc.assignment[0]:
            node = self.nodes.get(broker_id)
            if node is not None:
                node.rm.become_leader_or_follower(CONTROLLER_EPOCH, [entry])

    # Clients ---------------------------------------------------------------------------------------

    def client(self, broker_id: int) -> KafkaClient:
        client = KafkaClient("127.0.0.1", self.ports[broker_id], client_id="test", request_timeout_ms=10_000)
        self.clients.append(client)
        return client


async def produce(
    client: KafkaClient, topic: str, values: list[bytes], acks: int = -1, timeout_ms: int = 5000
) -> dict[str, Any]:
    """One Produce request with one batch; the partition's response."""
    batch = encode_batch([(None, v, (), None) for v in values], int(time.time() * 1000))
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    response = await client.request(ApiKey.PRODUCE, 9, body)
    return response["responses"][0]["partition_responses"][0]


async def fetch(
    client: KafkaClient,
    topic: str,
    offset: int = 0,
    replica_id: int = -1,
    current_leader_epoch: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    version: int = 12,
) -> dict[str, Any]:
    body = {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": current_leader_epoch,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    response = await client.request(ApiKey.FETCH, version, body, timeout_ms=max_wait_ms + 5000)
    return response["responses"][0]["partitions"][0]


def cluster_test(fn):
    """Run an async test with a fresh Cluster under tmp_path, closed at the end."""

    def wrapper(tmp_path: Path) -> None:
        async def main() -> None:
            cluster = Cluster(tmp_path)
            try:
                await asyncio.wait_for(fn(cluster), 20)
            finally:
                await cluster.close()

        asyncio.run(main())

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def values_of(records) -> list[bytes]:
    if records is None:
        return []
    return [r.value for _, batch in decode_batches(records) for r in batch]


async def until(condition, timeout_s: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
