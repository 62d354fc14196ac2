"""What a broker knows about the cluster: brokers, topics, partition leaders and ISRs.

The controller's UpdateMetadata decisions replace the image whole; readers (Metadata
requests, HTTP describe) take the current reference, so they never see half an update.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from loglake.coordination.model import BrokerEndpoint, PartitionState, TopicDescription, topic_uuid
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
