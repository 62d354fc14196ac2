"""The controller over the embedded store, with a channel that records what it is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglake.cluster.assignment import assign_replicas
from loglake.coordination.controller import Controller
from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.model import BrokerEndpoint, LeaderAndIsrPartition, MetadataUpdate, PartitionState
from loglake.errors import ErrorCode, KafkaError


class RecordingChannel:
    def __init__(self) -> None:
        self.leader_and_isr: list[tuple[int, int, list[LeaderAndIsrPartition]]] = []
        self.stop_replica: list[tuple[int, int, list[tuple[str, int]], bool]] = []
        self.update_metadata: list[int] = []
        self.updates: list[MetadataUpdate] = []

    def send_leader_and_isr(self, broker_id, controller_epoch, partitions) -> None:
        self.leader_and_isr.append((broker_id, controller_epoch, partitions))

    def send_stop_replica(self, broker_id, controller_epoch, partitions, delete) -> None:
        self.stop_replica.append((broker_id, controller_epoch, partitions, delete))

    def send_update_metadata(self, update: MetadataUpdate) -> None:
        self.update_metadata.append(update.controller_epoch)
        self.updates.append(update)


def make_controller(path: Path, brokers=(0,)) -> tuple[Controller, EmbeddedMetadataStore, RecordingChannel]:
    store = EmbeddedMetadataStore(path)
    for b in brokers:
        store.register_broker(BrokerEndpoint(b, "127.0.0.1", 9092 + b, "127.0.0.1", 8082 + b))
    channel = RecordingChannel()
    controller = Controller(store, brokers[0], channel)
    assert controller.startup()
    return controller, store, channel


def test_assignment_rule() -> None:
    # Kafka's rule with a fixed start (and so shift) 0: the followers' shift grows by one
    # after each full round of brokers.
    assert assign_replicas([3, 1, 2], 4, 2, start_index=0) == {0: (1, 2), 1: (2, 3), 2: (3, 1), 3: (1, 3)}
    assert assign_replicas([1, 2, 3], 2, 3, first_partition=4, start_index=0) == {4: (2, 3, 1), 5: (3, 1, 2)}
    assert assign_replicas([1, 2, 3, 4], 2, 3, start_index=1, replica_shift=2) == {0: (2, 1, 3), 1: (3, 2, 4)}
    with pytest.raises(KafkaError) as e:
        assign_replicas([1], 1, 2)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_create_topic_assigns_and_tells_brokers(tmp_path: Path) -> None:
    controller, store, channel = make_controller(tmp_path, brokers=(1, 2, 3))
    topic = controller.create_topic("events", 3, 2, {"retention.ms": "1000"})
    assert sorted(replicas[0] for replicas in topic.assignment.values()) == [1, 2, 3], "one leader per broker"
    assert all(len(set(replicas)) == 2 for replicas in topic.assignment.values())
    states = store.partition_states("events")
    first = topic.assignment[0]
    assert states[0] == PartitionState(
        leader=first[0], leader_epoch=0, isr=first, controller_epoch=controller.epoch, version=0
    )
    told = {b: sorted(e.partition for e in entries) for b, _, entries in channel.leader_and_isr}
    assert told == {b: [p for p, replicas in topic.assignment.items() if b in replicas] for b in (1, 2, 3)}
    assert channel.update_metadata[-1] == controller.epoch


def test_topic_admin_errors(tmp_path: Path) -> None:
    controller, _, _ = make_controller(tmp_path)
    controller.create_topic("t", 1, 1)
    cases = [
        (lambda: controller.create_topic("t", 1, 1), ErrorCode.TOPIC_ALREADY_EXISTS),
        (lambda: controller.create_topic("bad/name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (lambda: controller.create_topic("u", 0, 1), ErrorCode.INVALID_PARTITIONS),
        (lambda: controller.create_topic("u", 1, 2), ErrorCode.INVALID_REPLICATION_FACTOR),
        (lambda: controller.create_topic("u", 1, 1, {"segment.bytes": "x"}), ErrorCode.INVALID_CONFIG),
        (lambda: controller.create_partitions("t", 1), ErrorCode.INVALID_PARTITIONS),
        (lambda: controller.create_partitions("missing", 3), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (lambda: controller.delete_topic("missing"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    for action, code in cases:
        with pytest.raises(KafkaError) as e:
            action()
        assert e.value.code == code


def test_add_partitions_alter_config_delete_and_persistence(tmp_path: Path) -> None:
    controller, store, channel = make_controller(tmp_path)
    controller.create_topic("t", 2, 1)
    grown = controller.create_partitions("t", 5)
    assert sorted(grown.assignment) == [0, 1, 2, 3, 4]
    controller.alter_topic_config("t", {"cleanup.policy": "compact"})
    controller.alter_topic_config("t", {"retention.ms": "5"})
    assert store.topics()["t"].config == {"cleanup.policy": "compact", "retention.ms": "5"}
    controller.alter_topic_config("t", {"retention.ms": ""})
    assert store.topics()["t"].config == {"cleanup.policy": "compact"}

    reopened = EmbeddedMetadataStore(tmp_path)
    assert reopened.topics()["t"].num_partitions == 5
    assert reopened.partition_states("t")[4].leader == 0

    controller.delete_topic("t")
    assert channel.stop_replica[-1][2] == [("t", p) for p in range(5)]
    assert "t" not in EmbeddedMetadataStore(tmp_path).topics()


def test_controller_epoch_grows_and_state_updates_are_compare_and_set(tmp_path: Path) -> None:
    first, store, _ = make_controller(tmp_path)
    first.create_topic("t", 1, 1)
    second, _, _ = make_controller(tmp_path)
    assert second.epoch > first.epoch
    state = store.partition_states("t")[0]
    moved = store.update_partition_state("t", 0, PartitionState(0, 1, (0,), second.epoch), state.version)
    assert moved is not None and moved.version == state.version + 1
    # A writer holding the old version loses.
    assert store.update_partition_state("t", 0, PartitionState(0, 2, (0,), first.epoch), state.version) is None


def test_a_broker_restarted_unnoticed_loses_leadership_and_rejoins_as_follower(tmp_path: Path) -> None:
    """ZooKeeper may show no gap when a broker restarts within its session timeout; its
    registration epoch tells. Like Kafka, the controller treats it as failed then started."""
    controller, store, channel = make_controller(tmp_path, brokers=(1, 2, 3))
    controller.create_topic("events", 3, 3)
    led_by_2 = [p for p, s in store.partition_states("events").items() if s.leader == 2]
    assert led_by_2
    channel.leader_and_isr.clear()
    store.register_broker(BrokerEndpoint(2, "127.0.0.1", 9094, "127.0.0.1", 8084, epoch=7))  # new process
    controller.on_brokers_changed({1: -1, 2: 7, 3: -1})
    states = store.partition_states("events")
    for p in led_by_2:
        assert states[p].leader != 2 and 2 not in states[p].isr
        assert states[p].leader_epoch == 1
    told_2 = [(e.partition, e.state.leader) for b, _, entries in channel.leader_and_isr if b == 2 for e in entries]
    assert sorted(p for p, _ in told_2) == [0, 1, 2], "the restarted broker learns every partition it hosts"
    channel.leader_and_isr.clear()
    controller.on_brokers_changed({1: -1, 2: 7, 3: -1})  # same registration: nothing to do
    assert channel.leader_and_isr == []


# A broker restarted within its session timeout, in every order the events can come ---------


def bounce(store: EmbeddedMetadataStore, broker_id: int, epoch: int) -> None:
    """The broker's new process registers (the store moves on before the events arrive)."""
    store.register_broker(
        BrokerEndpoint(broker_id, "127.0.0.1", 9092 + broker_id, "127.0.0.1", 8082 + broker_id, epoch=epoch)
    )


