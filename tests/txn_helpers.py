"""A broker's transaction APIs in-process (imported as a module): `TxnApis` with a real
`TransactionCoordinator` and `GroupCoordinator` over in-memory internal topics, behind a
`RequestRouter`, so that a request gets exactly the answer a client would read (the router's
error-code downgrades included). No `Broker`, no metadata store: the metadata image is the
test's (`cluster_image`), shared by the brokers of a test."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable
from types import SimpleNamespace
from typing import Any

from loglake.cluster.metadata_image import MetadataImage
from loglake.coordination.model import BrokerEndpoint, PartitionState, TopicDescription
from loglake.errors import ErrorCode
from loglake.groups import GroupConfig, GroupCoordinator, TopicPartition
from loglake.internal_topics import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    InternalTopicEntry,
    TransactionalRecord,
)
from loglake.protocol import ApiKey, decode_response, encode_request
from loglake.security.client import PLAINTEXT
from loglake.transactions import TransactionConfig, TransactionCoordinator
from protocol_helpers import plaintext_connection

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.request_router import RequestRouter
from ingest_gateway.apis.txn_apis import TxnApis

TOPIC = "t"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC)
GROUP = "g"
TXN_ID = "txn"
# One partition each: every transactional id and group maps to partition 0.
TXN_CONFIG = TransactionConfig(transaction_state_log_num_partitions=1, offsets_topic_num_partitions=1)
GROUP_CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1)


class MemoryLog:
    """The InternalTopicLog seam in memory (either coordinator's topic)."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[InternalTopicEntry]] = defaultdict(list)

    async def append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None
    ) -> None:
        if producer is None:
            self.partitions[partition].extend(records)
        else:
            self.partitions[partition].extend(TransactionalRecord(producer[0], k, v) for k, v in records)

    def read(self, partition: int) -> Iterable[InternalTopicEntry]:
        return list(self.partitions[partition])


class WrittenMarkers:
    """The MarkerChannel seam: every marker is written at once."""

    async def write_markers(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, partitions: Collection[Any]
    ) -> dict[Any, ErrorCode]:
        return dict.fromkeys(partitions, ErrorCode.NONE)


def cluster_image(txn_coordinator: int, ports: dict[int, int]) -> MetadataImage:
    """Brokers at 127.0.0.1:`ports[id]`, topic "t" (4 partitions, led by broker 0), both
    internal topics (one partition each): `__consumer_offsets` led by broker 0,
    `__transaction_state` by `txn_coordinator`."""
    brokers = {b: BrokerEndpoint(b, "127.0.0.1", port, "127.0.0.1", 0) for b, port in ports.items()}

    def topic(name: str, partitions: int, leader: int, topic_id: str = "") -> tuple[TopicDescription, dict]:
        description = TopicDescription(name, topic_id, {p: (leader,) for p in range(partitions)})
        return description, {p: PartitionState(leader, 0, (leader,), 0) for p in range(partitions)}

    topics = {
        TOPIC: topic(TOPIC, 4, 0, str(TOPIC_ID)),
        OFFSETS_TOPIC: topic(OFFSETS_TOPIC, 1, 0),
        TRANSACTION_STATE_TOPIC: topic(TRANSACTION_STATE_TOPIC, 1, txn_coordinator),
    }
    return MetadataImage(
        brokers=brokers,
        topics={name: t for name, (t, _) in topics.items()},
        partition_states={name: states for name, (_, states) in topics.items()},
    )


class TxnBroker:
    """One broker's transaction and group APIs; `cache.image` is the cluster's metadata."""

    def __init__(self, broker_id: int, cache: SimpleNamespace) -> None:
        ids = itertools.count(1000 * (broker_id + 1))
        self.broker_id = broker_id
        self.txn = TransactionCoordinator(TXN_CONFIG, MemoryLog(), WrittenMarkers(), lambda: next(ids))
        self.groups = GroupCoordinator(GROUP_CONFIG, MemoryLog(), topics=lambda: {TOPIC: (TOPIC_ID, 4)})
        replica_manager = SimpleNamespace(broker_id=broker_id, fetcher_manager=SimpleNamespace(security=PLAINTEXT))
        auth = RequestAuthorization(None)
        self.apis = TxnApis(self.txn, None, cache, replica_manager, self.groups, auth)  # type: ignore[arg-type]
        self.router = RequestRouter(auth, None, "PLAINTEXT")
        self.router.register_module(self.apis)

    async def start(self, *, txn_coordinator: bool, group_coordinator: bool) -> None:
        if txn_coordinator:
            await self.txn.load_partition(0)
        if group_coordinator:
            await self.groups.load_partition(0)

    async def stop(self) -> None:
        await self.apis.close()
        await self.txn.stop()
        await self.groups.stop()

    async def call(self, key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """One request through the router: the response as the client decodes it."""
        frame = encode_request(key, version, 1, "test", body)
        chunks = await self.router.handle(plaintext_connection(), memoryview(frame)[4:])
        assert chunks is not None
        return decode_response(key, version, b"".join(bytes(c) for c in chunks)[4:])[1]


async def init_producer(coordinator: TxnBroker, transactional_id: str = TXN_ID) -> tuple[int, int]:
    """InitProducerId until it answers (a first one may find an open transaction to abort)."""
    body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60_000}
    for _ in range(50):
        result = await coordinator.apis.init_producer_id(body)  # type: ignore[arg-type]
        if result["error_code"] == ErrorCode.NONE:
            return result["producer_id"], result["producer_epoch"]
        await asyncio.sleep(0.01)
    raise AssertionError(f"InitProducerId kept failing: {result}")


def add_partitions_body(producer: tuple[int, int], *partitions: int) -> dict[str, Any]:
    """AddPartitionsToTxn v0-3 of TXN_ID with partitions of "t"."""
    return {
        "v3_and_below_transactional_id": TXN_ID,
        "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": TOPIC, "partitions": list(partitions)}],
    }


def add_offsets_body(producer: tuple[int, int]) -> dict[str, Any]:
    return {"transactional_id": TXN_ID, "producer_id": producer[0], "producer_epoch": producer[1], "group_id": GROUP}


def txn_offset_commit_body(
    producer: tuple[int, int], member_id: str = "", generation_id: int = -1, offset: int = 5
) -> dict[str, Any]:
    return {
        "transactional_id": TXN_ID,
        "group_id": GROUP,
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": None,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }


def txn_offset_commit_error(response: dict[str, Any]) -> int:
    (topic,) = response["topics"]
    (partition,) = topic["partitions"]
    return partition["error_code"]


def offsets_partition() -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, 0)
