"""The cluster metadata a controller keeps: topics, their assignment and partition states.

These mirror the ZooKeeper znodes Kafka (<= 2.x) used, so either backend stores the same
documents: /brokers/topics/<t>, /config/topics/<t>, /brokers/topics/<t>/partitions/<p>/state.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A topic id on the wire. A topic created by tools older than topic ids (KIP-516) has
    none: Kafka's zero id."""
    return uuid.UUID(topic_id) if topic_id else uuid.UUID(int=0)


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker and where clients reach it (/brokers/ids/<id>)."""

    broker_id: int
    host: str
    port: int
    http_host: str
    http_port: int
    rack: str | None = None
    # Which registration this is (Kafka's broker epoch: the znode's creation zxid). A broker
    # that restarts within its session timeout keeps its id but gets a new epoch.
    epoch: int = field(default=-1, compare=False)
    # Every advertised Kafka listener: (name, security protocol, host, port). `host` and
    # `port` above are the inter-broker listener's (all brokers use the same listener name).
    # (Not compared: a registration without them reads back with its one PLAINTEXT endpoint.)
    listeners: tuple[tuple[str, str, str, int], ...] = field(default=(), compare=False)

    def kafka_endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where clients of that listener reach this broker (None: it has no such listener).
        A registration without listeners (older) has only its one endpoint."""
        if not self.listeners:
            return self.host, self.port
        for name, _, host, port in self.listeners:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state; `version` is the znode version used for CAS."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = 0


@dataclass(frozen=True)
class TopicDescription:
    """A topic's id, replica assignment (partition -> replicas, preferred leader first) and config overrides."""

    name: str
    topic_id: str
    assignment: dict[int, tuple[int, ...]]
    config: dict[str, str] = field(default_factory=dict)
    # A reassignment in progress (KIP-455), partition -> the replicas being added / removed;
    # the partition's `assignment` then holds the full set, target replicas first.
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def target_replicas(self, partition: int) -> tuple[int, ...]:
        """Where the partition is going (its replicas when no reassignment is in progress)."""
        removing = self.removing.get(partition, ())
        return tuple(r for r in self.assignment[partition] if r not in removing)

    def original_replicas(self, partition: int) -> tuple[int, ...]:
        """Where the partition was before its reassignment began."""
        adding = self.adding.get(partition, ())
        return tuple(r for r in self.assignment[partition] if r not in adding)

    def is_reassigning(self, partition: int) -> bool:
        return bool(self.adding.get(partition) or self.removing.get(partition))

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(self.assignment[0]) if self.assignment else 0


@dataclass(frozen=True)
class LeaderAndIsrPartition:
    """One partition of a LeaderAndIsr decision the controller sends to a replica."""

    topic: str
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    state: PartitionState
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LogDirFailure:
    """A broker's log dir went offline, taking its replicas of `partitions` with it."""

    broker_id: int
    partitions: tuple[tuple[str, int], ...]


# The leader a deleted topic's partitions carry in an UpdateMetadata (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2


@dataclass(frozen=True)
class MetadataUpdate:
    """What the controller's UpdateMetadata tells every broker: the live brokers, and the
    documents and partition states of the topics that changed (of every topic when `full`:
    a broker that joined, or a new controller). Deleted topics are named in `deleted`."""

    controller_id: int
    controller_epoch: int
    brokers: dict[int, BrokerEndpoint]
    topics: dict[str, TopicDescription]
    # The changed partitions' states, by topic (every partition of every topic when full).
    states: dict[str, dict[int, PartitionState]]
    deleted: frozenset[str] = frozenset()
    full: bool = False