def assert_every_replica_knows_the_current_state(store, channel: RecordingChannel, since: int) -> None:
    """The last LeaderAndIsr each replica got says what the store says (leader and epoch),
    every partition has a live leader, and nothing was sent to a broker before `since`
    counts for the restarted one (its new process knew nothing)."""
    live = set(store.brokers())
    for name, topic in store.topics().items():
        for p, state in store.partition_states(name).items():
            assert state.leader in live, (name, p, state)
            for r in topic.assignment[p]:
                told = [
                    e.state
                    for i, (b, _, entries) in enumerate(channel.leader_and_isr)
                    if b == r and (r != 2 or i >= since)
                    for e in entries
                    if (e.topic, e.partition) == (name, p)
                ]
                assert told, f"broker {r} was never told about {name}-{p}"
                assert (told[-1].leader, told[-1].leader_epoch) == (state.leader, state.leader_epoch), (name, p, r)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([{1: -1, 3: -1}, {1: -1, 2: 7, 3: -1}], id="leave-then-join"),
        pytest.param([{1: -1, 2: 7, 3: -1}], id="one-event-for-both"),
        pytest.param([{1: -1, 3: -1}, {1: -1, 3: -1}, {1: -1, 2: 7, 3: -1}], id="repeated-stale-view"),
    ],
)
def test_a_restarted_broker_is_told_everything_whatever_the_events(tmp_path: Path, events) -> None:
    controller, store, channel = make_controller(tmp_path, brokers=(1, 2, 3))
    controller.create_topic("events", 6, 3)
    controller.create_topic("solo", 3, 1, assignment={0: (2,), 1: (2,), 2: (1,)})
    led_by_2 = {p for p, s in store.partition_states("events").items() if s.leader == 2}
    since = len(channel.leader_and_isr)
    bounce(store, 2, epoch=7)
    for live in events:  # each event is handled as what it says, though the store is ahead
        controller.on_brokers_changed(live)
    assert_every_replica_knows_the_current_state(store, channel, since)
    states = store.partition_states("events")
    assert all(states[p].leader != 2 for p in led_by_2), "leadership moved away from the restarted broker"
    assert {s.leader for s in store.partition_states("solo").values()} == {1, 2}, "sole replicas lead again"


