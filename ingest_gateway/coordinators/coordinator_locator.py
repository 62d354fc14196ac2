"""Which broker coordinates a group or a transactional id: the leader of its partition of
`__consumer_offsets` or `__transaction_state`, each internal topic created on first use
with its `offsets.topic.*` / `transaction.state.log.*` settings (as Kafka's
FindCoordinator does).

An internal topic is created with its configured replication factor or not at all, as in
Kafka: the factor is checked against the live brokers registered in the metadata store
(ZooKeeper's /brokers/ids, read on the metadata thread), not against this broker's image,
which may not list a broker that joined a moment ago. Until enough brokers are alive the
answer is COORDINATOR_NOT_AVAILABLE (retriable: clients ask again), saying how many are
needed. The topic's configs (`transaction.state.log.min.isr` as its min.insync.replicas)
are set as configured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loglake.config import BrokerConfig
from loglake.coordination.model import BrokerEndpoint
from loglake.errors import ErrorCode, KafkaError
from loglake.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

from ingest_gateway.metadata.admin_manager import AdminManager
from ingest_gateway.metadata.metadata_cache import MetadataCache


@dataclass(frozen=True)
class InternalTopicSpec:
    """How an internal topic is created: `replication_setting` names the broker config its
    replication factor comes from (for the answer while too few brokers are alive)."""

    name: str
    num_partitions: int
    replication_factor: int
    replication_setting: str
    config: dict[str, str]


class CoordinatorLocator:
    def __init__(
        self,
        config: BrokerConfig,
        cache: MetadataCache,
        admin: AdminManager,
        group_partition: Callable[[str], int],
        transaction_partition: Callable[[str], int],
    ) -> None:
        self._cache = cache
        self._admin = admin
        self._group_partition = group_partition
        self._transaction_partition = transaction_partition
        raw = config.raw
        self._offsets_topic = InternalTopicSpec(
            OFFSETS_TOPIC,
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            "offsets.topic.replication.factor",
            {
                "cleanup.policy": "compact",
                "segment.bytes": raw.get("offsets.topic.segment.bytes", "104857600"),
            },
        )
        self._transaction_state_topic = InternalTopicSpec(
            TRANSACTION_STATE_TOPIC,
            int(raw.get("transaction.state.log.num.partitions", "50")),
            int(raw.get("transaction.state.log.replication.factor", "3")),
            "transaction.state.log.replication.factor",
            {
                "cleanup.policy": "compact",
                "segment.bytes": raw.get("transaction.state.log.segment.bytes", "104857600"),
                "min.insync.replicas": raw.get("transaction.state.log.min.isr", "2"),
            },
        )

    async def group_coordinator(self, group_id: str) -> BrokerEndpoint:
        return await self._leader_of(self._offsets_topic, self._group_partition(group_id), f"the group {group_id!r}")

    async def transaction_coordinator(self, transactional_id: str) -> BrokerEndpoint:
        return await self._leader_of(
            self._transaction_state_topic,
            self._transaction_partition(transactional_id),
            f"the transactional id {transactional_id!r}",
        )

    async def _leader_of(self, topic: InternalTopicSpec, partition: int, owner: str) -> BrokerEndpoint:
        if topic.name not in self._cache.image.topics:
            await self._create(topic)
        image = self._cache.image
        state = image.partition_states.get(topic.name, {}).get(partition)
        if state is None:
            # Created (maybe by another broker) but not yet in this broker's image.
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic.name} is being created")
        endpoint = image.brokers.get(state.leader)
        if endpoint is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no live leader for {owner}")
        return endpoint

    async def _create(self, topic: InternalTopicSpec) -> None:
        """Create `topic` with its configured replication factor once that many brokers are
        alive (COORDINATOR_NOT_AVAILABLE until then); created meanwhile by another broker is
        fine."""
        rf = topic.replication_factor
        try:
            alive = len(await self._admin.live_brokers())
        except KafkaError as exc:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create {topic.name}: {exc.message}") from exc
        if alive < rf:
            brokers = "broker is" if alive == 1 else "brokers are"
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{topic.replication_setting} is {rf} but only {alive} {brokers} alive "
                f"({topic.name} is created once {rf} are)",
            )
        try:
            await self._admin.create_topic(topic.name, topic.num_partitions, rf, topic.config)
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise KafkaError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create {topic.name}: {exc.message}"
                ) from exc
