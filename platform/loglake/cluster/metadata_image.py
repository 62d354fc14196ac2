"""What a broker knows about the cluster: brokers, topics, partition leaders and ISRs.

The controller's UpdateMetadata requests change it (`updated`): a new image built from the
old one and the update, so readers (Metadata requests, HTTP describe) take the current
reference and never see half an update. An incremental update copies the outer dicts and
replaces only the changed topics' entries.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from loglake.coordination.model import BrokerEndpoint, MetadataUpdate, PartitionState, TopicDescription, topic_uuid
from loglake.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class MetadataImage:
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    topics: dict[str, TopicDescription] = field(default_factory=dict)
    partition_states: dict[str, dict[int, PartitionState]] = field(default_factory=dict)
    controller_id: int = -1
    controller_epoch: int = 0
    cluster_id: str = ""

    def topic(self, name: str) -> TopicDescription:
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        self.topic(topic)
        state = self.partition_states.get(topic, {}).get(partition)
        if state is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} has no partition {partition}",
            )
        return state

    def partition_count(self, topic: str) -> int:
        return self.topic(topic).num_partitions

    def topic_snapshot(self) -> dict[str, tuple[uuid.UUID, int]]:
        """Every topic's id and partition count: what consumer groups subscribe to and are assigned."""
        return {name: (topic_uuid(t.topic_id), t.num_partitions) for name, t in self.topics.items()}

    def updated(self, update: MetadataUpdate) -> MetadataImage:
        """This image with the controller's update applied. A partition state never goes back
        to an older version of its znode (the leader installs its own ISR changes at once; a
        controller update read before them may arrive later)."""
        if update.full:
            topics: dict[str, TopicDescription] = {}
            states: dict[str, dict[int, PartitionState]] = {}
        else:
            topics = dict(self.topics)
            states = dict(self.partition_states)
            for name in update.deleted:
                topics.pop(name, None)
                states.pop(name, None)
        for name, topic in update.topics.items():
            known = self.topics.get(name)
            current = self.partition_states.get(name, {}) if known and known.topic_id == topic.topic_id else {}
            merged = dict(current) if not update.full else {}
            for p, state in update.states.get(name, {}).items():
                old = current.get(p)
                merged[p] = old if old is not None and old.version > state.version else state
            topics[name] = topic
            states[name] = merged
        return MetadataImage(
            brokers=dict(update.brokers),
            topics=topics,
            partition_states=states,
            controller_id=update.controller_id,
            controller_epoch=update.controller_epoch,
            cluster_id=self.cluster_id,
        )

    def with_partition_state(self, topic: str, partition: int, state: PartitionState) -> MetadataImage:
        """This image with one partition's newer state (a leader's own ISR change)."""
        current = self.partition_states.get(topic)
        if current is None or topic not in self.topics:
            return self
        old = current.get(partition)
        if old is not None and old.version >= state.version:
            return self
        states = dict(self.partition_states)
        states[topic] = {**current, partition: state}
        return replace(self, partition_states=states)