def test_a_controller_elected_after_the_restart_tells_everyone(tmp_path: Path) -> None:
    """The controller itself was the broker restarted (or a failover is under way): the
    new controller knows no earlier epochs, so it sends every replica its state."""
    controller, store, channel = make_controller(tmp_path, brokers=(1, 2, 3))
    controller.create_topic("events", 6, 3)
    bounce(store, 2, epoch=7)
    controller.resign()
    since = len(channel.leader_and_isr)
    successor = Controller(store, 3, channel)
    assert successor.startup()
    assert_every_replica_knows_the_current_state(store, channel, since)
    told_2 = {e.partition for b, _, entries in channel.leader_and_isr[since:] if b == 2 for e in entries}
    assert told_2 == set(range(6))
    # Its watch then delivers the view it started from: nothing more to do.
    channel.leader_and_isr.clear()
    successor.on_brokers_changed({b.broker_id: b.epoch for b in store.brokers().values()})
    assert channel.leader_and_isr == []


def test_unclean_election_follows_the_broker_default_under_topic_overrides(tmp_path: Path) -> None:
    """unclean.leader.election.enable from server.properties (or a dynamic broker config)
    counts for topics without their own setting; a topic override wins."""
    from loglake.config import LogConfig

    store = EmbeddedMetadataStore(tmp_path)
    for b in (1, 2):
        store.register_broker(BrokerEndpoint(b, "127.0.0.1", 9092 + b, "127.0.0.1", 8082 + b))
    defaults = LogConfig.from_properties({"unclean.leader.election.enable": "true"})
    controller = Controller(store, 1, RecordingChannel(), lambda: defaults)
    assert controller.startup()
    controller.create_topic("lenient", 1, 1, assignment={0: (1, 2)})
    controller.create_topic("strict", 1, 1, {"unclean.leader.election.enable": "false"}, assignment={0: (1, 2)})
    for name in ("lenient", "strict"):  # broker 2 fell out of the ISR
        state = store.partition_states(name)[0]
        store.update_partition_state(name, 0, PartitionState(1, 1, (1,), controller.epoch), state.version)
    controller.on_brokers_changed({2: -1})
    assert store.partition_states("lenient")[0].leader == 2
    assert store.partition_states("strict")[0].leader == -1


def test_rack_aware_assignment_spreads_each_partitions_replicas_over_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    assignment = assign_replicas(list(racks), 12, 3, racks=racks)
    for replicas in assignment.values():
        assert len(set(replicas)) == 3
        assert {racks[r] for r in replicas} == {"a", "b", "c"}  # one replica per rack
    leaders = [replicas[0] for replicas in assignment.values()]
    assert sorted(leaders) == sorted(list(racks) * 2)  # leaders evenly spread
    replica_counts = [sum(b in replicas for replicas in assignment.values()) for b in racks]
    assert replica_counts == [6] * 6
    # More replicas than racks: every rack first, then any broker not yet used.
    for replicas in assign_replicas([1, 2, 3, 4], 4, 3, racks={1: "a", 2: "a", 3: "b", 4: "b"}).values():
        assert len(set(replicas)) == 3 and {racks[r] for r in replicas} == {"a", "b"}
    # Without racks on every broker, the plain rule.
    assert assign_replicas([1, 2, 3], 2, 2, 0, 1, {1: "a", 2: None, 3: "b"}) == assign_replicas([1, 2, 3], 2, 2, 0, 1)


def test_topics_created_and_grown_on_brokers_with_racks_spread_over_racks(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    for b, rack in racks.items():
        store.register_broker(BrokerEndpoint(b, "127.0.0.1", 9092 + b, "127.0.0.1", 8082 + b, rack))
    controller = Controller(store, 1, RecordingChannel())
    assert controller.startup()
    topic = controller.create_topic("racked", 4, 2)
    grown = controller.create_partitions("racked", 8)
    assert topic.assignment.items() <= grown.assignment.items()
    for replicas in grown.assignment.values():
        assert {racks[r] for r in replicas} == {"a", "b"}


def test_placement_spreads_leaders_and_followers_over_the_brokers() -> None:
    """Kafka's random start and shift per topic: many one-partition topics lead on every
    broker alike, and a topic's followers do not always sit next to its leader."""
    counts = {1: 0, 2: 0, 3: 0}
    for _ in range(600):
        (replicas,) = assign_replicas([1, 2, 3], 1, 1).values()
        counts[replicas[0]] += 1
    assert all(120 <= n <= 280 for n in counts.values()), counts  # 200 each expected; sd ~12
    orders = {assign_replicas([1, 2, 3, 4], 1, 3)[0] for _ in range(200)}
    assert {(1, 2, 3), (1, 3, 4), (1, 4, 2)} <= orders, "each follower shift for a leader on broker 1"
