"""The controller: topic administration, replica assignment and leader decisions.

It writes its decisions to a `MetadataStore` first and only then tells the brokers,
through a `BrokerChannel`, with its controller epoch on every request so brokers can
fence a deposed controller. The embedded single node and a ZooKeeper cluster run this
same code; only the store and the channel differ.

The active controller keeps the topics and partition states in memory (Kafka's
ControllerContext), read whole from the store once when it takes office and then kept
current by its own writes, the ISR changes leaders report, and a re-read of any state
whose compare-and-set failed. Each event's decisions go out as one LeaderAndIsr per
replica broker, then one UpdateMetadata to every broker carrying the changed partition
states (everything when it takes office or a broker joins): brokers never read the store
for them, and the work per change is proportional to the change.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Protocol

from loglake.cluster.assignment import assign_replicas, validate_manual_assignment
from loglake.config import LogConfig, validate_topic_configs, validate_topic_name
from loglake.coordination.model import (
    BrokerEndpoint,
    LeaderAndIsrPartition,
    LogDirFailure,
    MetadataUpdate,
    PartitionState,
    TopicDescription,
)
from loglake.coordination.store import MetadataStore
from loglake.errors import ErrorCode, KafkaError
from loglake.internal_topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)


class BrokerChannel(Protocol):
    """How controller decisions reach the brokers (a direct call when embedded)."""

    def send_leader_and_isr(
        self, broker_id: int, controller_epoch: int, partitions: list[LeaderAndIsrPartition]
    ) -> None: ...

    def send_stop_replica(
        self, broker_id: int, controller_epoch: int, partitions: list[tuple[str, int]], delete: bool
    ) -> None: ...

    def send_update_metadata(self, update: MetadataUpdate) -> None:
        """To every live broker, after the LeaderAndIsr requests sent before it."""


@dataclass
class ControllerStats:
    """Leader elections this broker made as controller (Kafka's ControllerStats), read by
    the broker's metrics at scrape time. An unclean one chose a leader outside the ISR."""

    leader_elections: int = 0
    unclean_leader_elections: int = 0

    def count(self, old: PartitionState, new: PartitionState) -> None:
        if new.leader >= 0 and new.leader != old.leader:
            self.leader_elections += 1
            if new.leader not in old.isr:
                self.unclean_leader_elections += 1


class Controller:
    """Every broker has one; at most one is active (elected through the store).

    Administration that only writes the store (creating a topic, requesting a deletion)
    works on any broker: the active controller notices through the store's watches and
    tells the brokers. Everything that must send decisions needs the active controller
    (NOT_CONTROLLER otherwise).
    """

    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        channel: BrokerChannel,
        topic_defaults: Callable[[], LogConfig] = LogConfig,
    ) -> None:
        self._store = store
        self._broker_id = broker_id
        self._channel = channel
        # The broker's current topic defaults (server.properties and dynamic broker configs),
        # under a topic's own overrides: unclean.leader.election.enable may be set either way.
        self._topic_defaults = topic_defaults
        self._lock = threading.RLock()
        self.epoch: int | None = None
        # The live brokers as the broker events gave them: id -> broker epoch.
        self._broker_epochs: dict[int, int] = {}
        # The active controller's context: topics, partition states and live brokers' endpoints.
        self._topics: dict[str, TopicDescription] = {}
        self._states: dict[str, dict[int, PartitionState]] = {}
        self._brokers: dict[int, BrokerEndpoint] = {}
        # What the current event changed, sent when it ends (`_flush`): LeaderAndIsr
        # entries by broker, then the changed partitions in one UpdateMetadata, then the
        # replicas to stop and delete by broker (after the LeaderAndIsr that may precede
        # them in the same event, as Kafka's ControllerBrokerRequestBatch orders them).
        self._leader_and_isr: dict[int, list[LeaderAndIsrPartition]] = {}
        self._stop_replica: dict[int, list[tuple[str, int]]] = {}
        self._changed: dict[str, set[int]] = {}
        self._deleted: set[str] = set()
        # Replicas on a failed log dir, by broker (Kafka's replicasOnOfflineDirs): not
        # eligible to lead or be in sync until their broker registers again (restarted).
        self._offline_replicas: dict[int, set[tuple[str, int]]] = {}
        self.stats = ControllerStats()

    @property
    def _live(self) -> set[int]:
        return set(self._broker_epochs)

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    def startup(self) -> bool:
        """Try to become the controller; on success, bring every partition online."""
        with self._lock:
            self.epoch = self._store.elect_controller(self._broker_id)
            if self.epoch is None:
                return False
            self._brokers = self._store.brokers()
            self._broker_epochs = {b.broker_id: b.epoch for b in self._brokers.values()}
            # Failures the previous controller handled are in the partition states already.
            self._offline_replicas = {}
            self._record_log_dir_failures(self._store.take_log_dir_failures())
            self._load_context()
            self._store.take_isr_changes()  # the states just read include them
            everything = [(name, p) for name, topic in self._topics.items() for p in topic.assignment]
            self._elect_offline_leaders(everything, self._live)
            self._remove_dead_from_isr(everything, self._live)
            for topic in self._topics.values():
                self._send_leader_and_isr(topic, topic.assignment)
            self._flush(full=True)
            for name in self._store.pending_topic_deletions():
                self._delete_topic(name)
            # Reassignments survive failover: their state is in the topics' documents.
            self._resume_reassignments()
            self._take_reassignment_request()
            self._flush()
            return True

    def _load_context(self) -> None:
        """Read every topic and partition state (pipelined): once, on taking office."""
        self._topics = self._store.topics()
        states = self._store.partition_states_of(
            (name, p) for name, topic in self._topics.items() for p in topic.assignment
        )
        self._states = {name: {} for name in self._topics}
        for (name, p), state in states.items():
            self._states[name][p] = state
        self._leader_and_isr, self._stop_replica, self._changed, self._deleted = {}, {}, {}, set()

    def resign(self) -> None:
        """Stop acting as controller (the store session that elected us is gone)."""
        with self._lock:
            self.epoch = None
            self._leader_and_isr, self._stop_replica, self._changed, self._deleted = {}, {}, {}, set()

    # Reactions to the store's watches (active controller only) -------------------------

    def on_brokers_changed(self, brokers: dict[int, int]) -> None:
        """The live brokers (id -> broker epoch) changed: re-elect leaders of partitions
        that lost theirs, drop dead replicas from ISRs, and tell joining brokers what they
        host.

        Only the given view decides who is alive (not a fresh read of the store), so that
        each event is handled as what it says even when the store has moved on: a later
        event brings the later view."""
        with self._lock:
            if self.epoch is None:
                return
            live = set(brokers)
            # Registered again under the same id (restarted within its session timeout):
            # the new process knows nothing. Like Kafka, treat it as failed and then
            # started: leadership moves away (its log may lack unflushed records) and it
            # rejoins as a follower.
            known = self._live
            bounced = {b for b in live & known if brokers[b] != self._broker_epochs[b]}
            dead, joined = known - live, (live - known) | bounced
            self._broker_epochs = dict(brokers)
            for broker in dead | joined:
                # A restarted broker tried its log dirs again: what loaded is online.
                self._offline_replicas.pop(broker, None)
            self._brokers = {b: e for b, e in self._store.brokers().items() if b in live}
            if not dead and not joined:
                # The same brokers, one registered again with other endpoints: every
                # broker's metadata must tell clients the new ones (Kafka: UpdateMetadata).
                self._flush(brokers_changed=True)
                return
            # Only the partitions with a replica on a broker that came or went can change.
            changing = dead | joined
            affected = [
                (name, p)
                for name, topic in self._topics.items()
                for p, replicas in topic.assignment.items()
                if changing.intersection(replicas)
            ]
            touched = set(self._elect_offline_leaders(affected, live - bounced))
            touched |= set(self._remove_dead_from_isr(affected, live - bounced))
            if bounced:
                # An ISR that was only the bounced broker: it is still the best copy.
                touched |= set(self._elect_offline_leaders(affected, live))
            if joined:
                touched |= {(n, p) for n, p in affected if joined.intersection(self._topics[n].assignment[p])}
            for name, partitions in _by_topic(touched).items():
                self._send_leader_and_isr(self._topics[name], sorted(partitions))
            # A joining broker learns everything; the others learn the changes.
            self._flush(full=bool(joined), brokers_changed=True)

    def on_topics_changed(self, names: set[str]) -> None:
        """Topics written to the store by other brokers: bring their partitions online."""
        with self._lock:
            if self.epoch is None:
                return
            # Created by another broker straight into the store: read just those.
            new = self._store.topics_named(names - set(self._topics))
            if not new:
                return
            states = self._store.partition_states_of((n, p) for n, t in new.items() for p in t.assignment)
            for name, topic in sorted(new.items()):
                self._topics[name] = topic
                self._states[name] = {p: s for (n, p), s in states.items() if n == name}
                self._send_leader_and_isr(topic, topic.assignment)
            self._flush()

    def on_topic_deletions(self, names: list[str]) -> None:
        with self._lock:
            if self.epoch is None:
                return
            for name in names:
                self._delete_topic(name)
            self._flush()

    def on_isr_changes(self, _token: object = None) -> None:
        """Leaders changed ISRs: a reassignment whose target replicas all joined completes."""
        with self._lock:
            if self.epoch is None:
                return
            changed = set(self._store.take_isr_changes())
            if not changed:
                return
            # The leaders wrote them: read them, and tell every broker (Kafka's controller
            # answers ISR change notifications with an UpdateMetadata too).
            for (name, p), state in self._store.partition_states_of(sorted(changed)).items():
                if name in self._states:
                    self._states[name][p] = state
                    self._changed.setdefault(name, set()).add(p)
            for name, p in sorted(changed):
                topic = self._topics.get(name)
                if topic is not None and p in topic.assignment and topic.is_reassigning(p):
                    self._maybe_complete_reassignment(topic, p)
            self._flush()

    def on_log_dir_failures(self, _token: object = None) -> None:
        """Brokers lost log dirs (KIP-112): their replicas there can neither lead nor stay
        in sync. Partitions they led get a new leader from the rest of the ISR (unclean
        only if configured; offline, leader -1, without a candidate); the others drop
        them from the ISR. Every replica of those partitions is told, the failed broker
        included (it stops fetching them)."""
        with self._lock:
            if self.epoch is None:
                return
            touched = self._record_log_dir_failures(self._store.take_log_dir_failures())
            if not touched:
                return
            concerned = [
                (n, p) for n, ps in touched.items() if n in self._topics for p in ps if p in self._topics[n].assignment
            ]
            self._elect_offline_leaders(concerned, self._live)
            self._remove_dead_from_isr(concerned, self._live)
            for name, partitions in _by_topic(concerned).items():
                self._send_leader_and_isr(self._topics[name], sorted(partitions))
            self._flush()

    def _record_log_dir_failures(self, failures: list[LogDirFailure]) -> dict[str, set[int]]:
        """Remember the offline replicas of live brokers (a dead broker's failure is void:
        its restart tries the dir again); returns the partitions concerned, by topic."""
        touched: dict[str, set[int]] = {}
        for failure in failures:
            if failure.broker_id not in self._live:
                continue
            log.warning(
                "broker %d lost a log dir: its replicas of %d partitions are offline",
                failure.broker_id,
                len(failure.partitions),
            )
            self._offline_replicas.setdefault(failure.broker_id, set()).update(failure.partitions)
            for name, p in failure.partitions:
                touched.setdefault(name, set()).add(p)
        return touched

    def _eligible(self, name: str, p: int, live: set[int]) -> set[int]:
        """The brokers of `live` whose replica of the partition is not on a failed log dir."""
        if not self._offline_replicas:
            return live
        return {b for b in live if (name, p) not in self._offline_replicas.get(b, ())}

    def on_reassignment_request(self, _token: object = None) -> None:
        """A tool wrote /admin/reassign_partitions: start those reassignments, remove the request."""
        with self._lock:
            if self.epoch is not None:
                self._take_reassignment_request()
                self._flush()

    def _take_reassignment_request(self) -> None:
        request = self._store.reassignment_request()
        if request:
            for (name, p), error in self.alter_partition_reassignments(request).items():
                if error is not None:
                    log.warning("reassignment of %s-%d from the request node refused: %s", name, p, error.message)
        self._store.delete_reassignment_request()

    def _resume_reassignments(self) -> None:
        for topic in list(self._topics.values()):
            for p in sorted(topic.assignment):
                if topic.is_reassigning(p):
                    topic = self._maybe_complete_reassignment(topic, p)

    def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], tuple[int, ...] | None]
    ) -> dict[tuple[str, int], KafkaError | None]:
        """AlterPartitionReassignments (KIP-455): move each partition to its target replicas,
        or (target None) cancel its reassignment. The new replicas are added to the replica
        set at once and catch up as followers; once all of them are in the ISR the
        partition shrinks to the target (`on_isr_changes`). Returns each partition's outcome."""
        with self._lock:
            self._require_active()
            deleting = set(self._store.pending_topic_deletions())
            brokers = set(self._store.brokers())
            results: dict[tuple[str, int], KafkaError | None] = {}
            for (name, p), target in targets.items():
                topic = self._topics.get(name)
                try:
                    if topic is None or p not in topic.assignment or name in deleting:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                    if target is None:
                        self._cancel_reassignment(topic, p)
                    else:
                        _validate_reassignment_target(tuple(target), brokers)
                        self._start_reassignment(topic, p, tuple(target))
                    results[(name, p)] = None
                except KafkaError as exc:
                    results[(name, p)] = exc
            self._flush()
            return results

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of each partition being
        reassigned among `partitions` (None: all); any broker can answer from the store."""
        topics = self._store.topics() if partitions is None else self._store.topics_named({t for t, _ in partitions})
        wanted = (
            [(name, p) for name, topic in topics.items() for p in topic.assignment]
            if partitions is None
            else partitions
        )
        result = {}
        for name, p in wanted:
            topic = topics.get(name)
            if topic is not None and p in topic.assignment and topic.is_reassigning(p):
                result[(name, p)] = (topic.assignment[p], topic.adding.get(p, ()), topic.removing.get(p, ()))
        return result

    def _start_reassignment(self, topic: TopicDescription, p: int, target: tuple[int, ...]) -> TopicDescription:
        original = topic.original_replicas(p)
        adding = tuple(r for r in target if r not in original)
        removing = tuple(r for r in original if r not in target)
        if not adding and not removing:
            # The target is where the partition was (a new order, or a running
            # reassignment taken back): replicas added meanwhile go.
            dropped = tuple(r for r in topic.assignment[p] if r not in target)
            return self._finish_reassignment(topic, p, target, dropped, wait_for_isr=False)
        # A new target for a partition already moving: replicas added for the old target
        # and in neither the new target nor the original set are dropped.
        dropped = tuple(r for r in topic.adding.get(p, ()) if r not in target)
        moving = replace(
            topic,
            assignment={**topic.assignment, p: target + removing},
            adding=_with(topic.adding, p, adding),
            removing=_with(topic.removing, p, removing),
        )
        self._update_topic(moving)
        self._stop_replicas(topic.name, p, dropped)
        # A new leader epoch tells the replicas of the new set (the new ones start fetching).
        self._bump_leader_epoch(moving, p, dropped)
        self._send_leader_and_isr(moving, [p])
        return self._maybe_complete_reassignment(moving, p)

    def _maybe_complete_reassignment(self, topic: TopicDescription, p: int) -> TopicDescription:
        """Shrink to the target once every target replica is in the ISR (moving leadership
        off a leaving leader first); else leave the reassignment running."""
        if not topic.is_reassigning(p):
            return topic
        return self._finish_reassignment(topic, p, topic.target_replicas(p), topic.removing.get(p, ()), True)

    def _cancel_reassignment(self, topic: TopicDescription, p: int) -> TopicDescription:
        if not topic.is_reassigning(p):
            raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {topic.name}-{p} in progress")
        return self._finish_reassignment(topic, p, topic.original_replicas(p), topic.adding.get(p, ()), False)

    def _finish_reassignment(
        self, topic: TopicDescription, p: int, final: tuple[int, ...], dropped: tuple[int, ...], wait_for_isr: bool
    ) -> TopicDescription:
        """Make `final` the partition's replicas: a leader among them (the current one if it
        stays), the ISR without the others, a new leader epoch; then stop and delete the
        `dropped` replicas. With `wait_for_isr`, only once every replica of `final` is in
        the ISR (else `topic` is returned unchanged). REASSIGNMENT_IN_PROGRESS if no
        replica of `final` is alive and in sync to lead."""
        epoch = self._require_active()
        while True:
            state = self._states[topic.name][p]
            if wait_for_isr and not set(final) <= set(state.isr):
                return topic
            leader = state.leader
            if leader not in final or leader not in self._live:
                candidates = [r for r in final if r in self._live and r in state.isr]
                if not candidates:
                    if wait_for_isr:
                        return topic  # a target replica must come back first
                    raise KafkaError(
                        ErrorCode.REASSIGNMENT_IN_PROGRESS,
                        f"none of the replicas {list(final)} of {topic.name}-{p} is alive and in sync",
                    )
                leader = candidates[0]
            isr = tuple(r for r in state.isr if r in final)
            new_state = PartitionState(leader, state.leader_epoch + 1, isr, epoch)
            if self._write_state(topic.name, p, new_state, state):
                self.stats.count(state, new_state)
                break
            # The leader changed the ISR meanwhile: decide again on the new state.
        finished = replace(
            topic,
            assignment={**topic.assignment, p: final},
            adding=_with(topic.adding, p, ()),
            removing=_with(topic.removing, p, ()),
        )
        self._update_topic(finished)
        self._send_leader_and_isr(finished, [p])
        self._stop_replicas(topic.name, p, dropped)
        return finished

    def _bump_leader_epoch(self, topic: TopicDescription, p: int, leaving_isr: tuple[int, ...]) -> None:
        epoch = self._require_active()
        while True:
            state = self._states[topic.name][p]
            isr = tuple(r for r in state.isr if r not in leaving_isr)
            bumped = PartitionState(state.leader, state.leader_epoch + 1, isr, epoch)
            if self._write_state(topic.name, p, bumped, state):
                return

    def _stop_replicas(self, name: str, p: int, replicas) -> None:
        self._require_active()
        for r in replicas:
            self._stop_replica.setdefault(r, []).append((name, p))

    def elect_preferred_leaders(self) -> int:
        """Move leadership back to each partition's preferred (first) replica where it is
        alive and in sync (auto.leader.rebalance.enable). Returns how many moved."""
        with self._lock:
            if self.epoch is None:
                return 0
            results = self.elect_leaders(None, ElectionType.PREFERRED)
            return sum(error is None for error in results.values())

    def elect_leaders(
        self, partitions: list[tuple[str, int]] | None, election_type: ElectionType
    ) -> dict[tuple[str, int], KafkaError | None]:
        """ElectLeaders (KIP-460) for `partitions` (None: all). PREFERRED makes the first
        replica leader if it is alive and in the ISR; UNCLEAN gives a partition without a
        live leader the first live ISR member or, failing that, any live replica. Returns
        each partition's outcome: None if its leader changed, else Kafka's error."""
        with self._lock:
            epoch = self._require_active()
            topics = self._topics
            if partitions is None:
                partitions = [(name, p) for name, topic in topics.items() for p in topic.assignment]
            deleting = set(self._store.pending_topic_deletions())
            live = self._live  # the view the broker events gave (see on_brokers_changed)
            results: dict[tuple[str, int], KafkaError | None] = {}
            changed: dict[str, list[int]] = {}
            for name, p in partitions:
                topic = topics.get(name)
                if topic is None or p not in topic.assignment:
                    results[(name, p)] = KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                    )
                    continue
                if name in deleting:
                    results[(name, p)] = KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted")
                    continue
                try:
                    if p not in self._states.get(name, {}):  # created a moment ago, its state not written yet
                        raise KafkaError(_ELECTION_FAILED[election_type], "the partition is not online yet; retry")
                    decided = self._decide(
                        name,
                        p,
                        lambda n, q, state: _elected_state(
                            election_type, topics[n].assignment[q], state, self._eligible(n, q, live), epoch
                        ),
                    )
                    if decided is None:
                        raise KafkaError(_ELECTION_FAILED[election_type], "the partition is gone; retry")
                    self.stats.count(*decided)
                    results[(name, p)] = None
                    changed.setdefault(name, []).append(p)
                except KafkaError as exc:
                    results[(name, p)] = exc
            for name, changed_partitions in changed.items():
                self._send_leader_and_isr(topics[name], changed_partitions)
            self._flush()
            return results

    def _require_active(self) -> int:
        if self.epoch is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self._broker_id} is not the controller")
        return self.epoch

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        config: dict[str, str] | None = None,
        assignment: dict[int, tuple[int, ...]] | None = None,
        validate_only: bool = False,
    ) -> TopicDescription:
        with self._lock:
            epoch = self.epoch if self.epoch is not None else self._store.controller_epoch()
            validate_topic_name(name)
            config = validate_topic_configs(config or {})
            if name in self._topics or self._store.topics_named([name]):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            if assignment is None:
                if num_partitions < 1:
                    raise KafkaError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be at least 1")
                brokers = self._store.brokers()
                racks = {b: e.rack for b, e in brokers.items()}
                assignment = assign_replicas(list(brokers), num_partitions, replication_factor, racks=racks)
            else:
                validate_manual_assignment(assignment, set(self._store.brokers()))
            topic = TopicDescription(name=name, topic_id=str(uuid.uuid4()), assignment=assignment, config=config)
            if validate_only:
                return topic
            states = self._initial_states(assignment, epoch)
            self._store.create_topic(topic, states)
            if self.epoch is not None:
                self._topics[name] = topic
                self._states[name] = dict(states)
                self._send_leader_and_isr(topic, assignment)
                self._flush()
            return topic

    def _initial_states(self, assignment: dict[int, tuple[int, ...]], epoch: int) -> dict[int, PartitionState]:
        live = set(self._store.brokers())
        states = {}
        for p, replicas in assignment.items():
            isr = tuple(r for r in replicas if r in live)
            states[p] = PartitionState(leader=isr[0] if isr else -1, leader_epoch=0, isr=isr, controller_epoch=epoch)
        return states

    def create_partitions(
        self,
        name: str,
        total: int,
        validate_only: bool = False,
        assignment: list[tuple[int, ...]] | None = None,
    ) -> TopicDescription:
        """Grow a topic to `total` partitions, placed by `assignment` (the replicas of each
        new partition, in order) or round-robin; Kafka never removes partitions."""
        with self._lock:
            epoch = self._require_active()
            topic = self._topic(name)
            if total <= topic.num_partitions:
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic {name!r} has {topic.num_partitions} partitions; the new count must be larger, not {total}",
                )
            brokers = self._store.brokers()
            if assignment is None:
                # Kafka's addPartitions: the new partitions go on where partition 0 started.
                ordered = sorted(brokers)
                start = next((i for i, b in enumerate(ordered) if b >= topic.assignment[0][0]), 0)
                added = assign_replicas(
                    ordered,
                    total - topic.num_partitions,
                    topic.replication_factor,
                    first_partition=topic.num_partitions,
                    start_index=start,
                    racks={b: e.rack for b, e in brokers.items()},
                )
            else:
                if len(assignment) != total - topic.num_partitions:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Increasing the number of partitions by {total - topic.num_partitions} "
                        f"but {len(assignment)} assignments provided.",
                    )
                added = {topic.num_partitions + i: tuple(replicas) for i, replicas in enumerate(assignment)}
                validate_manual_assignment(added, set(brokers), topic.replication_factor)
            grown = replace(topic, assignment={**topic.assignment, **added})
            if validate_only:
                return grown
            states = self._initial_states(added, epoch)
            self._update_topic(grown, states)
            self._send_leader_and_isr(grown, added)
            self._flush()
            return grown

    def alter_topic_config(self, name: str, config: dict[str, str], validate_only: bool = False) -> TopicDescription:
        """Replace a topic's config overrides (an empty value removes a key)."""
        with self._lock:
            self._require_active()
            topic = self._topic(name)
            merged = {k: v for k, v in {**topic.config, **config}.items() if v != ""}
            merged = validate_topic_configs(merged)
            altered = replace(topic, config=merged)
            if validate_only:
                return altered
            self._update_topic(altered)
            self._send_leader_and_isr(altered, altered.assignment)
            self._flush()
            return altered

    def delete_topic(self, name: str) -> None:
        """Delete a topic: at once on the active controller, else by a deletion request
        (/admin/delete_topics) that the active controller carries out."""
        with self._lock:
            if self.epoch is None:
                if not self._store.topics_named([name]):
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            else:
                self._topic(name)
            if name in INTERNAL_TOPICS:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name!r} is an internal topic")
            if self.epoch is None:
                self._store.request_topic_deletion(name)
                return
            self._delete_topic(name)
            self._flush()

    def _delete_topic(self, name: str) -> None:
        with self._lock:
            self._require_active()
            topic = self._topics.get(name)
            if topic is None:
                # Not (yet) in the context: created by another broker a moment ago.
                topic = self._store.topics_named([name]).get(name)
            if topic is None:
                return
            self._store.delete_topic(name)
            self._topics.pop(name, None)
            self._states.pop(name, None)
            self._changed.pop(name, None)
            self._deleted.add(name)
            by_broker: dict[int, list[tuple[str, int]]] = {}
            for p, replicas in topic.assignment.items():
                for r in replicas:
                    by_broker.setdefault(r, []).append((name, p))
            for broker_id, partitions in by_broker.items():
                self._stop_replica.setdefault(broker_id, []).extend(partitions)

    def _topic(self, name: str) -> TopicDescription:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    def _elect_offline_leaders(self, partitions: list[tuple[str, int]], live: set[int]) -> list[tuple[str, int]]:
        """Give a leader to those of `partitions` whose leader is not in `live`: the first
        live replica in the ISR; only if unclean.leader.election.enable, any live replica
        (which may lose committed records). Without a candidate the partition stays offline
        (leader -1) until an ISR member returns. Returns the partitions that changed."""
        epoch = self._require_active()
        defaults = self._topic_defaults()
        unclean_of = {
            name: LogConfig.from_properties(self._topics[name].config, defaults).unclean_leader_election_enable
            for name in {n for n, _ in partitions}
        }

        def elect(name: str, p: int, state: PartitionState) -> PartitionState | None:
            eligible = self._eligible(name, p, live)
            if state.leader in eligible:
                return None
            new = _offline_partition_leader(self._topics[name].assignment[p], state, eligible, unclean_of[name], epoch)
            if new is None and state.leader != -1:
                # Offline: no leader, but the ISR is kept so that one of them must return.
                new = PartitionState(-1, state.leader_epoch + 1, state.isr, epoch)
            return new

        changed = []
        for name, p, old, new in self._decide_all(partitions, elect):
            self.stats.count(old, new)
            changed.append((name, p))
        return changed

    def _remove_dead_from_isr(self, partitions: list[tuple[str, int]], live: set[int]) -> list[tuple[str, int]]:
        """Drop followers not in `live` (or whose replica is on a failed log dir) from the
        ISR of those of `partitions` whose leader is live."""
        epoch = self._require_active()

        def shrink(name: str, p: int, state: PartitionState) -> PartitionState | None:
            eligible = self._eligible(name, p, live)
            if state.leader not in eligible:
                return None
            isr = tuple(r for r in state.isr if r in eligible)
            return None if isr == state.isr else PartitionState(state.leader, state.leader_epoch + 1, isr, epoch)

        return [(name, p) for name, p, _, _ in self._decide_all(partitions, shrink)]

    def _decide(
        self, name: str, p: int, decide: Callable[[str, int, PartitionState], PartitionState | None]
    ) -> tuple[PartitionState, PartitionState] | None:
        """Write the state `decide` makes of the partition's current one (None: no change),
        deciding again on the state read back when a leader changed it meanwhile. Returns
        (old, new) once written."""
        while (state := self._states.get(name, {}).get(p)) is not None:
            new = decide(name, p, state)
            if new is None:
                return None
            if self._write_state(name, p, new, state):
                return state, new
        return None

    def _decide_all(
        self, partitions: list[tuple[str, int]], decide: Callable[[str, int, PartitionState], PartitionState | None]
    ) -> list[tuple[str, int, PartitionState, PartitionState]]:
        """`_decide` for many partitions, their new states written in one batch (ZooKeeper
        multi-ops); those a leader changed meanwhile are read again and decided one by one."""
        proposed: dict[tuple[str, int], tuple[PartitionState, PartitionState]] = {}
        for name, p in partitions:
            state = self._states.get(name, {}).get(p)
            if state is not None and (new := decide(name, p, state)) is not None:
                proposed[(name, p)] = (state, new)
        if not proposed:
            return []
        stored = self._store.update_partition_states({tp: (new, old.version) for tp, (old, new) in proposed.items()})
        decided = []
        for (name, p), written in stored.items():
            self._states[name][p] = written
            decided.append((name, p, *proposed[(name, p)]))
        lost = [tp for tp in proposed if tp not in stored]
        for (name, p), current in self._store.partition_states_of(lost).items():
            self._states[name][p] = current
        for name, p in lost:
            if (outcome := self._decide(name, p, decide)) is not None:
                decided.append((name, p, *outcome))
        return decided

    def _send_leader_and_isr(self, topic: TopicDescription, partitions: Iterable[int]) -> None:
        """Queue the partitions' states for their replicas (sent by `_flush`, one request per
        broker) and for every broker's metadata."""
        self._require_active()
        states = self._states[topic.name]
        changed = self._changed.setdefault(topic.name, set())
        for p in partitions:
            entry = LeaderAndIsrPartition(topic.name, topic.topic_id, p, topic.assignment[p], states[p], topic.config)
            for r in topic.assignment[p]:
                self._leader_and_isr.setdefault(r, []).append(entry)
            changed.add(p)

    def _flush(self, full: bool = False, brokers_changed: bool = False) -> None:
        """Send what this event decided: the LeaderAndIsr requests first, then the
        UpdateMetadata (the changes, or everything when `full`; the live brokers always), so
        that no broker names a leader before the leader has been told. Nothing to send,
        nothing sent."""
        epoch = self._require_active()
        leader_and_isr, self._leader_and_isr = self._leader_and_isr, {}
        stop_replica, self._stop_replica = self._stop_replica, {}
        changed, self._changed = self._changed, {}
        deleted, self._deleted = self._deleted, set()
        for broker_id, entries in sorted(leader_and_isr.items()):
            # The latest entry of a partition queued twice in one event wins.
            latest = {(e.topic, e.partition): e for e in entries}
            self._channel.send_leader_and_isr(broker_id, epoch, list(latest.values()))
        if full or brokers_changed or changed or deleted or leader_and_isr:
            self._send_update_metadata(epoch, full, changed, deleted)
        for broker_id, partitions in sorted(stop_replica.items()):
            self._channel.send_stop_replica(broker_id, epoch, sorted(set(partitions)), delete=True)

    def _send_update_metadata(self, epoch: int, full: bool, changed: dict[str, set[int]], deleted: set[str]) -> None:
        topics = self._topics if full else {n: self._topics[n] for n in changed if n in self._topics}
        if full:
            states = {n: dict(s) for n, s in self._states.items()}
        else:
            states = {n: {p: self._states[n][p] for p in ps if p in self._states[n]} for n, ps in changed.items()}
            states = {n: s for n, s in states.items() if n in topics}
        self._channel.send_update_metadata(
            MetadataUpdate(self._broker_id, epoch, dict(self._brokers), dict(topics), states, frozenset(deleted), full)
        )

    def _write_state(self, name: str, p: int, new: PartitionState, old: PartitionState) -> bool:
        """Compare-and-set a partition state on `old`'s version, keeping the context current:
        on success with the stored state, on failure (a leader changed the ISR meanwhile)
        with the state read again, for the caller to decide on."""
        stored = self._store.update_partition_state(name, p, new, old.version)
        if stored is not None:
            self._states[name][p] = stored
            return True
        current = self._store.partition_states_of([(name, p)]).get((name, p))
        if current is not None and name in self._states:
            self._states[name][p] = current
        return False

    def _update_topic(self, topic: TopicDescription, new_states: dict[int, PartitionState] | None = None) -> None:
        """Store a topic's changed document (and its new partitions' states) and keep them."""
        self._store.update_topic(topic, new_states or {})
        self._topics[topic.name] = topic
        self._states.setdefault(topic.name, {}).update(new_states or {})


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, set[int]]:
    by_topic: dict[str, set[int]] = {}
    for name, p in partitions:
        by_topic.setdefault(name, set()).add(p)
    return by_topic


