"""The cluster metadata store: ZooKeeper (through kazoo), with Kafka's (<= 2.x) znodes.

    /brokers/ids/<id>                          ephemeral; the broker's endpoints
    /brokers/topics/<t>                        replica assignment and topic id
    /brokers/topics/<t>/partitions/<p>/state   leader, leader epoch, ISR (CAS on the znode version)
    /config/topics/<t>                         topic config overrides
    /config/brokers/<id>, /config/brokers/<default>   dynamic broker configs
    /config/users/<user>                       a user's SCRAM credentials
    /config/changes/config_change_<n>          sequential notifications of config changes
    /controller, /controller_epoch             the elected controller (ephemeral) and its epoch
    /admin/delete_topics/<t>                   deletion requests, completed by the controller
    /latest_producer_id_block                  the last reserved block of producer ids
    /cluster/id                                the cluster id, set once by the first broker

The documents are Kafka's JSON, so Kafka's tools (zookeeper-shell, kafka-topics
--zookeeper) read a loglake cluster; brokers add "http_endpoint" to their registration.

Threads. kazoo runs its own connection and callback threads; this store adds one event
thread, "loglake-zk-events", on which every watch callback (after the first call, made
from within `watch_*`), every `on_session_expired` callback and the session recovery
run, one at a time and in order. ZooKeeper watches are one-shot and kazoo drops them
whenever the connection is lost, so the store re-reads (and so re-arms) every watch on
each reconnection; callbacks only hear of values that changed.

Sessions. When the session expires (ZooKeeper forgot it: the broker was cut off or
paused for longer than the session timeout), kazoo reports LOST and opens a new session.
The store then calls the `on_session_expired` callbacks, re-creates this broker's
/brokers/ids/<id> (waiting, through a watch, for the old session's node to disappear if
ZooKeeper has not removed it yet) and re-reads every watch.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Self
from urllib.parse import urlsplit

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import KazooRetry

from loglake.coordination.model import BrokerEndpoint, LogDirFailure, PartitionState, TopicDescription
from loglake.coordination.store import MetadataStore
from loglake.errors import ErrorCode, KafkaError
from loglake.security.acls import RESOURCE_NAMES, AccessControlEntry, PatternType, ResourcePattern

log = logging.getLogger(__name__)

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_ROOT = "/config"
CONFIG_USERS = "/config/users"
# ACLs as Kafka's AclAuthorizer keeps them: literal patterns, prefixed ones, and the change
# notifications brokers watch.
ACL_LITERAL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
CONFIG_CHANGES = "/config/changes"
# Operations in one ZooKeeper multi (its requests must stay under jute.maxbuffer, 1 MB).
MULTI_OP_SIZE = 500
CONFIG_CHANGE_PREFIX = "config_change_"
# Notifications older than this are purged, as Kafka's brokers purge them (changeExpirationMs).
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGES = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENTS = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
# Kafka's LogDirEventNotificationHandler.LogDirFailureEvent.
LOG_DIR_FAILURE_EVENT = 1
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
PERSISTENT_ROOTS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, DELETE_TOPICS)

_CONNECTION_ERRORS = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


def _dumps(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _partitions_of(doc: dict) -> list[tuple[str, int]]:
    return [(str(e["topic"]), int(e["partition"])) for e in doc.get("partitions", [])]


def topic_path(name: str) -> str:
    return f"{TOPICS}/{name}"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def tiered_offset_path(topic: str, partition: int) -> str:
    """loglake's own znode beside the partition's state, so deleting the topic removes it."""
    return f"{partition_path(topic, partition)}/loglake_tiered_offset"


# Documents -------------------------------------------------------------------------------------


def broker_document(endpoint: BrokerEndpoint) -> bytes:
    return _dumps(
        {
            "version": 5,
            "host": endpoint.host,
            "port": endpoint.port,
            "jmx_port": -1,
            "timestamp": _now_ms(),
            "endpoints": [f"{name}://{_host_port(host, port)}" for name, _, host, port in _listeners(endpoint)],
            "listener_security_protocol_map": {name: protocol for name, protocol, _, _ in _listeners(endpoint)},
            "rack": endpoint.rack,
            "http_endpoint": f"http://{_host_port(endpoint.http_host, endpoint.http_port)}",
        }
    )


def _listeners(endpoint: BrokerEndpoint) -> tuple[tuple[str, str, str, int], ...]:
    return endpoint.listeners or (("PLAINTEXT", "PLAINTEXT", endpoint.host, endpoint.port),)


def parse_broker(broker_id: int, raw: bytes) -> BrokerEndpoint:
    doc = json.loads(raw)
    protocols = doc.get("listener_security_protocol_map") or {}
    listeners = []
    for spec in doc.get("endpoints") or ():
        # Not urlsplit: listener names such as SASL_SSL are not valid URL schemes.
        name, _, address = spec.partition("://")
        host, _, port = address.rpartition(":")
        listeners.append((name, protocols.get(name, name), host.strip("[]"), int(port) if port.isdigit() else -1))
    # host and port: the inter-broker listener's endpoint (brokers share that listener's name).
    host, port = doc.get("host"), doc.get("port", -1)
    if not host and listeners:
        _, _, host, port = listeners[0]
    http_host, http_port = host or "", -1
    if doc.get("http_endpoint"):
        url = urlsplit(doc["http_endpoint"])
        http_host, http_port = url.hostname or http_host, url.port or -1
    return BrokerEndpoint(
        broker_id, host or "", int(port), http_host, int(http_port), doc.get("rack"), listeners=tuple(listeners)
    )


def topic_document(topic: TopicDescription) -> bytes:
    return _dumps(
        {
            "version": 2,
            "partitions": {str(p): list(r) for p, r in sorted(topic.assignment.items())},
            "topic_id": topic.topic_id,
            "adding_replicas": {str(p): list(r) for p, r in sorted(topic.adding.items()) if r},
            "removing_replicas": {str(p): list(r) for p, r in sorted(topic.removing.items()) if r},
        }
    )


def config_document(config: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(config)})


def state_document(state: PartitionState) -> bytes:
    return _dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def parse_state(raw: bytes, version: int) -> PartitionState:
    doc = json.loads(raw)
    return PartitionState(doc["leader"], doc["leader_epoch"], tuple(doc["isr"]), doc["controller_epoch"], version)


# Watches ---------------------------------------------------------------------------------------

_UNSET = object()


class _Watch:
    """A callback on the children or data of one znode, re-armed on every read."""

    def __init__(
        self,
        store: ZooKeeperMetadataStore,
        read: Callable[[Callable[[WatchedEvent], None]], Any],
        deliver: Callable[[Any], Any],
        callback: Callable[[Any], None],
    ) -> None:
        self._store = store
        self._read = read
        self._deliver = deliver
        self._callback = callback
        self._lock = threading.Lock()
        self._last: Any = _UNSET

    def on_event(self, event: WatchedEvent) -> None:
        """kazoo's callback thread: hand the re-read to the store's event thread.

        Events of type NONE are connection state changes (kazoo drops its watches when
        the connection goes); the store re-reads every watch once it is connected again.
        """
        if event.type != EventType.NONE:
            self._store._submit(self.refresh)

    def refresh(self) -> None:
        with self._lock:
            if self._store._closed:
                return
            value = self._read(self.on_event)
            if value == self._last:
                return
            self._last = value
            self._callback(self._deliver(value))


class ZooKeeperMetadataStore(MetadataStore):
    """`MetadataStore` over ZooKeeper. `connect` is a zookeeper.connect string, optionally
    with a chroot ("host:2181,host2:2181/loglake"), created if missing."""

    def __init__(self, connect: str, session_timeout_ms: int = 18000, connection_timeout_s: float = 30.0) -> None:
        self.connect = connect
        self.session_timeout_s = session_timeout_ms / 1000.0
        # Operations retry through connection loss for up to two session timeouts; a
        # KazooRetry counts attempts in itself, so every call gets a copy (see _retry).
        self._command_retry = KazooRetry(
            max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, deadline=max(2 * self.session_timeout_s, 10.0)
        )
        self._client = KazooClient(
            hosts=connect,
            timeout=self.session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=self._command_retry.copy(),
        )
        self._closed = False
        self._session_lost = False
        self._watches: list[_Watch] = []
        self._watches_lock = threading.Lock()
        self._expiry_callbacks: list[Callable[[], None]] = []
        # This broker's registration, re-created after a session expiry.
        self._registration: BrokerEndpoint | None = None
        self._registration_lock = threading.RLock()
        self._registered = threading.Event()

        self._events: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._event_thread = threading.Thread(target=self._run_events, name="loglake-zk-events", daemon=True)
        self._event_thread.start()
        self._client.add_listener(self._on_state)
        try:
            with warnings.catch_warnings():
                # kazoo warns when the chroot does not exist yet; it is created just below.
                warnings.simplefilter("ignore", UserWarning)
                self._client.start(timeout=connection_timeout_s)
            for path in ("/", *PERSISTENT_ROOTS):  # "/" is the chroot, if any
                self._retry(self._client.ensure_path, path)
        except BaseException:
            self.close()
            raise

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for tests and tools)."""
        return self._client

    def _retry(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._command_retry.copy()(func, *args, **kwargs)

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    # The event thread and session handling --------------------------------------------------

    def _submit(self, fn: Callable[[], object]) -> None:
        if not self._closed:
            self._events.put(fn)

    def _run_events(self) -> None:
        while True:
            fn = self._events.get()
            if fn is None:
                return
            if self._closed:
                continue
            try:
                fn()
            except _CONNECTION_ERRORS as e:
                # Connected again, the store re-reads everything (see _on_state).
                log.info("ZooKeeper event handling interrupted (%s); will redo on reconnection", type(e).__name__)
            except Exception:
                log.exception("error in a ZooKeeper watch or session callback")

    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: must not block or call ZooKeeper."""
        if self._closed:
            return
        if state == KazooState.LOST:
            log.warning("ZooKeeper session expired")
            self._session_lost = True
            self._submit(self._session_expired)
        elif state == KazooState.SUSPENDED:
            log.info("ZooKeeper connection lost; reconnecting")
        elif state == KazooState.CONNECTED:
            lost, self._session_lost = self._session_lost, False
            self._submit(lambda: self._recover(lost))

    def _session_expired(self) -> None:
        self._registered.clear()
        for callback in list(self._expiry_callbacks):
            try:
                callback()
            except Exception:
                log.exception("error in an on_session_expired callback")

    def _recover(self, session_was_lost: bool) -> None:
        """Connected again: re-register (in a new session) and re-arm every watch."""
        if session_was_lost:
            log.info("new ZooKeeper session %#x; re-registering and re-installing watches", self._session_id() or 0)
        with self._registration_lock:
            if self._registration is not None and not self._registered.is_set():
                self._try_register()
        with self._watches_lock:
            watches = list(self._watches)
        for watch in watches:
            try:
                watch.refresh()
            except _CONNECTION_ERRORS:
                raise  # disconnected again: the next reconnection redoes all of this
            except Exception:
                log.exception("error in a ZooKeeper watch callback")

    def on_session_expired(self, callback: Callable[[], None]) -> None:
        self._expiry_callbacks.append(callback)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.remove_listener(self._on_state)
        try:
            self._client.stop()  # closes the session: ephemeral nodes go now
        finally:
            self._client.close()
            self._events.put(None)
            if threading.current_thread() is not self._event_thread:
                self._event_thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Brokers -------------------------------------------------------------------------------

    def get_or_create_cluster_id(self, proposed: str) -> str:
        return self._retry(self._get_or_create_cluster_id, proposed)

    def _get_or_create_cluster_id(self, proposed: str) -> str:
        while True:
            try:
                raw, _ = self._client.get(CLUSTER_ID)
                return str(json.loads(raw)["id"])
            except NoNodeError:
                pass
            try:
                self._client.create(CLUSTER_ID, _dumps({"version": "1", "id": proposed}), makepath=True)
                return proposed
            except NodeExistsError:
                continue  # another broker was first

    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        """Create /brokers/ids/<id> (ephemeral), kept across session expiries until close().

        If the node is left over from an earlier session of this broker (restarted before
        ZooKeeper expired it), wait for it to go; DUPLICATE_BROKER_REGISTRATION if it is
        still there after 1.5 session timeouts (another live broker with this id).
        """
        with self._registration_lock:
            self._registration = endpoint
            self._registered.clear()
            done = self._retry(self._try_register)
        if done:
            return
        wait = 1.5 * self.session_timeout_s + 2.0
        if not self._registered.wait(wait):
            with self._registration_lock:
                if not self._registered.is_set():
                    self._registration = None
                    raise KafkaError(
                        ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                        f"{BROKER_IDS}/{endpoint.broker_id} is held by another session for more than {wait:.0f}s",
                    )

    def _try_register(self) -> bool:
        """Create this broker's node; False if another session's node is in the way (a watch
        on it tries again when it goes)."""
        with self._registration_lock:
            endpoint = self._registration
            if endpoint is None:
                return True
            path = f"{BROKER_IDS}/{endpoint.broker_id}"
            while True:
                try:
                    self._client.create(path, broker_document(endpoint), ephemeral=True, makepath=True)
                    break
                except NodeExistsError:
                    pass
                try:
                    _, stat = self._client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._session_id():
                    # Ours: registered again, or a create whose reply was lost.
                    self._client.set(path, broker_document(endpoint))
                    break
                log.warning("%s exists, owned by session %#x; waiting for it to expire", path, stat.ephemeralOwner)
                if self._client.exists(path, watch=self._on_registration_event) is None:
                    continue
                return False
            self._registered.set()
            return True

    def _on_registration_event(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            self._submit(self._try_register)

    def brokers(self) -> dict[int, BrokerEndpoint]:
        return self._retry(self._read_brokers)

    def _read_brokers(self) -> dict[int, BrokerEndpoint]:
        ids = self._client.get_children(BROKER_IDS)
        pending = {int(i): self._client.get_async(f"{BROKER_IDS}/{i}") for i in ids if i.isdigit()}
        result = {}
        for broker_id, reply in sorted(pending.items()):
            try:
                raw, stat = reply.get()
            except NoNodeError:
                continue
            result[broker_id] = replace(parse_broker(broker_id, raw), epoch=stat.czxid)
        return result

    # The controller ----------------------------------------------------------------------------

    def elect_controller(self, broker_id: int) -> int | None:
        """Create /controller and bump /controller_epoch in one transaction; None if another
        broker (or this one, earlier) holds /controller."""
        document = _dumps({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})
        while True:
            if self._retry(self._client.exists, CONTROLLER) is not None:
                return None
            epoch, version = self._retry(self._read_epoch)
            tx = self._client.transaction()
            tx.create(CONTROLLER, document, ephemeral=True)
            if version is None:
                tx.create(CONTROLLER_EPOCH, str(epoch + 1).encode())
            else:
                tx.set_data(CONTROLLER_EPOCH, str(epoch + 1).encode(), version=version)
            try:
                results = tx.commit()
            except ConnectionLoss:
                # Did it commit? Then /controller is ours (this session's).
                try:
                    _, stat = self._retry(self._client.get, CONTROLLER)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._session_id():
                    return self._retry(self._read_epoch)[0]
                return None
            except SessionExpiredError:
                continue
            if not any(isinstance(r, Exception) for r in results):
                log.info("broker %d elected controller with epoch %d", broker_id, epoch + 1)
                return epoch + 1
            if isinstance(results[0], NodeExistsError):
                return None
            # The epoch moved on (another broker won and maybe already resigned): look again.

    def _read_epoch(self) -> tuple[int, int | None]:
        try:
            raw, stat = self._client.get(CONTROLLER_EPOCH)
        except NoNodeError:
            return 0, None
        return int(raw.decode().strip() or 0), stat.version

    def controller_epoch(self) -> int:
        return self._retry(self._read_epoch)[0]

    def controller_id(self) -> int | None:
        try:
            raw, _ = self._retry(self._client.get, CONTROLLER)
        except NoNodeError:
            return None
        return int(json.loads(raw)["brokerid"])

    # Topics -----------------------------------------------------------------------------------

    def topics(self) -> dict[str, TopicDescription]:
        return self._retry(self._read_topics)

    def _read_topics(self) -> dict[str, TopicDescription]:
        return self._read_topics_named(self._client.get_children(TOPICS))

    def topics_named(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        return self._retry(self._read_topics_named, list(names))

    def _read_topics_named(self, names: list[str]) -> dict[str, TopicDescription]:
        # Pipelined: every read is sent before the first answer is awaited.
        pending = {
            n: (self._client.get_async(topic_path(n)), self._client.get_async(f"{CONFIG_TOPICS}/{n}")) for n in names
        }
        result = {}
        for name, (topic_reply, config_reply) in sorted(pending.items()):
            try:
                raw, _ = topic_reply.get()
            except NoNodeError:
                continue
            try:
                config = json.loads(config_reply.get()[0]).get("config", {})
            except NoNodeError:
                config = {}
            doc = json.loads(raw)
            result[name] = TopicDescription(
                name=name,
                topic_id=doc.get("topic_id") or "",
                assignment={int(p): tuple(r) for p, r in doc.get("partitions", {}).items()},
                config={str(k): str(v) for k, v in config.items()},
                adding={int(p): tuple(r) for p, r in (doc.get("adding_replicas") or {}).items() if r},
                removing={int(p): tuple(r) for p, r in (doc.get("removing_replicas") or {}).items() if r},
            )
        return result

    def create_topic(self, topic: TopicDescription, states: dict[int, PartitionState]) -> None:
        """Create the topic, its config and partition states in one transaction."""
        while True:
            if self._retry(self._client.exists, topic_path(topic.name)) is not None:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
            config_exists = self._retry(self._client.exists, f"{CONFIG_TOPICS}/{topic.name}") is not None
            tx = self._client.transaction()
            tx.create(topic_path(topic.name), topic_document(topic))
            self._write_config(tx, topic, config_exists)
            tx.create(f"{topic_path(topic.name)}/partitions", b"")
            for p, state in sorted(states.items()):
                tx.create(partition_path(topic.name, p), b"")
                tx.create(state_path(topic.name, p), state_document(state))
            results = self._commit(tx, topic_path(topic.name))
            if results is None or not any(isinstance(r, Exception) for r in results):
                return
            if isinstance(results[0], NodeExistsError):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
            # The config node came or went meanwhile: try again.

    def update_topic(self, topic: TopicDescription, new_states: dict[int, PartitionState]) -> None:
        """Rewrite the assignment and config; add (or overwrite) the given partition states."""
        while True:
            if self._retry(self._client.exists, topic_path(topic.name)) is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
            stored_config = self._retry(self._topic_config, topic.name)
            config_exists = stored_config is not None
            existing = self._retry(self._existing_partitions, topic.name)
            tx = self._client.transaction()
            tx.set_data(topic_path(topic.name), topic_document(topic))
            self._write_config(tx, topic, config_exists)
            if existing is None:
                tx.create(f"{topic_path(topic.name)}/partitions", b"")
                existing = {}
            for p, state in sorted(new_states.items()):
                if p not in existing:
                    tx.create(partition_path(topic.name, p), b"")
                if existing.get(p):
                    tx.set_data(state_path(topic.name, p), state_document(state))
                else:
                    tx.create(state_path(topic.name, p), state_document(state))
            results = self._commit(tx, None)
            if results is None or not any(isinstance(r, Exception) for r in results):
                if stored_config != topic.config:
                    self._notify_config_change(f"topics/{topic.name}")
                return
            if isinstance(results[0], NoNodeError):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
            # Raced with another writer: look again.

    def _existing_partitions(self, topic: str) -> dict[int, bool] | None:
        """Partition -> whether it has a state node; None if there is no partitions node."""
        try:
            children = self._client.get_children(f"{topic_path(topic)}/partitions")
        except NoNodeError:
            return None
        replies = {int(p): self._client.exists_async(state_path(topic, int(p))) for p in children if p.isdigit()}
        return {p: reply.get() is not None for p, reply in replies.items()}

    def _topic_config(self, topic: str) -> dict[str, str] | None:
        try:
            raw, _ = self._client.get(f"{CONFIG_TOPICS}/{topic}")
        except NoNodeError:
            return None
        return {str(k): str(v) for k, v in json.loads(raw or b"{}").get("config", {}).items()}

    def _write_config(self, tx: Any, topic: TopicDescription, exists: bool) -> None:
        path = f"{CONFIG_TOPICS}/{topic.name}"
        if exists:
            tx.set_data(path, config_document(topic.config))
        else:
            tx.create(path, config_document(topic.config))

    def _commit(self, tx: Any, created: str | None) -> list | None:
        """Commit; after a lost connection, None if `created` shows that it went through
        (so the caller stops), else the results of committing again (which raise or retry)."""
        try:
            return tx.commit()
        except (ConnectionLoss, SessionExpiredError):
            if created is not None and self._retry(self._client.exists, created) is not None:
                return None
            return [ConnectionLoss()]

    def delete_topic(self, name: str) -> None:
        """The controller's last step: remove /brokers/topics/<t> (with its partitions),
        /config/topics/<t> and /admin/delete_topics/<t>, in that order."""
        existed = self._retry(self._client.exists, topic_path(name)) is not None
        for path in (topic_path(name), f"{CONFIG_TOPICS}/{name}", f"{DELETE_TOPICS}/{name}"):
            self._retry(self._delete_recursive, path)
        if not existed:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")

    def _delete_recursive(self, path: str) -> None:
        while True:
            try:
                self._client.delete(path, recursive=True)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                continue  # a child appeared meanwhile

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        return self._retry(self._read_states, topic)

    def _read_states(self, topic: str) -> dict[int, PartitionState]:
        try:
            children = self._client.get_children(f"{topic_path(topic)}/partitions")
        except NoNodeError:
            return {}
        partitions = sorted((topic, int(p)) for p in children if p.isdigit())
        return {p: state for (_, p), state in self._read_states_of(partitions).items()}

    def partition_states_of(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        return self._retry(self._read_states_of, list(partitions))

    def _read_states_of(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        replies = {tp: self._client.get_async(state_path(*tp)) for tp in partitions}
        states = {}
        for tp, reply in replies.items():
            try:
                raw, stat = reply.get()
            except NoNodeError:
                continue
            states[tp] = parse_state(raw, stat.version)
        return states

    def update_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> PartitionState | None:
        path = state_path(topic, partition)
        document = state_document(state)
        try:
            stat = self._retry(self._client.set, path, document, version=expected_version)
        except NoNodeError:
            return None
        except BadVersionError:
            # Lost the race, unless it was this very write retried after a lost reply.
            try:
                raw, stat = self._retry(self._client.get, path)
            except NoNodeError:
                return None
            if stat.version != expected_version + 1 or raw != document:
                return None
        return replace(state, version=stat.version)

    def update_partition_states(
        self, updates: Mapping[tuple[str, int], tuple[PartitionState, int]]
    ) -> dict[tuple[str, int], PartitionState]:
        """In multi-ops of up to MULTI_OP_SIZE compare-and-sets: one round trip for a chunk
        whose versions all hold (a broker's death moving a thousand leaders); a chunk where
        one does not is all-or-nothing in ZooKeeper, so its partitions are written one by one."""
        items = list(updates.items())
        stored: dict[tuple[str, int], PartitionState] = {}
        for start in range(0, len(items), MULTI_OP_SIZE):
            chunk = items[start : start + MULTI_OP_SIZE]
            tx = self._client.transaction()
            for (topic, p), (state, expected) in chunk:
                tx.set_data(state_path(topic, p), state_document(state), version=expected)
            try:
                results = tx.commit()
            except (ConnectionLoss, SessionExpiredError):
                results = None  # unknown whether it went through: one by one tells
            if results is not None and not any(isinstance(r, Exception) for r in results):
                for ((topic, p), (state, _)), stat in zip(chunk, results, strict=True):
                    stored[(topic, p)] = replace(state, version=stat.version)
                continue
            for (topic, p), (state, expected) in chunk:
                written = self.update_partition_state(topic, p, state, expected)
                if written is not None:
                    stored[(topic, p)] = written
        return stored

    # Deletion requests --------------------------------------------------------------------------

    def request_topic_deletion(self, name: str) -> None:
        if self._retry(self._client.exists, topic_path(name)) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            self._retry(self._client.create, f"{DELETE_TOPICS}/{name}", b"", makepath=True)
        except NodeExistsError:
            pass  # already requested

    def pending_topic_deletions(self) -> list[str]:
        return sorted(self._retry(self._client.get_children, DELETE_TOPICS))

    # Producer ids ---------------------------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Reserve [start, start + size) by a compare-and-set of /latest_producer_id_block
        (block_end is inclusive, as in Kafka); a block lost to a dropped reply is skipped."""
        return self._retry(self._allocate_block, broker_id, size)

    def _allocate_block(self, broker_id: int, size: int) -> int:
        while True:
            try:
                raw, stat = self._client.get(PRODUCER_ID_BLOCK)
                start, version = int(json.loads(raw)["block_end"]) + 1, stat.version
            except NoNodeError:
                start, version = 0, None
            doc = _dumps(
                {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(start + size - 1)}
            )
            try:
                if version is None:
                    self._client.create(PRODUCER_ID_BLOCK, doc)
                else:
                    self._client.set(PRODUCER_ID_BLOCK, doc, version=version)
            except (NodeExistsError, BadVersionError):
                continue
            return start

    # Watches -------------------------------------------------------------------------------------

    def _add_watch(self, read: Callable, deliver: Callable[[Any], Any], callback: Callable[[Any], None]) -> None:
        watch = _Watch(self, read, deliver, callback)
        with self._watches_lock:
            self._watches.append(watch)
        self._retry(watch.refresh)

    def _children_reader(self, path: str) -> Callable:
        def read(watcher: Callable[[WatchedEvent], None]) -> list[str]:
            while True:
                try:
                    return sorted(self._client.get_children(path, watch=watcher))
                except NoNodeError:
                    self._client.ensure_path(path)

        return read

    def watch_brokers(self, callback: Callable[[dict[int, int]], None]) -> None:
        children = self._children_reader(BROKER_IDS)

        def read(watcher: Callable[[WatchedEvent], None]) -> dict[int, tuple[int, int]]:
            # With the ids alone, a broker deleted and registered again between two reads
            # (restarted within its session timeout: one watch event for both changes)
            # would look unchanged; its node's creation zxid (the broker epoch) tells. A
            # broker that rewrites its node (new advertised.listeners) changes its mzxid;
            # the watch on each node's data tells.
            ids = [i for i in children(watcher) if i.isdigit()]
            stats = {int(i): self._client.exists_async(f"{BROKER_IDS}/{i}", watch=watcher) for i in ids}
            return {b: (stat.czxid, stat.mzxid) for b, reply in stats.items() if (stat := reply.get()) is not None}

        self._add_watch(read, lambda zxids: {b: czxid for b, (czxid, _) in zxids.items()}, callback)

    def watch_topics(self, callback: Callable[[set[str]], None]) -> None:
        self._add_watch(self._children_reader(TOPICS), set, callback)

    def watch_topic_deletions(self, callback: Callable[[list[str]], None]) -> None:
        self._add_watch(self._children_reader(DELETE_TOPICS), list, callback)

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        doc = _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})
        self._retry(self._client.create, f"{ISR_CHANGES}/{ISR_CHANGE_PREFIX}", doc, sequence=True, makepath=True)

    def take_isr_changes(self) -> list[tuple[str, int]]:
        docs = self._retry(self._take_notifications, ISR_CHANGES)
        return [tp for doc in docs for tp in _partitions_of(doc)]

    def _take_notifications(self, parent: str) -> list[dict]:
        """The documents of `parent`'s sequential children, oldest first, each deleted once read."""
        try:
            children = self._client.get_children(parent)
        except NoNodeError:
            return []
        replies = {c: self._client.get_async(f"{parent}/{c}") for c in children}
        taken = []
        for child, reply in sorted(replies.items()):
            try:
                taken.append(json.loads(reply.get()[0]))
            except NoNodeError:
                continue  # taken by a controller that was active a moment ago
            try:
                self._client.delete(f"{parent}/{child}")
            except NoNodeError:
                pass
        return taken

    def watch_isr_changes(self, callback: Callable[[object], None]) -> None:
        self._add_watch(self._children_reader(ISR_CHANGES), tuple, callback)

    def notify_log_dir_failure(self, broker_id: int, partitions: list[tuple[str, int]]) -> None:
        doc = _dumps(
            {
                "version": 1,
                "broker": broker_id,
                "event": LOG_DIR_FAILURE_EVENT,
                "partitions": [{"topic": t, "partition": p} for t, p in partitions],
            }
        )
        self._retry(self._client.create, f"{LOG_DIR_EVENTS}/{LOG_DIR_EVENT_PREFIX}", doc, sequence=True, makepath=True)

    def take_log_dir_failures(self) -> list[LogDirFailure]:
        docs = self._retry(self._take_notifications, LOG_DIR_EVENTS)
        return [
            LogDirFailure(int(doc["broker"]), tuple(_partitions_of(doc)))
            for doc in docs
            if doc.get("event") == LOG_DIR_FAILURE_EVENT
        ]

    def watch_log_dir_failures(self, callback: Callable[[object], None]) -> None:
        self._add_watch(self._children_reader(LOG_DIR_EVENTS), tuple, callback)

    def reassignment_request(self) -> dict[tuple[str, int], tuple[int, ...]]:
        try:
            raw, _ = self._retry(self._client.get, REASSIGN_PARTITIONS)
        except NoNodeError:
            return {}
        try:
            doc = json.loads(raw)
            return {
                (str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"]) for e in doc["partitions"]
            }
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring a malformed %s: %s", REASSIGN_PARTITIONS, exc)
            return {}

    def delete_reassignment_request(self) -> None:
        try:
            self._retry(self._client.delete, REASSIGN_PARTITIONS)
        except NoNodeError:
            pass

    def watch_reassignment_request(self, callback: Callable[[object], None]) -> None:
        def read(watcher: Callable[[WatchedEvent], None]) -> int | None:
            stat = self._client.exists(REASSIGN_PARTITIONS, watch=watcher)
            return None if stat is None else stat.czxid  # each request written is a change

        self._add_watch(read, lambda czxid: czxid, callback)

    def watch_controller(self, callback: Callable[[int | None], None]) -> None:
        def read(watcher: Callable[[WatchedEvent], None]) -> tuple[int | None, int | None]:
            while True:
                try:
                    raw, stat = self._client.get(CONTROLLER, watch=watcher)
                except NoNodeError:
                    if self._client.exists(CONTROLLER, watch=watcher) is None:
                        return None, None
                    continue  # created meanwhile
                # The node's creation zxid tells elections apart, even by the same broker.
                return int(json.loads(raw)["brokerid"]), stat.czxid

        self._add_watch(read, lambda value: value[0], callback)

    # Dynamic broker configs ------------------------------------------------------------------

    def tiered_offset(self, topic: str, partition: int) -> int | None:
        return self._retry(self._read_tiered_offset, topic, partition)

    def _read_tiered_offset(self, topic: str, partition: int) -> int | None:
        try:
            return json.loads(self._client.get(tiered_offset_path(topic, partition))[0])["offset"]
        except NoNodeError:
            return None

    def record_tiered_offset(self, topic: str, partition: int, offset: int) -> int:
        path = tiered_offset_path(topic, partition)

        def raise_to() -> int:
            while True:
                if self._client.exists(state_path(topic, partition)) is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}")
                try:
                    raw, stat = self._client.get(path)
                except NoNodeError:
                    try:
                        self._client.create(path, _dumps({"version": 1, "offset": offset}))
                        return offset
                    except NodeExistsError:
                        continue
                stored = json.loads(raw)["offset"]
                if stored >= offset:
                    return stored
                try:
                    self._client.set(path, _dumps({"version": 1, "offset": offset}), version=stat.version)
                    return offset
                except BadVersionError:
                    continue  # raised meanwhile: compare again

        return self._retry(raise_to)

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return self._retry(self._read_broker_configs)

    def _read_broker_configs(self) -> dict[str, dict[str, str]]:
        try:
            entities = self._client.get_children(CONFIG_BROKERS)
        except NoNodeError:
            return {}
        replies = {e: self._client.get_async(f"{CONFIG_BROKERS}/{e}") for e in entities}
        out = {}
        for entity, reply in replies.items():
            try:
                config = json.loads(reply.get()[0] or b"{}").get("config", {})
            except NoNodeError:
                continue
            out[entity] = {str(k): str(v) for k, v in config.items()}
        return out

    def update_broker_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Compare-and-set /config/brokers/<entity>, then the change notification Kafka's
        brokers (and ours, through `watch_broker_configs`) act on."""
        updated: dict[str, str] = {}

        def document(data: bytes | None) -> bytes:
            nonlocal updated
            current = json.loads(data or b"{}").get("config", {})
            updated = dict(change({str(k): str(v) for k, v in current.items()}))
            return config_document(updated)

        self._retry(self._compare_and_set, f"{CONFIG_BROKERS}/{entity}", document)
        self._notify_config_change(f"brokers/{entity}")
        return updated

    def entity_config(self, entity: str) -> dict[str, str]:
        def read() -> dict[str, str]:
            try:
                raw = self._client.get(f"{CONFIG_ROOT}/{entity}")[0]
            except NoNodeError:
                return {}
            return {str(k): str(v) for k, v in json.loads(raw or b"{}").get("config", {}).items()}

        return self._retry(read)

    def update_entity_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """/config/<entity> in Kafka's form, then its change notification."""
        updated: dict[str, str] = {}

        def document(data: bytes | None) -> bytes | None:
            nonlocal updated
            current = json.loads(data or b"{}").get("config", {})
            updated = dict(change({str(k): str(v) for k, v in current.items()}))
            return config_document(updated) if updated else None

        # A user's node may hold its clients' nodes: then it stays, emptied.
        self._retry(self._compare_and_set, f"{CONFIG_ROOT}/{entity}", document, emptied=config_document({}))
        self._notify_config_change(entity)
        return updated

    def _compare_and_set(
        self, path: str, change: Callable[[bytes | None], bytes | None], emptied: bytes | None = None
    ) -> None:
        """Replace a znode's data with `change(data)` (None in: there is no znode; None out:
        delete it, or write `emptied` if it has children), conditionally on the version read:
        on a concurrent change, read and change again."""
        while True:
            try:
                data, stat = self._client.get(path)
            except NoNodeError:
                data, stat = None, None
            doc = change(data)
            try:
                if stat is None:
                    if doc is not None:
                        self._client.create(path, doc, makepath=True)
                elif doc is not None:
                    self._client.set(path, doc, version=stat.version)
                else:
                    try:
                        self._client.delete(path, version=stat.version)
                    except NotEmptyError:
                        if emptied is None:
                            raise
                        self._client.set(path, emptied, version=stat.version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed (or created, or deleted) since the read

    def entity_configs(self) -> dict[str, dict[str, str]]:
        return self._retry(self._read_entity_configs)

    def _read_entity_configs(self) -> dict[str, dict[str, str]]:
        paths = []
        for kind in ("users", "clients"):
            try:
                names = self._client.get_children(f"{CONFIG_ROOT}/{kind}")
            except NoNodeError:
                continue
            for name in names:
                paths.append(f"{kind}/{name}")
                if kind == "users":
                    try:
                        paths += [
                            f"users/{name}/clients/{c}"
                            for c in self._client.get_children(f"{CONFIG_USERS}/{name}/clients")
                        ]
                    except NoNodeError:
                        pass
        replies = {p: self._client.get_async(f"{CONFIG_ROOT}/{p}") for p in paths}
        out = {}
        for path, reply in replies.items():
            try:
                config = json.loads(reply.get()[0] or b"{}").get("config", {})
            except NoNodeError:
                continue
            if config:
                out[path] = {str(k): str(v) for k, v in config.items()}
        return out

    def watch_entity_configs(self, callback: Callable[[dict[str, dict[str, str]]], None]) -> None:
        changes = self._children_reader(CONFIG_CHANGES)

        def read(watcher: Callable[[WatchedEvent], None]) -> dict[str, dict[str, str]]:
            changes(watcher)
            return self._read_entity_configs()

        self._add_watch(read, lambda configs: configs, callback)

    def acls(self) -> dict[ResourcePattern, list[AccessControlEntry]]:
        return self._retry(self._read_acls)

    def _read_acls(self) -> dict[ResourcePattern, list[AccessControlEntry]]:
        types = {name: t for t, name in RESOURCE_NAMES.items()}
        replies = {}
        for root, pattern_type in ((ACL_LITERAL, PatternType.LITERAL), (ACL_EXTENDED, PatternType.PREFIXED)):
            try:
                type_names = self._client.get_children(root)
            except NoNodeError:
                continue
            for type_name in type_names:
                if type_name not in types:
                    continue
                for name in self._client.get_children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(types[type_name], name, pattern_type)
                    replies[pattern] = self._client.get_async(f"{root}/{type_name}/{name}")
        out = {}
        for pattern, reply in replies.items():
            try:
                doc = json.loads(reply.get()[0] or b"{}")
            except NoNodeError:
                continue
            entries = [AccessControlEntry.from_document(a) for a in doc.get("acls", [])]
            if entries:
                out[pattern] = entries
        return out

    def update_acls(
        self, pattern: ResourcePattern, change: Callable[[frozenset[AccessControlEntry]], Iterable[AccessControlEntry]]
    ) -> None:
        literal = pattern.pattern_type == PatternType.LITERAL
        path = f"{ACL_LITERAL if literal else ACL_EXTENDED}/{RESOURCE_NAMES[pattern.resource_type]}/{pattern.name}"

        def document(data: bytes | None) -> bytes | None:
            current = frozenset(AccessControlEntry.from_document(a) for a in json.loads(data or b"{}").get("acls", []))
            entries = sorted(change(current), key=repr)
            return _dumps({"version": 1, "acls": [e.to_document() for e in entries]}) if entries else None

        self._retry(self._compare_and_set, path, document)
        # Kafka's notifications: "Type:name" for literal patterns, JSON for prefixed ones.
        if literal:
            notification = f"{RESOURCE_NAMES[pattern.resource_type]}:{pattern.name}".encode()
        else:
            notification = _dumps(
                {
                    "version": 1,
                    "resourceType": RESOURCE_NAMES[pattern.resource_type],
                    "name": pattern.name,
                    "patternType": "PREFIXED",
                }
            )
        self._notify_change(ACL_CHANGES if literal else ACL_EXTENDED_CHANGES, ACL_CHANGE_PREFIX, notification)

    def watch_acls(self, callback: Callable[[dict[ResourcePattern, list[AccessControlEntry]]], None]) -> None:
        literal, prefixed = self._children_reader(ACL_CHANGES), self._children_reader(ACL_EXTENDED_CHANGES)

        def read(watcher: Callable[[WatchedEvent], None]) -> dict[ResourcePattern, list[AccessControlEntry]]:
            literal(watcher)
            prefixed(watcher)
            return self._read_acls()

        self._add_watch(read, lambda acls: acls, callback)

    def _notify_config_change(self, entity_path: str) -> None:
        """Write the /config/changes notification of a changed config, and purge the
        notifications older than CONFIG_CHANGE_EXPIRATION_MS (by ZooKeeper's own ctime, so
        the brokers' clocks do not matter)."""
        notification = _dumps({"version": 2, "entity_path": entity_path})
        self._notify_change(CONFIG_CHANGES, CONFIG_CHANGE_PREFIX, notification)

    def _notify_change(self, directory: str, prefix: str, notification: bytes) -> None:
        created = self._retry(self._client.create, f"{directory}/{prefix}", notification, sequence=True, makepath=True)
        self._retry(self._purge_changes, directory, created)

    def _purge_changes(self, directory: str, newest: str) -> None:
        newest_stat = self._client.exists(newest)
        if newest_stat is None:
            return  # purged meanwhile by another broker's later notification
        horizon = newest_stat.ctime - CONFIG_CHANGE_EXPIRATION_MS
        children = self._client.get_children(directory)
        stats = {c: self._client.exists_async(f"{directory}/{c}") for c in children}
        for child, reply in stats.items():
            stat = reply.get()
            # Older by creation order too: ctime has a resolution of milliseconds.
            if stat is not None and stat.czxid < newest_stat.czxid and stat.ctime <= horizon:
                try:
                    self._client.delete(f"{directory}/{child}")
                except NoNodeError:
                    pass  # another broker purged it

    def watch_broker_configs(self, callback: Callable[[dict[str, dict[str, str]]], None]) -> None:
        changes = self._children_reader(CONFIG_CHANGES)

        def read(watcher: Callable[[WatchedEvent], None]) -> dict[str, dict[str, str]]:
            changes(watcher)  # arms the watch on new notifications
            return self._read_broker_configs()

        self._add_watch(read, lambda configs: configs, callback)
