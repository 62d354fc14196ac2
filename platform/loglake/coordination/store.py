"""The metadata store interface the controller works against.

Two backends implement it: `EmbeddedMetadataStore` (a single node, no ZooKeeper, a file
in the log dir) and the ZooKeeper store (kazoo) for clusters. Partition state updates
are compare-and-set on a version, the way Kafka updated znodes, so a controller with a
stale view cannot overwrite a newer decision.

Watches take plain callbacks, called on whatever thread the store delivers events on:
the ZooKeeper store's single event thread (a kazoo watch hops onto it), or, for the
embedded store, the thread of the call that made the change. A caller on an asyncio
loop hops back with `loop.call_soon_threadsafe` (safe from any thread, the loop's own
included). A callback gets the current value as it is installed (normally from within
the `watch_*` call), then every change, one call at a time per watch; it should be quick.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from loglake import faults
from loglake.coordination.model import BrokerEndpoint, LogDirFailure, PartitionState, TopicDescription
from loglake.security.acls import AccessControlEntry, ResourcePattern
from loglake.security.credential_cache import SCRAM_MECHANISMS, scram_credentials_by_user
from loglake.security.sanitizer import sanitize


class MetadataStore(ABC):
    @abstractmethod
    def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster's id (/cluster/id): `proposed` if no broker set one before."""

    @abstractmethod
    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        """Announce a live broker (/brokers/ids/<id>, ephemeral)."""

    @abstractmethod
    def brokers(self) -> dict[int, BrokerEndpoint]:
        """The live brokers by id."""

    @abstractmethod
    def elect_controller(self, broker_id: int) -> int | None:
        """Try to become the controller; the new controller epoch on success, else None."""

    @abstractmethod
    def topics(self) -> dict[str, TopicDescription]:
        """Every topic by name."""

    @abstractmethod
    def topics_named(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """The named topics that exist, by name: reads only those (the controller's and the
        brokers' work per change is proportional to the change, not to every topic)."""

    @abstractmethod
    def create_topic(self, topic: TopicDescription, states: dict[int, PartitionState]) -> None:
        """Store a new topic with its initial partition states; TOPIC_ALREADY_EXISTS if taken."""

    @abstractmethod
    def update_topic(self, topic: TopicDescription, new_states: dict[int, PartitionState]) -> None:
        """Replace a topic's assignment/config, adding states for new partitions."""

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Remove a topic, its partition states and config, and any deletion request for it.

        UNKNOWN_TOPIC_OR_PARTITION if the topic does not exist.
        """

    @abstractmethod
    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        """Current states of a topic's partitions, each with its version."""

    @abstractmethod
    def partition_states_of(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        """The states of the given partitions that exist, each with its version."""

    @abstractmethod
    def update_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> PartitionState | None:
        """Compare-and-set: write `state` if the stored version is `expected_version`.

        Returns the stored state with its new version, or None when the version moved on.
        """

    def update_partition_states(
        self, updates: Mapping[tuple[str, int], tuple[PartitionState, int]]
    ) -> dict[tuple[str, int], PartitionState]:
        """Many compare-and-sets ((state, expected version) by partition): the stored states
        of those written; the others' versions had moved on. One at a time here; the
        ZooKeeper store batches them."""
        stored = {}
        for (topic, p), (state, expected) in updates.items():
            written = self.update_partition_state(topic, p, state, expected)
            if written is not None:
                stored[(topic, p)] = written
        return stored

    @abstractmethod
    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Reserve `size` producer ids for `broker_id` (/latest_producer_id_block); the first id."""

    # Controller election -----------------------------------------------------------------

    @abstractmethod
    def controller_id(self) -> int | None:
        """The broker holding the controller role (/controller), None if nobody does."""

    @abstractmethod
    def controller_epoch(self) -> int:
        """The latest controller epoch (/controller_epoch), 0 before any election."""

    # Topic deletion requests ----------------------------------------------------------------

    @abstractmethod
    def request_topic_deletion(self, name: str) -> None:
        """Ask the controller to delete a topic (/admin/delete_topics/<t>); idempotent.

        UNKNOWN_TOPIC_OR_PARTITION if the topic does not exist. The controller completes it
        with `delete_topic`, which also removes the request.
        """

    @abstractmethod
    def pending_topic_deletions(self) -> list[str]:
        """Topics whose deletion was requested and not yet completed, sorted."""

    # Reassignments and ISR changes ---------------------------------------------------------

    @abstractmethod
    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        """A leader changed these partitions' ISR: tell the controller
        (ZooKeeper: an /isr_change_notification/isr_change_ node, as Kafka's leaders write)."""

    @abstractmethod
    def take_isr_changes(self) -> list[tuple[str, int]]:
        """The partitions of every ISR change notified and not yet taken; taking removes them."""

    @abstractmethod
    def watch_isr_changes(self, callback: Callable[[object], None]) -> None:
        """Call `callback` (with a token that differs each time) now and whenever an ISR
        change is notified."""

    # Log dir failures (KIP-112) ----------------------------------------------------------------

    @abstractmethod
    def notify_log_dir_failure(self, broker_id: int, partitions: list[tuple[str, int]]) -> None:
        """A log dir of `broker_id` went offline with these partitions' replicas: tell the
        controller (ZooKeeper: a /log_dir_event_notification/log_dir_event_ node, as Kafka's
        brokers write, with the partitions added)."""

    @abstractmethod
    def take_log_dir_failures(self) -> list[LogDirFailure]:
        """Every log dir failure notified and not yet taken, oldest first; taking removes them."""

    @abstractmethod
    def watch_log_dir_failures(self, callback: Callable[[object], None]) -> None:
        """Call `callback` (with a token that differs each time) now and whenever a log dir
        failure is notified."""

    def reassignment_request(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """A reassignment written by a tool (ZooKeeper: /admin/reassign_partitions, Kafka's
        JSON): partition -> target replicas; {} if none. The embedded store has no such path."""
        return {}

    def delete_reassignment_request(self) -> None:
        """The controller took the request: remove it."""

    def watch_reassignment_request(self, callback: Callable[[object], None]) -> None:
        """Call `callback` whenever a tool writes a reassignment request (never for the embedded store)."""

    # Tiered storage ----------------------------------------------------------------------------

    @abstractmethod
    def tiered_offset(self, topic: str, partition: int) -> int | None:
        """The partition's tiered offset: every offset below it is in the lake (the topic's
        remote storage), so replicas may delete it locally. None if never tiered."""

    @abstractmethod
    def record_tiered_offset(self, topic: str, partition: int, offset: int) -> int:
        """Raise the partition's tiered offset to `offset` (it never goes down); returns the
        stored value. UNKNOWN_TOPIC_OR_PARTITION if the topic has no such partition. Kept
        with the topic, so it goes when the topic is deleted."""

    # Dynamic broker configs -------------------------------------------------------------------

    @abstractmethod
    def broker_configs(self) -> dict[str, dict[str, str]]:
        """Every dynamic broker config by entity: a broker id, or "<default>" for the
        cluster-wide default (/config/brokers/<entity>)."""

    @abstractmethod
    def update_broker_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace one entity's dynamic broker config with `change(current)`, compare-and-set
        on what was read (on a concurrent change, read and change again, so that changes of
        other keys through other brokers are not lost), and tell every broker of it
        (ZooKeeper: a /config/changes/config_change_ notification, as Kafka writes). Returns
        the config stored; an exception from `change` leaves it as it was."""

    def set_broker_config(self, entity: str, config: dict[str, str]) -> None:
        """Replace one entity's dynamic broker config whatever it holds."""
        self.update_broker_config(entity, lambda _: dict(config))

    @abstractmethod
    def entity_config(self, entity: str) -> dict[str, str]:
        """A client entity's config (Kafka's /config/<entity>): `users/<user>`,
        `clients/<client id>`, `users/<user>/clients/<client id>`, with `<default>` for a
        default; SCRAM credentials and quotas live there side by side, as in Kafka."""

    @abstractmethod
    def update_entity_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace an entity's config with `change(current)` (empty: remove it) and notify the
        brokers; returns the new config. Atomic: an update made meanwhile by another broker
        or client is not lost (ZooKeeper: conditional on the znode's version, `change` called
        again on a conflict, so it must be pure). An exception from `change` writes nothing."""

    @abstractmethod
    def entity_configs(self) -> dict[str, dict[str, str]]:
        """Every user and client entity's config, by entity path."""

    @abstractmethod
    def watch_entity_configs(self, callback: Callable[[dict[str, dict[str, str]]], None]) -> None:
        """Call `callback` with `entity_configs()` now and whenever one changes."""

    def user_credentials(self, user: str) -> dict[str, str]:
        """A user's SCRAM credentials by mechanism, in Kafka's stored form; empty if none."""
        return {k: v for k, v in self.entity_config(f"users/{sanitize(user)}").items() if k in SCRAM_MECHANISMS}

    def update_user_credentials(self, user: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Replace a user's SCRAM credentials with `change(current)`, keeping the user's other
        configs (quotas); atomic as `update_entity_config`. Returns the new credentials."""

        def entity(config: dict[str, str]) -> dict[str, str]:
            others = {k: v for k, v in config.items() if k not in SCRAM_MECHANISMS}
            return {**others, **change({k: v for k, v in config.items() if k in SCRAM_MECHANISMS})}

        path = f"users/{sanitize(user)}"
        return {k: v for k, v in self.update_entity_config(path, entity).items() if k in SCRAM_MECHANISMS}

    def all_user_credentials(self) -> dict[str, dict[str, str]]:
        """Every user with SCRAM credentials, sorted, with them (one read of the entity configs)."""
        return scram_credentials_by_user(self.entity_configs())

    @abstractmethod
    def acls(self) -> dict[ResourcePattern, list[AccessControlEntry]]:
        """Every ACL, by resource pattern (ZooKeeper: /kafka-acl and /kafka-acl-extended)."""

    @abstractmethod
    def update_acls(
        self, pattern: ResourcePattern, change: Callable[[frozenset[AccessControlEntry]], Iterable[AccessControlEntry]]
    ) -> None:
        """Replace one resource pattern's ACLs with `change(current)` (none: remove them) and
        notify the brokers; atomic as `update_entity_config` (Kafka's authorizer, too,
        updates a pattern's znode conditionally on its version)."""

    @abstractmethod
    def watch_acls(self, callback: Callable[[dict[ResourcePattern, list[AccessControlEntry]]], None]) -> None:
        """Call `callback` with `acls()` now and whenever they change."""

    @abstractmethod
    def watch_broker_configs(self, callback: Callable[[dict[str, dict[str, str]]], None]) -> None:
        """Call `callback` with `broker_configs()` now and whenever a change is notified."""

    # Watches (see the module docstring for threading) -----------------------------------------

    @abstractmethod
    def watch_brokers(self, callback: Callable[[dict[int, int]], None]) -> None:
        """Call `callback` with the live brokers, id -> broker epoch (which registration it
        is), now and whenever that changes: a broker that registers again under the same id
        (restarted within its session timeout) is a change even if the ids look the same, and
        so is a broker rewriting its registration (its endpoints), with the same epochs."""

    @abstractmethod
    def watch_controller(self, callback: Callable[[int | None], None]) -> None:
        """Call `callback` with the controller's id (None if there is none) now and on every
        election or resignation (a broker re-elected after losing the role fires again)."""

    @abstractmethod
    def watch_topic_deletions(self, callback: Callable[[list[str]], None]) -> None:
        """Call `callback` with `pending_topic_deletions()` now and whenever it changes."""

    @abstractmethod
    def watch_topics(self, callback: Callable[[set[str]], None]) -> None:
        """Call `callback` with the topic names now and whenever a topic is created or deleted."""

    # Session -----------------------------------------------------------------------------------

    def on_session_expired(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the store's event thread) when the store's session expired.

        The broker's ephemeral nodes (/brokers/ids/<id>, /controller if it held it) are gone
        by then, so a controller must resign. The store itself re-registers the broker given
        to `register_broker` once a new session is up, and the watches then fire with
        whatever changed meanwhile (a resigned controller sees `watch_controller` fire). A
        store without sessions (embedded) never calls it.
        """

    def close(self) -> None:
        """Release the store; the broker's ephemeral registrations vanish at once."""


# Under this flag (the test suites set it) a store call made on a thread that runs an asyncio
# loop raises: a blocking call there would stall every client of the broker.
LOOP_GUARD_ENV = "LOGLAKE_STORE_LOOP_GUARD"


class StoreCalledOnEventLoop(RuntimeError):
    """A metadata-store call was made on an event loop's thread (LOGLAKE_STORE_LOOP_GUARD)."""


def instrumented(store: MetadataStore, broker_id: int) -> MetadataStore:
    """`store` itself, or, under LOGLAKE_STORE_LOOP_GUARD or the store-delay fault, a proxy
    that checks or slows every call (see `loglake.faults.store_delay_file`)."""
    guard = os.environ.get(LOOP_GUARD_ENV) == "1"
    delay_file = faults.store_delay_file(broker_id)
    if not guard and delay_file is None:
        return store
    return cast(MetadataStore, _InstrumentedStore(store, guard, delay_file))


class _InstrumentedStore:
    def __init__(self, store: MetadataStore, guard: bool, delay_file: Path | None) -> None:
        self._store = store
        self._guard = guard
        self._delay_file = delay_file

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._guard and asyncio._get_running_loop() is not None:
                raise StoreCalledOnEventLoop(f"MetadataStore.{name} called on the event loop's thread")
            # Closing is not slowed: a test's broker stops at once, whatever the fault.
            if self._delay_file is not None and name != "close":
                time.sleep(faults.store_delay_s(self._delay_file))
            return attr(*args, **kwargs)

        return call
