"""How the controller ships metadata: LeaderAndIsr first, then one UpdateMetadata with the
changed partition states only; its work per change reads only what changed; and the
image a broker builds from the updates (and their wire form)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loglake.cluster.metadata_image import MetadataImage
from loglake.coordination.controller import Controller
from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.model import BrokerEndpoint, MetadataUpdate, PartitionState, TopicDescription

from ingest_gateway.metadata.update_metadata import update_from_body, update_metadata_body


class OrderedChannel:
    """Records every request in the order the controller sends them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send_leader_and_isr(self, broker_id, controller_epoch, partitions) -> None:
        self.sent.append(("LeaderAndIsr", (broker_id, [(e.topic, e.partition) for e in partitions])))

    def send_stop_replica(self, broker_id, controller_epoch, partitions, delete) -> None:
        self.sent.append(("StopReplica", (broker_id, partitions)))

    def send_update_metadata(self, update: MetadataUpdate) -> None:
        self.sent.append(("UpdateMetadata", update))

    def updates(self) -> list[MetadataUpdate]:
        return [u for kind, u in self.sent if kind == "UpdateMetadata"]


class CountingStore(EmbeddedMetadataStore):
    """Counts the whole-store reads and the partitions read one by one."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.whole_reads = 0
        self.partitions_read: list[tuple[str, int]] = []

    def topics(self) -> dict[str, TopicDescription]:
        self.whole_reads += 1
        return super().topics()

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        self.whole_reads += 1
        return super().partition_states(topic)

    def partition_states_of(self, partitions):
        partitions = list(partitions)
        self.partitions_read.extend(partitions)
        return super().partition_states_of(partitions)


def _controller(path: Path, brokers=(1, 2, 3)) -> tuple[Controller, CountingStore, OrderedChannel]:
    store = CountingStore(path)
    for b in brokers:
        store.register_broker(BrokerEndpoint(b, "127.0.0.1", 9092 + b, "127.0.0.1", 8082 + b))
    channel = OrderedChannel()
    controller = Controller(store, brokers[0], channel)
    assert controller.startup()
    return controller, store, channel


def test_taking_office_sends_everything_and_a_create_sends_only_the_new_topic_after_its_leaders(
    tmp_path: Path,
) -> None:
    controller, store, channel = _controller(tmp_path)
    for i in range(20):
        controller.create_topic(f"old-{i}", 2, 2)
    successor_channel = OrderedChannel()
    controller.resign()
    successor = Controller(store, 2, successor_channel)
    assert successor.startup()
    (full,) = successor_channel.updates()
    assert full.full and len(full.topics) == 20 and sum(len(s) for s in full.states.values()) == 40

    successor_channel.sent.clear()
    store.whole_reads, store.partitions_read = 0, []
    successor.create_topic("new", 3, 3)
    kinds = [kind for kind, _ in successor_channel.sent]
    assert kinds == ["LeaderAndIsr"] * 3 + ["UpdateMetadata"], "one LeaderAndIsr per replica broker, then metadata"
    (update,) = successor_channel.updates()
    assert not update.full and set(update.topics) == {"new"} and set(update.states["new"]) == {0, 1, 2}
    assert update.states["new"] == store.partition_states("new")
    store.whole_reads -= 1  # the check just above
    assert store.whole_reads == 0 and store.partitions_read == [], "a create reads no other topic"


def test_an_isr_change_reported_by_a_leader_reaches_every_broker_and_reads_only_that_partition(
    tmp_path: Path,
) -> None:
    controller, store, channel = _controller(tmp_path)
    for i in range(5):
        controller.create_topic(f"t{i}", 3, 3)
    state = store.partition_states("t3")[1]
    store.update_partition_state("t3", 1, PartitionState(state.leader, state.leader_epoch, state.isr[:2], 1), 0)
    store.notify_isr_change([("t3", 1)])
    channel.sent.clear()
    store.partitions_read = []
    controller.on_isr_changes()
    (update,) = channel.updates()
    assert update.states == {"t3": {1: store.partition_states("t3")[1]}}
    assert store.partitions_read == [("t3", 1)]


def test_a_decision_on_a_state_a_leader_changed_meanwhile_is_made_again_on_the_new_one(tmp_path: Path) -> None:
    """The context is stale until the leader's ISR change notification is handled: the
    compare-and-set fails, and the controller decides again on the state it reads back."""
    controller, store, channel = _controller(tmp_path)
    controller.create_topic("t", 1, 3, assignment={0: (2, 1, 3)})
    # Broker 2 (the leader) shrank the ISR to itself and broker 3, unannounced so far.
    store.update_partition_state("t", 0, PartitionState(2, 0, (2, 3), 1), 0)
    controller.on_brokers_changed({1: -1, 3: -1})  # broker 2 died
    state = store.partition_states("t")[0]
    assert state.leader == 3 and state.isr == (3,), "not broker 1, which had left the ISR"
    assert channel.updates()[-1].states["t"][0] == state


def test_a_deleted_topic_is_named_in_the_update(tmp_path: Path) -> None:
    controller, store, channel = _controller(tmp_path)
    controller.create_topic("gone", 2, 2)
    controller.create_topic("kept", 1, 1)
    channel.sent.clear()
    controller.delete_topic("gone")
    (update,) = channel.updates()
    assert update.deleted == {"gone"} and update.topics == {}


def _topic(name: str, topic_id: str, partitions: int) -> TopicDescription:
    return TopicDescription(name, topic_id, {p: (1, 2) for p in range(partitions)}, {"retention.ms": "5"})


def test_the_image_takes_increments_full_updates_and_deletions_and_never_goes_back_a_version() -> None:
    brokers = {b: BrokerEndpoint(b, "h", 9000 + b, "h", 8000 + b) for b in (1, 2)}
    a, b = _topic("a", "00000000-0000-0000-0000-00000000000a", 2), _topic("b", "00000000-0000-0000-0000-00000000000b", 1)
    s = PartitionState(1, 0, (1, 2), 1, version=0)
    image = MetadataImage(cluster_id="c").updated(
        MetadataUpdate(1, 1, brokers, {"a": a, "b": b}, {"a": {0: s, 1: s}, "b": {0: s}}, full=True)
    )
    newer = PartitionState(2, 1, (2,), 1, version=3)
    image = image.updated(MetadataUpdate(1, 1, brokers, {"a": a}, {"a": {1: newer}}))
    assert image.partition_states == {"a": {0: s, 1: newer}, "b": {0: s}} and image.cluster_id == "c"
    # An older state (read before the leader's own change) does not replace a newer one.
    image = image.updated(MetadataUpdate(1, 1, brokers, {"a": a}, {"a": {1: s}}))
    assert image.partition_states["a"][1] == newer
    assert image.with_partition_state("a", 0, PartitionState(1, 0, (1,), 1, version=1)).partition_states["a"][0].isr == (1,)
    image = image.updated(MetadataUpdate(2, 2, brokers, {}, {}, deleted=frozenset({"b"})))
    assert set(image.topics) == {"a"} and image.controller_id == 2
    image = image.updated(MetadataUpdate(2, 2, {1: brokers[1]}, {"b": b}, {"b": {0: s}}, full=True))
    assert set(image.topics) == {"b"} and set(image.brokers) == {1}


def test_the_wire_form_round_trips() -> None:
    broker = BrokerEndpoint(
        1,
        "10.0.0.1",
        9093,
        "10.0.0.1",
        8082,
        "rack-a",
        listeners=(("PLAINTEXT", "PLAINTEXT", "10.0.0.1", 9092), ("INTERNAL", "SASL_SSL", "10.0.0.1", 9093)),
    )
    topic = _topic("a", "00000000-0000-0000-0000-00000000000a", 2)
    states = {0: PartitionState(1, 4, (1, 2), 3, version=7), 1: PartitionState(2, 1, (2,), 3, version=2)}
    update = MetadataUpdate(1, 3, {1: broker}, {"a": topic}, {"a": states}, deleted=frozenset({"x"}), full=False)
    back = update_from_body(update_metadata_body(update), "INTERNAL")
    assert back.brokers == {1: broker} and back.brokers[1].listeners == broker.listeners
    assert back.states == {"a": states} and back.deleted == {"x"} and not back.full
    assert back.topics["a"].topic_id == topic.topic_id and back.topics["a"].assignment == topic.assignment


def test_a_removed_replica_is_stopped_after_the_leader_and_isr_of_the_same_event(tmp_path: Path) -> None:
    """A reassignment away from the leader bumps the epoch (a LeaderAndIsr to every replica,
    the leaving ones too) and then stops the leaving replicas: the stop must come last, or
    a leaving broker would take the partition up again as its leader after deleting it."""
    controller, store, channel = _controller(tmp_path)
    controller.create_topic("moving", 1, 3, assignment={0: (2, 3, 1)})
    channel.sent.clear()
    assert controller.alter_partition_reassignments({("moving", 0): (1,)}) == {("moving", 0): None}
    for leaving in (2, 3):
        to_it = [kind for kind, what in channel.sent if kind != "UpdateMetadata" and what[0] == leaving]
        assert to_it == ["LeaderAndIsr", "StopReplica"], (leaving, channel.sent)
    assert store.partition_states("moving")[0].leader == 1


def test_a_broker_registered_again_with_other_endpoints_is_sent_to_every_broker(tmp_path: Path) -> None:
    controller, store, channel = _controller(tmp_path)
    channel.sent.clear()
    store.register_broker(BrokerEndpoint(2, "localhost", 9094, "127.0.0.1", 8084))
    controller.on_brokers_changed({b.broker_id: b.epoch for b in store.brokers().values()})
    (update,) = channel.updates()
    assert update.brokers[2].host == "localhost" and update.topics == {}
