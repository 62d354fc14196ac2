"""The metadata store interface the controller works against.

Two backends implement it: `EmbeddedMetadataStore` (a single node, no ZooKeeper, a file
in the log dir) and the ZooKeeper store (kazoo) for clusters. Partition state updates
are compare-and-set on a version, the way Kafka updated znodes, so a controller with a
stale view cannot overwrite a newer decision.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from loglake.coordination.model import BrokerEndpoint, PartitionState, TopicDescription


class MetadataStore(ABC):
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
    def create_topic(self, topic: TopicDescription, states: dict[int, PartitionState]) -> None:
        """Store a new topic with its initial partition states; TOPIC_ALREADY_EXISTS if taken."""

    @abstractmethod
    def update_topic(self, topic: TopicDescription, new_states: dict[int, PartitionState]) -> None:
        """Replace a topic's assignment/config, adding states for new partitions."""

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Remove a topic and its partition states."""

    @abstractmethod
    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        """Current states of a topic's partitions, each with its version."""

    @abstractmethod
    def update_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> PartitionState | None:
        """Compare-and-set: write `state` if the stored version is `expected_version`.

        Returns the stored state with its new version, or None when the version moved on.
        """

    @abstractmethod
    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Reserve `size` producer ids for `broker_id` (/latest_producer_id_block); the first id."""
