"""The broker: storage, partitions, the controller and the listeners in one process.

Without `zookeeper.connect` it runs embedded: the same controller code over a metadata
file in the log dir, electing itself, so a single node needs no ZooKeeper. With it, the
broker registers in ZooKeeper, competes for /controller, and when elected sends its
decisions to the other brokers over the Kafka protocol (ControllerChannelManager).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Protocol

import uvicorn
from fastapi import FastAPI
from loglake.cluster.metadata_image import MetadataImage
from loglake.config import BrokerConfig, Listener
from loglake.coordination.controller import Controller
from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.model import BrokerEndpoint, PartitionState
from loglake.coordination.producer_ids import ProducerIdManager
from loglake.coordination.store import MetadataStore, instrumented
from loglake.coordination.zookeeper import ZooKeeperMetadataStore
from loglake.groups import GroupConfig, GroupCoordinator
from loglake.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from loglake.maintenance.cleaner_manager import LogCleanerManager
from loglake.maintenance.log_cleaner import CleanerConfig, LogCleaner
from loglake.security.credential_cache import CredentialCache
from loglake.security.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotaManager
from loglake.storage.log import Log
from loglake.storage.log_manager import LogManager
from loglake.storage.meta_properties import MetaProperties, new_cluster_id
from loglake.transactions import TransactionConfig, TransactionCoordinator

from ingest_gateway.apis.acl_apis import AclApis
from ingest_gateway.apis.admin_apis import AdminApis
from ingest_gateway.apis.authorization import RequestAuthorization, authorizer_from_config
from ingest_gateway.apis.client_entity_apis import ClientEntityApis
from ingest_gateway.apis.config_apis import ConfigApis
from ingest_gateway.apis.controller_apis import ControllerApis
from ingest_gateway.apis.fetch_apis import FetchApis
from ingest_gateway.apis.group_apis import GroupApis
from ingest_gateway.apis.kafka_apis import KafkaApis
from ingest_gateway.apis.log_dir_apis import LogDirApis
from ingest_gateway.apis.request_router import RequestRouter
from ingest_gateway.apis.txn_apis import TxnApis
from ingest_gateway.coordinators.coordinator_locator import CoordinatorLocator
from ingest_gateway.coordinators.internal_topic_log import ReplicatedTopicLog
from ingest_gateway.coordinators.transaction_markers import BrokerMarkerChannel, MarkerWriter
from ingest_gateway.http.app import HttpServices, create_app
from ingest_gateway.http.consumers import ConsumerManager
from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS, AdminManager
from ingest_gateway.metadata.cluster_status import cluster_status
from ingest_gateway.metadata.controller_channel import ControllerChannelManager, LocalBrokerChannel
from ingest_gateway.metadata.dynamic_config import DynamicConfigManager
from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.metadata.metadata_thread import MetadataThread
from ingest_gateway.network.authentication_threads import AuthenticationThreads
from ingest_gateway.network.kafka_server import KafkaServer
from ingest_gateway.observability.metrics import BrokerMetrics, MetricsConfig
from ingest_gateway.replica.replica_alter_log_dirs import ReplicaAlterLogDirsManager
from ingest_gateway.replica.replica_fetcher import ReplicaFetcherConfig
from ingest_gateway.replica.replica_manager import ReplicaManager
from ingest_gateway.server.broker_collector import BrokerCollector
from ingest_gateway.server.listener_security import (
    http_authenticator,
    http_tls_options,
    inter_broker_security,
    listener_security,
)

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT_INTERVAL_S = 5.0


class InternalTopicCoordinator(Protocol):
    """A coordinator whose state lives in an internal topic's partitions."""

    async def load_partition(self, partition: int, leader_epoch: int) -> None: ...

    def unload_partition(self, partition: int) -> None: ...


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.clustered = bool(config.zookeeper_connect)
        self.store: MetadataStore
        if self.clustered:
            self.store = ZooKeeperMetadataStore(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        else:
            self.store = EmbeddedMetadataStore(config.log_dirs[0])
        self.store = instrumented(self.store, config.broker_id)
        # Every store call once the event loop runs: the loop never waits on ZooKeeper.
        self.metadata_thread = MetadataThread()
        # Credential checks of SASL and HTTP Basic (a store read and PBKDF2), bounded in time.
        self.authentication_threads = AuthenticationThreads(ADMIN_TIMEOUT_MS)
        # SCRAM credentials, kept current by the store's config change notifications.
        self.credentials = CredentialCache(self.store.user_credentials)
        # One id for the whole cluster (/cluster/id), as Kafka on ZooKeeper: the first broker
        # sets it; log dirs stamped with another cluster's id refuse to start.
        try:
            proposed = MetaProperties.stored_cluster_id(config.log_dirs) or new_cluster_id()
            cluster_id = self.store.get_or_create_cluster_id(proposed)
            self.log_manager = LogManager(list(config.log_dirs), config.log_defaults, config.broker_id, cluster_id)
        except BaseException:
            self.store.close()
            raise
        self.metadata_cache = MetadataCache(self.store, cluster_id, self.metadata_thread)
        # How this broker's clients reach the other brokers (the inter-broker listener).
        self.inter_broker_security = inter_broker_security(config)
        self.replica_manager = ReplicaManager(
            config.broker_id,
            self.log_manager,
            config.log_defaults,
            isr_writer=self._write_isr,
            endpoint_of=self._kafka_endpoint_of,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            fetcher_config=ReplicaFetcherConfig.from_properties(config.raw),
            inter_broker_security=self.inter_broker_security,
            partition_exists=self._partition_exists,
        )
        self.dynamic_config = DynamicConfigManager(
            config.broker_id,
            config.raw,
            config.log_defaults,
            self.store,
            self.metadata_cache,
            self.replica_manager,
            self.log_manager,
            self.metadata_thread,
            self._advertise,
        )
        self.channel: ControllerChannelManager | LocalBrokerChannel = (
            ControllerChannelManager(
                config.broker_id,
                self.store,
                self.replica_manager,
                self.metadata_cache,
                self.inter_broker_security,
                self.metadata_thread,
            )
            if self.clustered
            else LocalBrokerChannel(config.broker_id, self.replica_manager, self.metadata_cache, self.metadata_thread)
        )
        self.controller = Controller(
            self.store, config.broker_id, self.channel, lambda: self.dynamic_config.log_defaults
        )
        self.admin = AdminManager(
            config, self.store, self.controller, self.metadata_cache, self.inter_broker_security, self.metadata_thread
        )
        self.producer_ids = ProducerIdManager(self.store, config.broker_id)
        group_config = GroupConfig.from_properties(config.raw)
        self.group_coordinator = GroupCoordinator(
            group_config,
            ReplicatedTopicLog(self.replica_manager, OFFSETS_TOPIC),
            # The image is replaced whole on each update: read the current one every time.
            topics=lambda: self.image.topic_snapshot(),
        )
        self.marker_writer = MarkerWriter(self.replica_manager, self.group_coordinator)
        self.marker_channel = BrokerMarkerChannel(
            config.broker_id, self.metadata_cache, self.inter_broker_security, self.marker_writer
        )
        self.transaction_coordinator = TransactionCoordinator(
            TransactionConfig.from_properties(config.raw),
            ReplicatedTopicLog(self.replica_manager, TRANSACTION_STATE_TOPIC),
            self.marker_channel,
            self.producer_ids.generate_producer_id,
        )
        self.log_cleaner = LogCleaner(
            CleanerConfig.from_properties(config.raw), LogCleanerManager(self.log_manager, self._high_watermark_of)
        )
        self.replica_manager.leadership_listeners.append(self._on_leadership_change)
        # This broker's own ISR changes as leader; the controller tells the other brokers.
        self.replica_manager.isr_change_listeners.append(self.metadata_cache.apply_partition_state)
        self.replica_manager.log_dir_failure_listeners.append(self._on_partitions_offline)
        metrics_config = MetricsConfig.from_properties(config.raw)
        self.metrics = (
            BrokerMetrics(
                metrics_config,
                BrokerCollector(
                    self.replica_manager,
                    self.metadata_cache,
                    self.controller,
                    self.group_coordinator,
                    self.transaction_coordinator,
                    self.log_manager,
                    self.log_cleaner.counters,
                    metrics_config.per_partition_enabled,
                ),
            )
            if metrics_config.enabled
            else None
        )
        if self.metrics is not None:
            self.replica_manager.metrics = self.metrics
            self.log_manager.flush_observer = self.metrics.observe_flush
        self._request_logging = metrics_config.request_logging
        self.authorization = RequestAuthorization(authorizer_from_config(config.raw))
        # Client quotas (producer_byte_rate, consumer_byte_rate of /config/users, /config/clients).
        self.produce_quotas = ClientQuotaManager(PRODUCER_BYTE_RATE)
        self.fetch_quotas = ClientQuotaManager(CONSUMER_BYTE_RATE)
        self.consumer_manager = ConsumerManager(
            self.metadata_cache, self.replica_manager, self.group_coordinator, assignors=group_config.consumer.assignors
        )
        self.coordinators = CoordinatorLocator(
            config,
            self.metadata_cache,
            self.admin,
            self.group_coordinator.partition_for,
            self.transaction_coordinator.partition_for,
        )
        # Moves replicas between log dirs (AlterReplicaLogDirs); started with the event loop.
        self._log_dir_mover = ReplicaAlterLogDirsManager(self.replica_manager)
        self.requests = self._serve_apis()
        self._background: set[asyncio.Task] = set()
        self._servers: list[uvicorn.Server] = []
        self._kafka_servers: list[KafkaServer] = []
        self._checkpointer: asyncio.Task | None = None
        self._checkpoint_write: asyncio.Future[None] | None = None
        # The coordinator of each internal topic: it loads a partition this broker comes
        # to lead and unloads one it stops leading.
        self._internal_topic_coordinators: dict[str, InternalTopicCoordinator] = {
            OFFSETS_TOPIC: self.group_coordinator,
            TRANSACTION_STATE_TOPIC: self.transaction_coordinator,
        }
        # Internal topic leadership changes seen before the event loop ran (startup).
        self._pending_loads: list[tuple[str, int]] = []
        self._metadata_loaded = False
        self._stopped = asyncio.Event()
        # Set by a signal, or by the broker itself when it can store nothing any more.
        self.stop_requested = asyncio.Event()
        self.fatal_error: str | None = None

    def _serve_apis(self) -> RequestRouter:
        """The Kafka APIs, each module given the collaborators it uses."""
        config, cache, auth, rm = self.config, self.metadata_cache, self.authorization, self.replica_manager
        router = RequestRouter(auth, self.metrics, config.inter_broker_listener_name)
        self.txn_apis = TxnApis(
            self.transaction_coordinator, self.marker_writer, cache, rm, self.group_coordinator, auth
        )
        self.acl_apis = AclApis(auth, self.store, self.metadata_thread)
        api_modules: list[object] = [
            KafkaApis(
                config=config,
                cache=cache,
                admin=self.admin,
                coordinators=self.coordinators,
                replica_manager=rm,
                log_manager=self.log_manager,
                producer_ids=self.producer_ids,
                authorization=auth,
                produce_quotas=self.produce_quotas,
                dynamic_config=self.dynamic_config,
                init_transactional_producer=self.txn_apis.init_producer_id,
            ),
            FetchApis(config, cache, rm, auth, self.fetch_quotas, self.metrics),
            self.txn_apis,
            self.acl_apis,
            ConfigApis(config, cache, self.admin, self.dynamic_config, auth),
            AdminApis(self.admin, cache, auth),
            ClientEntityApis(self.store, auth, self.metadata_thread),
            GroupApis(self.group_coordinator, auth, partition_exists=self._partition_exists),
            LogDirApis(rm, self._log_dir_mover),
        ]
        if self.clustered:
            api_modules.append(
                ControllerApis(self.store, rm, cache, self.metadata_thread, config.inter_broker_listener_name)
            )
        for module in api_modules:
            router.register_module(module)
        return router

    def _partition_exists(self, topic: str, partition: int) -> bool:
        """Whether the cluster has this partition (offset commits to others are refused; a
        replica manager that does not host it answers NOT_LEADER_OR_FOLLOWER)."""
        description = self.image.topics.get(topic)
        return description is not None and partition in description.assignment

    def _advertise(self, advertised: tuple[Listener, ...]) -> None:
        """Register this broker again with changed advertised listeners (on the event loop,
        where dynamic configs apply; the store write goes to the metadata thread)."""
        if advertised == self.config.advertised:
            return
        log.info("broker %d: advertised.listeners changed to %s", self.config.broker_id, advertised)
        self.config = replace(self.config, advertised_listeners=advertised)
        self.metadata_thread.submit(self.store.register_broker, self.endpoint)

    @property
    def endpoint(self) -> BrokerEndpoint:
        config = self.config
        listeners = tuple((a.scheme, config.protocol_map[a.scheme].value, a.host, a.port) for a in config.advertised)
        http = config.http_listeners[0]
        (host, port) = next((h, p) for n, _, h, p in listeners if n == config.inter_broker_listener_name)
        return BrokerEndpoint(config.broker_id, host, port, http.host, http.port, config.rack, listeners=listeners)

    # Lifecycle ---------------------------------------------------------------------------

    def startup(self) -> None:
        """Register, become controller (embedded) and take up the assigned partitions.

        In a cluster, the controller election and the partitions come through ZooKeeper's
        watches once the event loop runs (`_watch_cluster`)."""
        self._delete_stray_logs()
        self.store.register_broker(self.endpoint)
        self.producer_ids.prefetch()
        if not self.clustered:
            self.controller.startup()

    def _delete_stray_logs(self) -> None:
        """Logs of topics deleted while this broker was down: nobody else will remove them."""
        topics = self.store.topics()
        for log_ in self.log_manager.all_logs():
            if log_.topic not in topics:
                log.info("deleting %s: its topic no longer exists", log_.dir.name)
                self.log_manager.delete_log(log_.topic, log_.partition)

    def _watch_cluster(self) -> None:
        """Route ZooKeeper events (on the store's event thread) to the metadata thread, where
        the controller works; its decisions for this broker hop on to the event loop."""
        on_thread = self.metadata_thread.submit
        self.store.watch_controller(lambda holder: on_thread(self._on_controller_change, holder))
        self.store.watch_brokers(lambda live: on_thread(self.controller.on_brokers_changed, live))
        self.store.watch_topics(lambda names: on_thread(self.controller.on_topics_changed, names))
        self.store.watch_topic_deletions(lambda names: on_thread(self.controller.on_topic_deletions, names))
        self.store.watch_log_dir_failures(lambda token: on_thread(self.controller.on_log_dir_failures, token))
        self.store.watch_reassignment_request(lambda token: on_thread(self.controller.on_reassignment_request, token))
        self.store.on_session_expired(lambda: on_thread(self._on_session_expired))

    def _on_controller_change(self, holder: int | None) -> None:
        if holder is None:
            if self.controller.startup():
                log.info("broker %d is the controller (epoch %s)", self.config.broker_id, self.controller.epoch)
        elif holder != self.config.broker_id and self.controller.is_active:
            log.warning("broker %d is no longer the controller (broker %d is)", self.config.broker_id, holder)
            self.controller.resign()
        if not self._metadata_loaded:
            # Once, at start-up: after this the controllers' UpdateMetadata requests keep it.
            self._metadata_loaded = True
            self.metadata_cache.load()

    def _on_session_expired(self) -> None:
        # Our ephemeral nodes are gone: whatever we decided as controller is void.
        if self.controller.is_active:
            log.warning("ZooKeeper session expired: broker %d resigns as controller", self.config.broker_id)
            self.controller.resign()

    async def _preferred_leader_loop(self) -> None:
        raw = self.config.raw
        if raw.get("auto.leader.rebalance.enable", "true").lower() != "true":
            return
        interval = float(raw.get("leader.imbalance.check.interval.seconds", "300"))
        while True:
            await asyncio.sleep(interval)
            await self.metadata_thread.run(self.controller.elect_preferred_leaders)

    async def start(self) -> None:
        """Start up, then serve the Kafka protocol on every `listeners` address and HTTP on
        every `http.listeners` address."""
        self.metadata_thread.bind(asyncio.get_running_loop())
        await self.metadata_thread.run(self.startup)
        await self.metadata_thread.run(self._watch_store)
        self._log_dir_mover.start()
        if self.clustered:
            self.track_background(asyncio.create_task(self._preferred_leader_loop()))
        for topic, p in self._pending_loads:
            self._load_internal_partition(self._internal_topic_coordinators[topic], topic, p)
        self._pending_loads.clear()
        await self.group_coordinator.start()
        await self.transaction_coordinator.start()
        self.replica_manager.start()
        self.log_manager.startup(
            self._deletion_bounds_of,
            self.config.log_retention_check_interval_ms,
            self.config.log_flush_scheduler_interval_ms,
        )
        for listener in self.config.listeners:
            kafka_server = KafkaServer(
                listener.host,
                listener.port,
                self.requests.handle,
                self.config.socket_request_max_bytes,
                self.metrics,
                listener_security(self.config, listener, self.credentials, self.authentication_threads),
            )
            await kafka_server.start()
            self._kafka_servers.append(kafka_server)

        app = self.create_http_app()
        for listener in self.config.http_listeners:
            http_server = uvicorn.Server(
                uvicorn.Config(
                    app,
                    host=listener.host,
                    port=listener.port,
                    **http_tls_options(self.config, listener),
                    # request.logging.enable: uvicorn's access log, one line per HTTP request.
                    log_level="info" if self._request_logging else "warning",
                    access_log=self._request_logging,
                    log_config=None,  # the broker's logging (text or JSON) formats uvicorn's lines too
                    lifespan="off",
                )
            )
            self._servers.append(http_server)
            self.track_background(asyncio.create_task(http_server.serve()))
        self._checkpointer = asyncio.create_task(self._checkpoint_loop())
        self.log_cleaner.startup()
        for http_server in self._servers:
            while not http_server.started:
                await asyncio.sleep(0.01)
        log.info(
            "broker %d serving Kafka on %s and HTTP on %s",
            self.config.broker_id,
            self.config.listeners,
            self.config.http_listeners,
        )

    def _watch_store(self) -> None:
        """Follow the configs, quotas, ACLs and (in a cluster) the controller's events; their
        first values are read here, on the metadata thread."""
        on_loop = self.metadata_thread.on_loop
        self.dynamic_config.start()

        def apply_quotas(configs: dict[str, dict[str, str]]) -> None:
            self.produce_quotas.update(configs)
            self.fetch_quotas.update(configs)

        def apply_entity_configs(configs: dict[str, dict[str, str]]) -> None:
            self.credentials.update(configs)  # at once: authentications read it on their threads
            on_loop(apply_quotas, configs)

        self.store.watch_entity_configs(apply_entity_configs)
        authorizer = self.authorization.authorizer
        if authorizer is not None:
            self.store.watch_acls(lambda acls: on_loop(authorizer.replace_acls, acls))
        on_thread = self.metadata_thread.submit
        self.store.watch_isr_changes(lambda token: on_thread(self.controller.on_isr_changes, token))
        if self.clustered:
            self._watch_cluster()

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(HIGH_WATERMARK_CHECKPOINT_INTERVAL_S)
            # The HWs are read here, where the partitions live; the files are written on a
            # thread: each takes two fsyncs (1-10 ms here), which on the event loop stalled
            # every request in flight every 5 s.
            write = asyncio.ensure_future(
                asyncio.to_thread(self._write_checkpoints, self.replica_manager.high_watermarks_by_dir())
            )
            self._checkpoint_write = write
            await asyncio.shield(write)  # stop() waits for a write under way: its values are older

    def _write_checkpoints(self, high_watermarks: dict[Path, dict[tuple[str, int], int]]) -> None:
        self.replica_manager.write_high_watermarks(high_watermarks)
        self.log_manager.checkpoint_recovery_points()
        # Followers move their log start as their leader reports it, not by retention.
        self.log_manager.checkpoint_log_start_offsets()

    def track_background(self, task: asyncio.Task) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        """Stop serving, then flush logs and write every checkpoint (a clean shutdown)."""
        if self._checkpointer is not None:
            self._checkpointer.cancel()  # shutdown() writes the checkpoints itself
        if self._checkpoint_write is not None:
            await asyncio.wait((self._checkpoint_write,))
        for server in self._servers:
            server.should_exit = True
        for kafka_server in self._kafka_servers:
            await kafka_server.stop()
        await self.consumer_manager.shutdown()
        await self.group_coordinator.stop()
        await self.transaction_coordinator.stop()
        await self.marker_channel.close()
        await self.txn_apis.close()  # its connections to other transaction coordinators
        await self._log_dir_mover.stop()
        await self.replica_manager.stop()
        await self.channel.close()
        await asyncio.sleep(0)
        for task in list(self._background):
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5)
                except (TimeoutError, asyncio.CancelledError):
                    task.cancel()
        self._shutdown_local()
        # Closing a ZooKeeper session is a round trip (as long as ZooKeeper is slow): off the loop.
        await asyncio.to_thread(self.store.close)
        self._stopped.set()

    def shutdown(self) -> None:
        """Stop a broker that is not serving (no event loop runs it: a test, a failed start)."""
        self._shutdown_local()
        self.store.close()

    def _shutdown_local(self) -> None:
        """Flush and close the logs, write the checkpoints, stop the threads."""
        self.log_cleaner.shutdown()
        self.replica_manager.shutdown()
        self.log_manager.shutdown()
        self.metadata_thread.shutdown()
        self.authentication_threads.close()
        self.producer_ids.close()

    def _on_partitions_offline(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions went offline with a log dir: tell the controller (Kafka's
        /log_dir_event_notification), which moves their leadership away."""
        if self.clustered:
            self.track_background(asyncio.create_task(self._notify_log_dir_failure(partitions)))
            return
        self.store.notify_log_dir_failure(self.config.broker_id, partitions)
        # Not from within the LeaderAndIsr that may have found them offline.
        asyncio.get_running_loop().call_soon(self.controller.on_log_dir_failures)

    async def _notify_log_dir_failure(self, partitions: list[tuple[str, int]]) -> None:
        try:
            await asyncio.to_thread(self.store.notify_log_dir_failure, self.config.broker_id, partitions)
        except Exception:
            log.exception("broker %d could not tell the controller of its offline partitions", self.config.broker_id)
        if not self.log_manager.live_dirs:
            # Kafka's rule: a broker that can store nothing leaves the cluster, whose other
            # brokers lead its partitions now. (A standalone broker stays up to answer.)
            self.fatal_error = f"every log dir is offline: {self.log_manager.failure_channel.offline_dirs()}"
            log.critical("broker %d is shutting down: %s", self.config.broker_id, self.fatal_error)
            self.stop_requested.set()

    def _write_isr(self, topic: str, partition: int, state: PartitionState):
        """A leader's ISR change, compare-and-set in the store (off the event loop for ZooKeeper)."""
        return asyncio.to_thread(self._write_isr_and_notify, topic, partition, state)

    def _write_isr_and_notify(self, topic: str, partition: int, state: PartitionState) -> PartitionState | None:
        stored = self.store.update_partition_state(topic, partition, state, state.version)
        if stored is not None:
            # As Kafka's leaders do: the controller keeps its context current, tells the
            # other brokers, and completes reassignments on ISR changes.
            self.store.notify_isr_change([(topic, partition)])
        return stored

    def _deletion_bounds_of(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(high watermark, tiered offset) for retention; the tiered offset is read from the
        metadata store (where the tier job records it) only for topics with remote storage."""
        hosted = self.replica_manager.partitions.get((topic, partition))
        if hosted is None:
            return None
        tiered = 0
        if hosted.log.config.remote_storage_enable:
            tiered = self.store.tiered_offset(topic, partition) or 0
        return hosted.high_watermark, tiered

    def _high_watermark_of(self, log_: Log) -> int | None:
        """What the cleaner may clean up to; None for a log this broker does not host as a replica."""
        partition = self.replica_manager.partitions.get((log_.topic, log_.partition))
        return None if partition is None or partition.log is not log_ else partition.high_watermark

    def _kafka_endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        # The image only (the store would block the loop): a broker not in it yet is a
        # connection error the fetcher retries, and UpdateMetadata follows every LeaderAndIsr.
        endpoint = self.image.brokers.get(broker_id)
        return None if endpoint is None else endpoint.kafka_endpoint(self.config.inter_broker_listener_name)

    def _on_leadership_change(self, topic: str, partition: int, is_leader: bool) -> None:
        coordinator = self._internal_topic_coordinators.get(topic)
        if coordinator is None:
            return
        if not is_leader:
            coordinator.unload_partition(partition)
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._pending_loads.append((topic, partition))
            return
        self._load_internal_partition(coordinator, topic, partition)

    def _load_internal_partition(self, coordinator: InternalTopicCoordinator, topic: str, partition: int) -> None:
        # The leader epoch is the coordinator epoch the transaction markers carry.
        hosted = self.replica_manager.partitions.get((topic, partition))
        if hosted is None or not hosted.is_leader:
            return
        self.track_background(asyncio.create_task(coordinator.load_partition(partition, hosted.leader_epoch)))

    @property
    def image(self) -> MetadataImage:
        """The current metadata image (read it once per request: it is replaced whole)."""
        return self.metadata_cache.image

    def create_http_app(self) -> FastAPI:
        """The HTTP API over this broker's components."""
        return create_app(
            HttpServices(
                config=self.config,
                store=self.store,
                authorization=self.authorization,
                authenticator=http_authenticator(self.config, self.credentials, self.authentication_threads),
                cache=self.metadata_cache,
                admin=self.admin,
                replica_manager=self.replica_manager,
                log_manager=self.log_manager,
                log_cleaner=self.log_cleaner,
                log_defaults=lambda: self.dynamic_config.log_defaults,
                group_coordinator=self.group_coordinator,
                consumers=self.consumer_manager,
                coordinators=self.coordinators,
                transaction_coordinator=self.transaction_coordinator,
                marker_writer=self.marker_writer,
                dynamic_config=self.dynamic_config,
                acl_apis=self.acl_apis,
                metrics=self.metrics,
                metadata_thread=self.metadata_thread,
                cluster_status=lambda: self.metadata_thread.run(partial(cluster_status, self.store)),
                in_background=self.track_background,
            )
        )