def _with(by_partition: dict[int, tuple[int, ...]], p: int, replicas: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """`by_partition` with `p` mapped to `replicas`, or without `p` if there are none."""
    updated = {q: r for q, r in by_partition.items() if q != p}
    if replicas:
        updated[p] = replicas
    return updated


def _validate_reassignment_target(target: tuple[int, ...], brokers: set[int]) -> None:
    """Kafka's checks of a reassignment's target replicas (INVALID_REPLICA_ASSIGNMENT)."""
    if not target:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
        )
    if len(set(target)) != len(target):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
        )
    unknown = sorted(set(target) - brokers)
    if unknown:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The proposed assignment contains unknown brokers: {unknown}"
        )


class ElectionType(IntEnum):
    """ElectLeaders' election types (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


_ELECTION_FAILED = {
    ElectionType.PREFERRED: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ElectionType.UNCLEAN: ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
}


def _offline_partition_leader(
    replicas: tuple[int, ...], state: PartitionState, live: set[int], unclean: bool, epoch: int
) -> PartitionState | None:
    """Kafka's offline-partition election: the first live replica in the ISR, else (if
    `unclean`) the first live replica, whose ISR is then itself alone. None: no candidate."""
    candidates = [r for r in replicas if r in live and r in state.isr]
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, tuple(r for r in state.isr if r in live), epoch)
    candidates = [r for r in replicas if r in live] if unclean else []
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, (candidates[0],), epoch)
    return None


def _elected_state(
    election_type: ElectionType, replicas: tuple[int, ...], state: PartitionState, live: set[int], epoch: int
) -> PartitionState:
    """The partition state an ElectLeaders election gives, or its KafkaError."""
    if election_type == ElectionType.PREFERRED:
        preferred = replicas[0]
        if state.leader == preferred:
            raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED, f"the preferred replica {preferred} already leads")
        if preferred not in live or preferred not in state.isr:
            raise KafkaError(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"Failed to elect leader: preferred replica {preferred} is "
                f"{'not in the ISR ' + str(list(state.isr)) if preferred in live else 'not alive'}",
            )
        return PartitionState(preferred, state.leader_epoch + 1, state.isr, epoch)
    if state.leader in live:
        raise KafkaError(ErrorCode.ELECTION_NOT_NEEDED, f"the partition has a live leader ({state.leader})")
    new = _offline_partition_leader(replicas, state, live, True, epoch)
    if new is None:
        raise KafkaError(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"Failed to elect leader: none of the replicas {list(replicas)} is alive",
        )
    return new
