"""The single-node metadata store: the controller's documents in one JSON file.

It lets `make demo` and a standalone broker run the same controller code as a cluster,
without ZooKeeper. The file is replaced atomically (write, fsync, rename) on every
change, so a crash leaves either the old or the new document; a change that cannot be
written (a full or failing disk) is not made, and fails with KAFKA_STORAGE_ERROR.

The single node is always the controller once it called `elect_controller` (each call
is a new election with the next epoch). There is no session: nothing expires, and
registrations live as long as the object. Watches fire once when installed and then
synchronously, on the thread of the call that changed what they watch.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from loglake.coordination.model import BrokerEndpoint, LogDirFailure, PartitionState, TopicDescription
from loglake.coordination.store import MetadataStore
from loglake.errors import ErrorCode, KafkaError
from loglake.security.acls import AccessControlEntry, PatternType, ResourcePattern, ResourceType
from loglake.storage.fileutil import atomic_write_text

METADATA_FILE = "embedded-cluster-metadata.json"


class _LocalWatch:
    """A callback and the last value it was given (so it only hears of changes)."""

    _UNSET = object()

    def __init__(self, kind: str, callback: Callable[[Any], None]) -> None:
        self.kind = kind
        self.callback = callback
        self.last: Any = self._UNSET


class EmbeddedMetadataStore(MetadataStore):
    def __init__(self, log_dir: str | Path) -> None:
        self._path = Path(log_dir) / METADATA_FILE
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._controller_id: int | None = None
        self._reset_persistent()
        self._watches: list[_LocalWatch] = []
        # ISR change notifications (one broker: its own), kept in memory like the watches.
        self._isr_changes: list[list[tuple[str, int]]] = []
        self._isr_changes_notified = 0
        self._log_dir_failures: list[LogDirFailure] = []
        self._log_dir_failures_notified = 0
        # Held while callbacks run, so each watch hears of changes one at a time and in
        # order; reentrant so a callback may itself change the store.
        self._notify_lock = threading.RLock()
        self._load()

    def _reset_persistent(self) -> None:
        """What the file holds, empty (before `_load`); registrations and watches stay."""
        self._cluster_id: str | None = None
        self._controller_epoch = 0
        self._next_producer_id = 0
        self._pending_deletions: set[str] = set()
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._entity_configs: dict[str, dict[str, str]] = {}  # users/<u>, clients/<c>, ...
        self._acls: dict[ResourcePattern, list[AccessControlEntry]] = {}
        self._topics: dict[str, TopicDescription] = {}
        self._states: dict[str, dict[int, PartitionState]] = {}
        self._tiered: dict[str, dict[int, int]] = {}

    def _load(self) -> None:
        if not self._path.exists():
            return
        doc = json.loads(self._path.read_text())
        self._cluster_id = doc.get("cluster_id")
        self._controller_epoch = doc.get("controller_epoch", 0)
        self._next_producer_id = doc.get("next_producer_id", 0)
        self._pending_deletions = set(doc.get("pending_deletions", []))
        self._broker_configs = {entity: dict(c) for entity, c in doc.get("broker_configs", {}).items()}
        self._entity_configs = {entity: dict(c) for entity, c in doc.get("entity_configs", {}).items()}
        for a in doc.get("acls", []):
            pattern = ResourcePattern(ResourceType(a["resource_type"]), a["name"], PatternType(a["pattern_type"]))
            self._acls[pattern] = [AccessControlEntry.from_document(e) for e in a["acls"]]
        for name, t in doc["topics"].items():
            self._topics[name] = TopicDescription(
                name=name,
                topic_id=t["topic_id"],
                assignment={int(p): tuple(r) for p, r in t["assignment"].items()},
                config=dict(t["config"]),
                adding={int(p): tuple(r) for p, r in t.get("adding_replicas", {}).items()},
                removing={int(p): tuple(r) for p, r in t.get("removing_replicas", {}).items()},
            )
            self._states[name] = {
                int(p): PartitionState(
                    leader=s["leader"],
                    leader_epoch=s["leader_epoch"],
                    isr=tuple(s["isr"]),
                    controller_epoch=s["controller_epoch"],
                    version=s["version"],
                )
                for p, s in t["states"].items()
            }
            self._tiered[name] = {int(p): o for p, o in t.get("tiered_offsets", {}).items()}

    def _save(self) -> None:
        doc = {
            "version": 1,
            "cluster_id": self._cluster_id,
            "controller_epoch": self._controller_epoch,
            "next_producer_id": self._next_producer_id,
            "pending_deletions": sorted(self._pending_deletions),
            "broker_configs": self._broker_configs,
            "entity_configs": self._entity_configs,
            "acls": [
                {
                    "resource_type": int(p.resource_type),
                    "name": p.name,
                    "pattern_type": int(p.pattern_type),
                    "acls": [e.to_document() for e in entries],
                }
                for p, entries in self._acls.items()
            ],
            "topics": {
                name: {
                    "topic_id": t.topic_id,
                    "assignment": {str(p): list(r) for p, r in t.assignment.items()},
                    "config": t.config,
                    "adding_replicas": {str(p): list(r) for p, r in t.adding.items() if r},
                    "removing_replicas": {str(p): list(r) for p, r in t.removing.items() if r},
                    "states": {str(p): asdict(s) for p, s in self._states[name].items()},
                    "tiered_offsets": {str(p): o for p, o in self._tiered.get(name, {}).items()},
                }
                for name, t in self._topics.items()
            },
        }
        try:
            atomic_write_text(self._path, json.dumps(doc, indent=1, sort_keys=True))
        except OSError as exc:
            # The change is not made: memory goes back to what the file holds.
            self._reset_persistent()
            self._load()
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"the cluster metadata could not be written to {self._path}: {exc}"
            ) from exc

    # Watches -------------------------------------------------------------------------------

    def _current(self, kind: str) -> Any:
        with self._lock:
            if kind == "brokers":
                return {b.broker_id: b.epoch for b in self._brokers.values()}
            if kind == "controller":
                # The epoch makes every election a change, even by the same broker.
                return (self._controller_id, self._controller_epoch if self._controller_id is not None else None)
            if kind == "topics":
                return set(self._topics)
            if kind == "deletions":
                return sorted(self._pending_deletions)
            if kind == "isr_changes":
                return self._isr_changes_notified
            if kind == "log_dir_failures":
                return self._log_dir_failures_notified
            if kind == "broker_configs":
                return {entity: dict(c) for entity, c in self._broker_configs.items()}
            if kind == "entity_configs":
                return {entity: dict(c) for entity, c in self._entity_configs.items()}
            if kind == "acls":
                return {p: list(entries) for p, entries in self._acls.items()}
            raise ValueError(kind)

    def _deliver(self, watch: _LocalWatch) -> None:
        value = self._current(watch.kind)
        if value == watch.last:
            return
        watch.last = value
        watch.callback(value[0] if watch.kind == "controller" else value)

    def _notify(self, *kinds: str) -> None:
        with self._notify_lock:
            for watch in list(self._watches):
                if watch.kind in kinds:
                    self._deliver(watch)

    def _watch(self, kind: str, callback: Callable[[Any], None]) -> None:
        watch = _LocalWatch(kind, callback)
        with self._notify_lock:
            self._watches.append(watch)
            self._deliver(watch)

    def watch_brokers(self, callback: Callable[[dict[int, int]], None]) -> None:
        self._watch("brokers", callback)

    def watch_controller(self, callback: Callable[[int | None], None]) -> None:
        self._watch("controller", callback)

    def watch_topic_deletions(self, callback: Callable[[list[str]], None]) -> None:
        self._watch("deletions", callback)

    def watch_topics(self, callback: Callable[[set[str]], None]) -> None:
        self._watch("topics", callback)

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        with self._lock:
            self._isr_changes.append(list(partitions))
            self._isr_changes_notified += 1
        self._notify("isr_changes")

    def take_isr_changes(self) -> list[tuple[str, int]]:
        with self._lock:
            taken = [tp for change in self._isr_changes for tp in change]
            self._isr_changes.clear()
        return taken

    def watch_isr_changes(self, callback: Callable[[object], None]) -> None:
        self._watch("isr_changes", callback)

    def notify_log_dir_failure(self, broker_id: int, partitions: list[tuple[str, int]]) -> None:
        with self._lock:
            self._log_dir_failures.append(LogDirFailure(broker_id, tuple(partitions)))
            self._log_dir_failures_notified += 1
        self._notify("log_dir_failures")

    def take_log_dir_failures(self) -> list[LogDirFailure]:
        with self._lock:
            taken, self._log_dir_failures = self._log_dir_failures, []
        return taken

    def watch_log_dir_failures(self, callback: Callable[[object], None]) -> None:
        self._watch("log_dir_failures", callback)

    def entity_config(self, entity: str) -> dict[str, str]:
        with self._lock:
            return dict(self._entity_configs.get(entity, {}))

    def update_entity_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        with self._lock:
            config = dict(change(dict(self._entity_configs.get(entity, {}))))
            if config:
                self._entity_configs[entity] = config
            else:
                self._entity_configs.pop(entity, None)
            self._save()
        self._notify("entity_configs")
        return dict(config)

    def entity_configs(self) -> dict[str, dict[str, str]]:
        return self._current("entity_configs")

    def watch_entity_configs(self, callback: Callable[[dict[str, dict[str, str]]], None]) -> None:
        self._watch("entity_configs", callback)

    def acls(self) -> dict[ResourcePattern, list[AccessControlEntry]]:
        return self._current("acls")

    def update_acls(
        self, pattern: ResourcePattern, change: Callable[[frozenset[AccessControlEntry]], Iterable[AccessControlEntry]]
    ) -> None:
        with self._lock:
            entries = sorted(change(frozenset(self._acls.get(pattern, []))), key=repr)
            if entries:
                self._acls[pattern] = entries
            else:
                self._acls.pop(pattern, None)
            self._save()
        self._notify("acls")

    def watch_acls(self, callback: Callable[[dict[ResourcePattern, list[AccessControlEntry]]], None]) -> None:
        self._watch("acls", callback)

    def watch_broker_configs(self, callback: Callable[[dict[str, dict[str, str]]], None]) -> None:
        self._watch("broker_configs", callback)

    def close(self) -> None:
        with self._notify_lock:
            self._watches.clear()

    # The store ---------------------------------------------------------------------------------

    def get_or_create_cluster_id(self, proposed: str) -> str:
        with self._lock:
            if self._cluster_id is None:
                self._cluster_id = proposed
                self._save()
            return self._cluster_id

    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        with self._lock:
            self._brokers[endpoint.broker_id] = endpoint
        self._notify("brokers")

    def brokers(self) -> dict[int, BrokerEndpoint]:
        with self._lock:
            return dict(self._brokers)

    def elect_controller(self, broker_id: int) -> int | None:
        with self._lock:
            self._controller_epoch += 1
            self._controller_id = broker_id
            self._save()
            epoch = self._controller_epoch
        self._notify("controller")
        return epoch

    def controller_id(self) -> int | None:
        with self._lock:
            return self._controller_id

    def controller_epoch(self) -> int:
        with self._lock:
            return self._controller_epoch

    def topics(self) -> dict[str, TopicDescription]:
        with self._lock:
            return dict(self._topics)

    def topics_named(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        with self._lock:
            return {name: topic for name in names if (topic := self._topics.get(name)) is not None}

    def create_topic(self, topic: TopicDescription, states: dict[int, PartitionState]) -> None:
        with self._lock:
            if topic.name in self._topics:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
            self._topics[topic.name] = topic
            self._states[topic.name] = dict(states)
            self._save()
        self._notify("topics")

    def update_topic(self, topic: TopicDescription, new_states: dict[int, PartitionState]) -> None:
        with self._lock:
            if topic.name not in self._topics:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
            self._topics[topic.name] = topic
            self._states[topic.name].update(new_states)
            self._save()

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if self._topics.pop(name, None) is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            del self._states[name]
            self._tiered.pop(name, None)
            self._pending_deletions.discard(name)
            self._save()
        self._notify("topics", "deletions")

    def request_topic_deletion(self, name: str) -> None:
        with self._lock:
            if name not in self._topics:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            if name in self._pending_deletions:
                return
            self._pending_deletions.add(name)
            self._save()
        self._notify("deletions")

    def pending_topic_deletions(self) -> list[str]:
        with self._lock:
            return sorted(self._pending_deletions)

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        with self._lock:
            return dict(self._states.get(topic, {}))

    def partition_states_of(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], PartitionState]:
        with self._lock:
            return {
                (topic, p): state
                for topic, p in partitions
                if (state := self._states.get(topic, {}).get(p)) is not None
            }

    def update_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> PartitionState | None:
        with self._lock:
            current = self._states.get(topic, {}).get(partition)
            if current is None or current.version != expected_version:
                return None
            stored = replace(state, version=expected_version + 1)
            self._states[topic][partition] = stored
            self._save()
            return stored

    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        with self._lock:
            first = self._next_producer_id
            self._next_producer_id += size
            self._save()
            return first

    def tiered_offset(self, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._tiered.get(topic, {}).get(partition)

    def record_tiered_offset(self, topic: str, partition: int, offset: int) -> int:
        with self._lock:
            if partition not in self._states.get(topic, {}):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}")
            offsets = self._tiered.setdefault(topic, {})
            if offset > offsets.get(partition, -1):
                offsets[partition] = offset
                self._save()
            return offsets[partition]

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return self._current("broker_configs")

    def update_broker_config(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, str]:
        with self._lock:
            updated = dict(change(dict(self._broker_configs.get(entity, {}))))
            self._broker_configs[entity] = updated
            self._save()
        self._notify("broker_configs")
        return updated
