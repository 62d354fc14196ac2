"""Which broker coordinates a group or a transactional id: the leader of its partition of
`__consumer_offsets` or `__transaction_state`, each internal topic created on first use
with its `offsets.topic.*` / `transaction.state.log.*` settings (as Kafka's
FindCoordinator does)."""

from __future__ import annotations

from collections.abc import Callable

from loglake.config import BrokerConfig
from loglake.coordination.model import BrokerEndpoint
from loglake.errors import ErrorCode, KafkaError
from loglake.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

from ingest_gateway.metadata.admin_manager import AdminManager
from ingest_gateway.metadata.metadata_cache import MetadataCache


class CoordinatorLocator:
    def __init__(
        self,
        config: BrokerConfig,
        cache: MetadataCache,
        admin: AdminManager,
        group_partition: Callable[[str], int],
        transaction_partition: Callable[[str], int],
    ) -> None:
        self._config = config
        self._cache = cache
        self._admin = admin
        self._group_partition = group_partition
        self._transaction_partition = transaction_partition

    async def group_coordinator(self, group_id: str) -> BrokerEndpoint:
        config = self._config
        topic_config = {
            "cleanup.policy": "compact",
            "segment.bytes": config.raw.get("offsets.topic.segment.bytes", "104857600"),
        }
        return await self._leader_of(
            OFFSETS_TOPIC,
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            topic_config,
            self._group_partition(group_id),
            f"the group {group_id!r}",
        )

    async def transaction_coordinator(self, transactional_id: str) -> BrokerEndpoint:
        raw = self._config.raw
        topic_config = {
            "cleanup.policy": "compact",
            "segment.bytes": raw.get("transaction.state.log.segment.bytes", "104857600"),
            "min.insync.replicas": raw.get("transaction.state.log.min.isr", "2"),
        }
        return await self._leader_of(
            TRANSACTION_STATE_TOPIC,
            int(raw.get("transaction.state.log.num.partitions", "50")),
            int(raw.get("transaction.state.log.replication.factor", "3")),
            topic_config,
            self._transaction_partition(transactional_id),
            f"the transactional id {transactional_id!r}",
        )

    async def _leader_of(
        self, topic: str, num_partitions: int, rf: int, config: dict[str, str], partition: int, owner: str
    ) -> BrokerEndpoint:
        image = self._cache.image
        if topic not in image.topics:
            rf = min(rf, len(image.brokers) or 1)
            if "min.insync.replicas" in config:
                config = config | {"min.insync.replicas": str(min(int(config["min.insync.replicas"]), rf))}
            try:
                await self._admin.create_topic(topic, num_partitions, rf, config)
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise KafkaError(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create {topic}: {exc.message}"
                    ) from exc
        image = self._cache.image
        state = image.partition_states.get(topic, {}).get(partition)
        if state is None:
            # Created (maybe by another broker) but not yet in this broker's image.
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic} is being created")
        endpoint = image.brokers.get(state.leader)
        if endpoint is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no live leader for {owner}")
        return endpoint
