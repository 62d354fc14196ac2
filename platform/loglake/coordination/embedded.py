"""The single-node metadata store: the controller's documents in one JSON file.

It lets `make demo` and a standalone broker run the same controller code as a cluster,
without ZooKeeper. The file is replaced atomically (write, fsync, rename) on every
change, so a crash leaves either the old or the new document.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, replace
from pathlib import Path

from loglake.coordination.model import BrokerEndpoint, PartitionState, TopicDescription
from loglake.coordination.store import MetadataStore
from loglake.errors import ErrorCode, KafkaError

METADATA_FILE = "embedded-cluster-metadata.json"


class EmbeddedMetadataStore(MetadataStore):
    def __init__(self, log_dir: str | Path) -> None:
        self._path = Path(log_dir) / METADATA_FILE
        self._lock = threading.Lock()
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._topics: dict[str, TopicDescription] = {}
        self._states: dict[str, dict[int, PartitionState]] = {}
        self._controller_epoch = 0
        self._next_producer_id = 0
        self._load()

    def _load(self) -> None:
        if not self._path.exists():
            return
        doc = json.loads(self._path.read_text())
        self._controller_epoch = doc.get("controller_epoch", 0)
        self._next_producer_id = doc.get("next_producer_id", 0)
        for name, t in doc["topics"].items():
            self._topics[name] = TopicDescription(
                name=name,
                topic_id=t["topic_id"],
                assignment={int(p): tuple(r) for p, r in t["assignment"].items()},
                config=dict(t["config"]),
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

    def _save(self) -> None:
        doc = {
            "version": 1,
            "controller_epoch": self._controller_epoch,
            "next_producer_id": self._next_producer_id,
            "topics": {
                name: {
                    "topic_id": t.topic_id,
                    "assignment": {str(p): list(r) for p, r in t.assignment.items()},
                    "config": t.config,
                    "states": {str(p): asdict(s) for p, s in self._states[name].items()},
                }
                for name, t in self._topics.items()
            },
        }
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)

    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        with self._lock:
            self._brokers[endpoint.broker_id] = endpoint

    def brokers(self) -> dict[int, BrokerEndpoint]:
        with self._lock:
            return dict(self._brokers)

    def elect_controller(self, broker_id: int) -> int | None:
        with self._lock:
            self._controller_epoch += 1
            self._save()
            return self._controller_epoch

    def topics(self) -> dict[str, TopicDescription]:
        with self._lock:
            return dict(self._topics)

    def create_topic(self, topic: TopicDescription, states: dict[int, PartitionState]) -> None:
        with self._lock:
            if topic.name in self._topics:
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
            self._topics[topic.name] = topic
            self._states[topic.name] = dict(states)
            self._save()

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
            self._save()

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        with self._lock:
            return dict(self._states.get(topic, {}))

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
