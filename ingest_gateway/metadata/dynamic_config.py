"""Dynamic broker configs applied to a running broker, without a restart.

The documents live in the metadata store (/config/brokers/<id> and /config/brokers/<default>);
every broker watches them (ZooKeeper: through Kafka's /config/changes notifications) and,
when the broker-level topic defaults change (`log.retention.ms`, `message.max.bytes`, ...),
re-resolves the config of every log it hosts: topics without an override of a config
take the new default at once, topics with one keep it. The replication throttle rates
(`leader.replication.throttled.rate`, `follower.replication.throttled.rate`) apply at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from loglake.broker_configs import DEFAULT_ENTITY, DynamicBrokerConfig
from loglake.config import LogConfig
from loglake.errors import KafkaError

from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from loglake.config import Listener
    from loglake.coordination.store import MetadataStore
    from loglake.storage.log_manager import LogManager

    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.metadata.metadata_thread import MetadataThread
    from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class DynamicConfigManager:
    """`log_defaults` is the broker's current topic defaults: server.properties' under the
    dynamic layers."""

    def __init__(
        self,
        broker_id: int,
        static: Mapping[str, str],
        log_defaults: LogConfig,
        store: MetadataStore,
        cache: MetadataCache,
        replica_manager: ReplicaManager,
        log_manager: LogManager,
        metadata_thread: MetadataThread,
        advertise: Callable[[tuple[Listener, ...]], None],
    ) -> None:
        """`advertise`: the broker's re-registration under changed advertised listeners
        (a no-op when they are the ones it has)."""
        self._broker_id = broker_id
        self._metadata_thread = metadata_thread
        self._advertise = advertise
        self._store = store
        self._cache = cache
        self._replica_manager = replica_manager
        self._log_manager = log_manager
        self.config = DynamicBrokerConfig(broker_id, static)
        self.log_defaults = log_defaults

    def start(self) -> None:
        """Load the stored dynamic configs and follow their changes (call on the metadata
        thread; they apply on the event loop)."""
        on_loop = self._metadata_thread.on_loop
        self._store.watch_broker_configs(lambda entities: on_loop(self.apply, entities))
        on_loop(self._apply_throttles)  # server.properties may set them too
        on_loop(self.apply, self._store.broker_configs())

    async def write(
        self,
        entity: str,
        change: Callable[[dict[str, str]], dict[str, str]],
        timeout_ms: int = ADMIN_TIMEOUT_MS,
    ) -> dict[str, str]:
        """Store one entity's document ("" is the cluster-wide default) as `change` makes it of
        the stored one, compare-and-set (concurrent changes through other brokers are kept),
        and apply it here (no wait for the watch); REQUEST_TIMED_OUT if the store does not
        answer within `timeout_ms`. Returns the document stored."""
        entity = entity or DEFAULT_ENTITY
        stored, entities = await self._metadata_thread.run(self._store_and_read, entity, change, timeout_ms=timeout_ms)
        self.apply(entities)
        return stored

    def _store_and_read(
        self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        stored = self._store.update_broker_config(entity, change)
        return stored, self._store.broker_configs()

    def apply(self, entities: dict[str, dict[str, str]]) -> None:
        if not self.config.update(entities):
            return
        self._apply_throttles()
        self._apply_log_defaults()
        self._apply_advertised_listeners()

    def _apply_throttles(self) -> None:
        try:
            leader, follower = self.config.throttle_rates()
        except ValueError as exc:
            log.warning("ignoring replication throttle rates that do not parse: %s", exc)
            return
        rm = self._replica_manager
        rm.leader_quota.update_rate(leader)
        rm.follower_quota.update_rate(follower)

    def _apply_advertised_listeners(self) -> None:
        """A changed advertised.listeners: the broker registers its node again, so that the
        controller (watching the nodes' data) sends every broker the new endpoint."""
        try:
            advertised = self.config.advertised()
        except ValueError as exc:
            log.warning("ignoring an advertised.listeners that does not pass the listener checks: %s", exc)
            return
        self._advertise(advertised)

    def _apply_log_defaults(self) -> None:
        try:
            defaults = self.config.log_defaults()
        except KafkaError as exc:
            # Written by something that did not validate it; Kafka too ignores such values.
            log.warning("ignoring dynamic broker configs that do not resolve: %s", exc.message)
            return
        if defaults == self.log_defaults:
            return
        log.info("broker %d: topic defaults changed by dynamic broker configs", self._broker_id)
        self.log_defaults = defaults
        self._replica_manager.log_defaults = defaults
        self._log_manager.default_config = defaults
        topics = self._cache.image.topics
        for (topic, _), partition in self._replica_manager.partitions.items():
            description = topics.get(topic)
            overrides = description.config if description is not None else {}
            partition.log.update_config(LogConfig.from_properties(overrides, defaults))
