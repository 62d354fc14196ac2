"""Dynamic broker configs applied to a running broker, without a restart.

The documents live in the metadata store (/config/brokers/<id> and /config/brokers/<default>);
every broker watches them (ZooKeeper: through Kafka's /config/changes notifications) and,
when the broker-level topic defaults change (`log.retention.ms`, `message.max.bytes`, ...),
re-resolves the config of every log it hosts: topics without an override of a config
take the new default at once, topics with one keep it. The replication throttle rates
(`leader.replication.throttled.rate`, `follower.replication.throttled.rate`) apply at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from loglake.broker_configs import DEFAULT_ENTITY, DynamicBrokerConfig
from loglake.config import LogConfig
from loglake.errors import KafkaError

if TYPE_CHECKING:
    from ingest_gateway.server.broker import Broker

log = logging.getLogger(__name__)


class DynamicConfigManager:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.config = DynamicBrokerConfig(broker.config.broker_id, broker.config.raw)

    def start(self) -> None:
        """Load the stored dynamic configs and follow their changes (call on the event loop)."""
        loop = asyncio.get_running_loop()
        self._broker.store.watch_broker_configs(lambda entities: loop.call_soon_threadsafe(self.apply, entities))
        self._apply_throttles()  # server.properties may set them too
        self.reload()

    def reload(self) -> None:
        """Apply what the store holds now (after this broker changed it: no wait for the watch)."""
        self.apply(self._broker.store.broker_configs())

    def write(self, entity: str, config: dict[str, str]) -> None:
        """Store one entity's document ("" is the cluster-wide default) and apply it here."""
        self._broker.store.set_broker_config(entity or DEFAULT_ENTITY, config)
        self.reload()

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
        rm = self._broker.replica_manager
        rm.leader_quota.update_rate(leader)
        rm.follower_quota.update_rate(follower)

    def _apply_advertised_listeners(self) -> None:
        """A changed advertised.listeners: register this broker's node again, so that the
        controller (watching the nodes' data) sends every broker the new endpoint."""
        try:
            advertised = self.config.advertised()
        except ValueError as exc:
            log.warning("ignoring an advertised.listeners that does not pass the listener checks: %s", exc)
            return
        broker = self._broker
        if advertised == broker.config.advertised:
            return
        log.info("broker %d: advertised.listeners changed to %s", broker.config.broker_id, advertised)
        broker.config = replace(broker.config, advertised_listeners=advertised)
        broker.store.register_broker(broker.endpoint)

    def _apply_log_defaults(self) -> None:
        try:
            defaults = self.config.log_defaults()
        except KafkaError as exc:
            # Written by something that did not validate it; Kafka too ignores such values.
            log.warning("ignoring dynamic broker configs that do not resolve: %s", exc.message)
            return
        broker = self._broker
        if defaults == broker.config.log_defaults:
            return
        log.info("broker %d: topic defaults changed by dynamic broker configs", broker.config.broker_id)
        broker.config = replace(broker.config, log_defaults=defaults)
        broker.replica_manager.log_defaults = defaults
        broker.log_manager.default_config = defaults
        for (topic, _), partition in broker.replica_manager.partitions.items():
            description = broker.image.topics.get(topic)
            overrides = description.config if description is not None else {}
            partition.log.update_config(LogConfig.from_properties(overrides, defaults))
