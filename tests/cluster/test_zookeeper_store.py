"""ZooKeeperMetadataStore against a real ZooKeeper: Kafka's znodes and JSON, CAS, election,
watches, and what survives connection loss and session expiry."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest
from kazoo.client import KazooClient

from tcp_proxy import TcpProxy

from loglake.coordination.controller import Controller
from loglake.coordination.model import BrokerEndpoint, LogDirFailure, PartitionState, TopicDescription
from loglake.coordination import zookeeper
from loglake.coordination.zookeeper import ZooKeeperMetadataStore
from loglake.errors import ErrorCode, KafkaError
from loglake.security.acls import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]


def endpoint(broker_id: int, rack: str | None = None) -> BrokerEndpoint:
    return BrokerEndpoint(broker_id, "127.0.0.1", 9092 + broker_id, "127.0.0.1", 8082 + broker_id, rack)


def raw(store: ZooKeeperMetadataStore, path: str) -> Any:
    data, _ = store.client.get(path)
    return json.loads(data)


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Recorder:
    """A watch callback that remembers every value, and the threads it was called on."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> None:
        with self._lock:
            self.values.append(value)
            self.threads.add(threading.current_thread().name)

    def ids(self, brokers: dict[int, int]) -> None:
        """A broker watch callback that remembers only the ids."""
        self(set(brokers))

    @property
    def last(self) -> Any:
        with self._lock:
            return self.values[-1] if self.values else None

    def wait_last(self, expected: Any, timeout: float = 10.0) -> None:
        wait_for(lambda: self.values and self.last == expected, timeout, f"{expected!r}; saw {self.values!r}")


def test_brokers_register_with_kafka_json_and_vanish_on_close(make_store) -> None:
    one, two = make_store(), make_store()
    one.register_broker(endpoint(1))
    two.register_broker(endpoint(2, rack="r2"))
    assert one.brokers() == {1: endpoint(1), 2: endpoint(2, rack="r2")}

    doc = raw(one, "/brokers/ids/2")
    assert doc.pop("timestamp").isdigit()
    assert doc == {
        "version": 5,
        "host": "127.0.0.1",
        "port": 9094,
        "jmx_port": -1,
        "endpoints": ["PLAINTEXT://127.0.0.1:9094"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "rack": "r2",
        "http_endpoint": "http://127.0.0.1:8084",
    }
    assert one.client.exists("/brokers/ids/2").ephemeralOwner == two.client.client_id[0]

    two.close()
    assert one.brokers() == {1: endpoint(1)}  # ephemeral: gone with the session, at once


def test_controller_election_and_epochs(make_store) -> None:
    one, two = make_store(), make_store()
    assert one.controller_id() is None and one.controller_epoch() == 0
    watched = Recorder()
    two.watch_controller(watched)
    assert watched.values == [None]

    assert one.elect_controller(1) == 1
    assert two.elect_controller(2) is None
    assert one.elect_controller(1) is None  # already held
    doc = raw(two, "/controller")
    assert doc["timestamp"].isdigit() and {k: doc[k] for k in ("version", "brokerid")} == {"version": 1, "brokerid": 1}
    assert two.client.get("/controller_epoch")[0] == b"1"
    assert two.controller_id() == 1 and two.controller_epoch() == 1
    watched.wait_last(1)

    one.close()  # the controller goes away: /controller is ephemeral
    watched.wait_last(None)
    assert two.elect_controller(2) == 2
    watched.wait_last(2)
    assert two.controller_id() == 2 and two.client.get("/controller_epoch")[0] == b"2"
    assert watched.values == [None, 1, None, 2]
    assert watched.threads == {threading.current_thread().name, "loglake-zk-events"}


def test_topic_znodes_have_kafka_formats(make_store) -> None:
    store = make_store()
    topic = TopicDescription(
        "events", "3f0c6c8e-0000-4000-8000-000000000001", {0: (1, 2), 1: (2, 1)}, {"retention.ms": "1000"}
    )
    states = {0: PartitionState(1, 0, (1, 2), 7), 1: PartitionState(2, 0, (2,), 7)}
    store.create_topic(topic, states)

    assert raw(store, "/brokers/topics/events") == {
        "version": 2,
        "partitions": {"0": [1, 2], "1": [2, 1]},
        "topic_id": "3f0c6c8e-0000-4000-8000-000000000001",
        "adding_replicas": {},
        "removing_replicas": {},
    }
    assert raw(store, "/config/topics/events") == {"version": 1, "config": {"retention.ms": "1000"}}
    assert raw(store, "/brokers/topics/events/partitions/1/state") == {
        "controller_epoch": 7,
        "leader": 2,
        "version": 1,
        "leader_epoch": 0,
        "isr": [2],
    }
    assert store.topics() == {"events": topic}
    assert store.partition_states("events") == states

    with pytest.raises(KafkaError) as e:
        store.create_topic(topic, states)
    assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS

    grown = TopicDescription("events", topic.topic_id, {**topic.assignment, 2: (1, 2)}, {"cleanup.policy": "compact"})
    store.update_topic(grown, {2: PartitionState(1, 0, (1, 2), 8)})
    assert store.topics()["events"] == grown
    assert raw(store, "/config/topics/events") == {"version": 1, "config": {"cleanup.policy": "compact"}}
    assert raw(store, "/brokers/topics/events")["partitions"] == {"0": [1, 2], "1": [2, 1], "2": [1, 2]}
    assert store.partition_states("events")[2] == PartitionState(1, 0, (1, 2), 8, version=0)
    with pytest.raises(KafkaError) as e:
        store.update_topic(TopicDescription("nope", "x", {0: (1,)}), {})
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    store.delete_topic("events")
    assert store.client.exists("/brokers/topics/events") is None
    assert store.client.exists("/config/topics/events") is None
    assert store.topics() == {} and store.partition_states("events") == {}
    with pytest.raises(KafkaError) as e:
        store.delete_topic("events")
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_config_changes_are_notified_and_expired_ones_purged(make_store, monkeypatch) -> None:
    store = make_store()
    topic = TopicDescription("conf", "3f0c6c8e-0000-4000-8000-000000000002", {0: (1,)}, {"retention.ms": "1000"})
    store.create_topic(topic, {0: PartitionState(1, 0, (1,), 1)})

    def notifications() -> list[dict]:
        if store.client.exists("/config/changes") is None:
            return []
        changes = sorted(store.client.get_children("/config/changes"))
        return [raw(store, f"/config/changes/{c}") for c in changes]

    before = notifications()
    store.update_topic(topic, {})  # same config: nothing to notify
    assert notifications() == before
    store.update_topic(TopicDescription("conf", topic.topic_id, topic.assignment, {"retention.ms": "2000"}), {})
    assert notifications()[len(before) :] == [{"version": 2, "entity_path": "topics/conf"}]
    store.set_broker_config("<default>", {"message.max.bytes": "2000"})
    assert notifications()[-1] == {"version": 2, "entity_path": "brokers/<default>"}
    assert len(notifications()) == len(before) + 2

    # Every notification older than the expiration goes when the next one is written.
    monkeypatch.setattr(zookeeper, "CONFIG_CHANGE_EXPIRATION_MS", 0)
    store.set_broker_config("1", {"message.max.bytes": "3000"})
    assert notifications() == [{"version": 2, "entity_path": "brokers/1"}]


def test_partition_state_updates_are_compare_and_set(make_store) -> None:
    one, two = make_store(), make_store()
    one.create_topic(TopicDescription("t", "id", {0: (1, 2)}), {0: PartitionState(1, 0, (1, 2), 1)})
    current = two.partition_states("t")[0]
    assert current.version == 0

    moved = one.update_partition_state("t", 0, PartitionState(2, 1, (2,), 1), expected_version=0)
    assert moved == PartitionState(2, 1, (2,), 1, version=1)
    assert two.client.exists("/brokers/topics/t/partitions/0/state").version == 1
    # Another controller holding the old version loses, and changes nothing.
    assert two.update_partition_state("t", 0, PartitionState(1, 1, (1,), 1), expected_version=0) is None
    assert one.partition_states("t")[0] == moved
    assert two.update_partition_state("t", 0, PartitionState(1, 2, (1, 2), 2), expected_version=1).version == 2
    assert one.update_partition_state("t", 5, PartitionState(1, 0, (1,), 1), expected_version=0) is None
    assert one.update_partition_state("missing", 0, PartitionState(1, 0, (1,), 1), expected_version=0) is None


def test_acl_and_entity_config_updates_lose_nothing_to_concurrent_ones(make_store) -> None:
    """Two brokers adding ACLs to one pattern, and SCRAM credentials and quotas to one user,
    at the same time: every update is kept (each is conditional on the znode's version)."""
    stores = [make_store(), make_store()]
    pattern = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)

    def entry(i: int) -> AccessControlEntry:
        return AccessControlEntry(f"User:u{i}", "*", AclOperation.READ, AclPermissionType.ALLOW)

    def add(store: ZooKeeperMetadataStore, first: int) -> None:
        for i in range(first, 40, 2):
            store.update_acls(pattern, lambda entries, i=i: entries | {entry(i)})
            key = "producer_byte_rate" if first == 0 else "SCRAM-SHA-256"
            store.update_entity_config("users/alice", lambda config, i=i, key=key: config | {f"{key}{i}": str(i)})

    threads = [threading.Thread(target=add, args=(s, first)) for first, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(stores[1].acls()[pattern]) == {entry(i) for i in range(40)}
    assert len(stores[0].entity_config("users/alice")) == 40
    # An exception from the change writes nothing; an empty result removes the znode, except
    # a user's node holding its clients' nodes, which stays, emptied.
    with pytest.raises(KeyError):
        stores[0].update_acls(pattern, lambda entries: {}["nothing"])
    assert len(stores[0].acls()[pattern]) == 40
    stores[0].update_acls(pattern, lambda entries: ())
    assert pattern not in stores[1].acls() and not stores[1].client.exists("/kafka-acl/Topic/orders")
    stores[0].update_entity_config("users/alice/clients/app", lambda config: {"consumer_byte_rate": "10"})
    assert stores[1].update_entity_config("users/alice", lambda config: {}) == {}
    assert raw(stores[0], "/config/users/alice") == {"version": 1, "config": {}}
    assert stores[0].entity_configs() == {"users/alice/clients/app": {"consumer_byte_rate": "10"}}


def test_deletion_requests_and_topic_watches(make_store) -> None:
    admin, controller = make_store(), make_store()
    deletions, topics = Recorder(), Recorder()
    controller.watch_topic_deletions(deletions)
    controller.watch_topics(topics)
    assert deletions.values == [[]] and topics.values == [set()]

    with pytest.raises(KafkaError) as e:
        admin.request_topic_deletion("t")
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    admin.create_topic(
        TopicDescription("t", "id", {0: (1,)}, {"retention.ms": "5"}), {0: PartitionState(1, 0, (1,), 1)}
    )
    admin.create_topic(TopicDescription("u", "id2", {0: (1,)}), {0: PartitionState(1, 0, (1,), 1)})
    topics.wait_last({"t", "u"})
    admin.request_topic_deletion("t")
    admin.request_topic_deletion("t")  # idempotent
    deletions.wait_last(["t"])
    assert controller.pending_topic_deletions() == ["t"]
    assert admin.client.exists("/admin/delete_topics/t") is not None

    controller.delete_topic("t")  # the controller completes the request
    deletions.wait_last([])
    topics.wait_last({"u"})
    assert admin.pending_topic_deletions() == []
    for path in ("/brokers/topics/t", "/config/topics/t", "/admin/delete_topics/t"):
        assert admin.client.exists(path) is None
    assert deletions.values == [[], ["t"], []]


def test_broker_watch_sees_joins_and_leaves(make_store) -> None:
    observer = make_store()
    seen = Recorder()
    observer.watch_brokers(seen.ids)
    assert seen.values == [set()]
    one, two = make_store(), make_store()
    one.register_broker(endpoint(1))
    seen.wait_last({1})
    two.register_broker(endpoint(2))
    seen.wait_last({1, 2})
    one.close()
    seen.wait_last({2})
    assert seen.values == [set(), {1}, {1, 2}, {2}]


def test_broker_watch_sees_a_re_registration_that_one_event_covers(make_store) -> None:
    """A broker restarted within its session timeout: its old node is deleted and the new
    process registers at once. ZooKeeper sends one event for the deletion (watches are
    one-shot), and the re-read already sees the new node: the ids are the same, the broker
    epoch is not. The watch must report it (the controller must know the broker restarted).
    Made deterministic by holding the store's event thread while both changes happen."""
    observer = make_store()
    seen: list[dict[int, int]] = []
    holding, release = threading.Event(), threading.Event()

    def on_brokers(brokers: dict[int, int]) -> None:
        seen.append(brokers)
        if len(seen) == 2:  # the first registration: hold the event thread here
            holding.set()
            release.wait(10)

    observer.watch_brokers(on_brokers)
    first = make_store()
    first.register_broker(endpoint(1))
    assert holding.wait(10)
    first.close()  # deleted: the watch fires, its re-read waits behind the held thread
    wait_for(lambda: observer.client.exists("/brokers/ids/1") is None, what="the deletion")
    second = make_store()
    second.register_broker(endpoint(1))
    release.set()
    wait_for(lambda: len(seen) == 3, what=f"a third broker view; saw {seen!r}")
    assert seen[0] == {}
    assert set(seen[1]) == set(seen[2]) == {1}
    assert seen[2][1] == second.brokers()[1].epoch != seen[1][1]


def test_producer_id_blocks_are_unique_across_stores(make_store) -> None:
    stores = [make_store(), make_store()]
    starts: list[int] = []
    lock = threading.Lock()

    def allocate(store: ZooKeeperMetadataStore, broker_id: int) -> None:
        for _ in range(15):
            first = store.allocate_producer_id_block(broker_id, 100)
            with lock:
                starts.append(first)

    threads = [threading.Thread(target=allocate, args=(s, i)) for i, s in enumerate(stores * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(starts) == list(range(0, 60 * 100, 100))
    doc = raw(stores[0], "/latest_producer_id_block")
    assert doc["version"] == 1 and doc["broker"] in (0, 1, 2, 3)
    assert (doc["block_start"], doc["block_end"]) == ("5900", "5999")


def expire_session(store: ZooKeeperMetadataStore, connect: str) -> int:
    """Make ZooKeeper expire the store's session: attach a second client to it and close it
    (the server ends the session and drops its ephemeral nodes). The old session id."""
    old = store.client.client_id
    intruder = KazooClient(connect, client_id=old, timeout=store.session_timeout_s)
    intruder.start()
    intruder.stop()
    intruder.close()
    wait_for(
        lambda: store.client.connected and store.client.client_id and store.client.client_id[0] != old[0],
        what="a new session",
    )
    return old[0]


def test_session_expiry_re_registers_and_re_arms_watches(make_store, zookeeper) -> None:
    store, other = make_store(session_timeout_ms=4000), make_store()
    expired = threading.Event()
    store.on_session_expired(expired.set)
    store.register_broker(endpoint(1))
    assert store.elect_controller(1) == 1
    brokers_seen, controller_seen, others_view = Recorder(), Recorder(), Recorder()
    store.watch_brokers(brokers_seen.ids)
    store.watch_controller(controller_seen)
    other.watch_brokers(others_view.ids)

    started = time.monotonic()
    old_session = expire_session(store, zookeeper.connect)
    assert expired.wait(5)
    # Re-registered in the new session.
    stat = wait_for(lambda: other.client.exists("/brokers/ids/1"), what="re-registration")
    assert stat.ephemeralOwner == store.client.client_id[0] != old_session
    assert other.brokers() == {1: endpoint(1)}
    # /controller went with the old session: the watch says so; nobody holds it now.
    controller_seen.wait_last(None)
    assert other.controller_id() is None
    assert store.elect_controller(1) == 2
    controller_seen.wait_last(1)
    # The broker watch is armed again in the new session.
    other.register_broker(endpoint(2))
    brokers_seen.wait_last({1, 2})
    others_view.wait_last({1, 2})
    assert time.monotonic() - started < 15


def test_connection_loss_keeps_session_and_re_arms_watches(make_store, zk_connect) -> None:
    """The connection drops (ZooKeeper keeps running): the client reconnects within the
    session timeout, keeps its session and its ephemeral node, and kazoo's dropped watches
    are armed again."""
    hosts, chroot = zk_connect.split("/", 1)
    host, port = hosts.split(":")
    proxy = TcpProxy(host, int(port))
    store = ZooKeeperMetadataStore(f"127.0.0.1:{proxy.port}/{chroot}", session_timeout_ms=8000)
    try:
        other = make_store()
        expired = threading.Event()
        store.on_session_expired(expired.set)
        store.register_broker(endpoint(1))
        session = store.client.client_id[0]
        seen = Recorder()
        store.watch_brokers(seen.ids)

        proxy.cut()
        wait_for(lambda: not store.client.connected, what="the disconnection")
        other.register_broker(endpoint(2))  # while the watch is not armed
        wait_for(lambda: store.client.connected, what="reconnection")
        assert store.client.client_id[0] == session and not expired.is_set()
        seen.wait_last({1, 2})
        other.close()
        seen.wait_last({1})
    finally:
        store.close()
        proxy.close()


HOLDER = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(sys.argv[1], timeout=float(sys.argv[2]))
client.start()
client.create("/brokers/ids/1", b'{"version":5,"host":"old","port":1}', ephemeral=True, makepath=True)
print(hex(client.client_id[0]), flush=True)
time.sleep(60)
"""


def test_register_waits_for_a_crashed_predecessors_registration(make_store, zk_connect) -> None:
    """A broker restarted before ZooKeeper expired its previous session finds its old
    /brokers/ids/<id>: it waits for the node to go instead of failing."""
    store = make_store(session_timeout_ms=2000)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, zk_connect, "2"], stdout=subprocess.PIPE, text=True)
    try:
        old_session = int(holder.stdout.readline(), 16)
    finally:
        holder.kill()  # kill -9: the session lives on until ZooKeeper expires it
        holder.wait()
    assert store.client.exists("/brokers/ids/1").ephemeralOwner == old_session
    started = time.monotonic()
    store.register_broker(endpoint(1))
    assert 0.5 < time.monotonic() - started < 6
    assert store.client.exists("/brokers/ids/1").ephemeralOwner == store.client.client_id[0]
    assert store.brokers() == {1: endpoint(1)}

    # A live broker holding the id is a configuration error.
    intruder = make_store(session_timeout_ms=1000)
    with pytest.raises(KafkaError) as e:
        intruder.register_broker(endpoint(1))
    assert e.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert store.brokers() == {1: endpoint(1)}


class RecordingChannel:
    def __init__(self) -> None:
        self.leader_and_isr: list[tuple[int, int, list]] = []
        self.stop_replica: list[tuple[int, int, list, bool]] = []
        self.update_metadata: list[int] = []

    def send_leader_and_isr(self, broker_id, controller_epoch, partitions) -> None:
        self.leader_and_isr.append((broker_id, controller_epoch, partitions))

    def send_stop_replica(self, broker_id, controller_epoch, partitions, delete) -> None:
        self.stop_replica.append((broker_id, controller_epoch, partitions, delete))

    def send_update_metadata(self, controller_epoch) -> None:
        self.update_metadata.append(controller_epoch)


def test_the_controller_runs_over_zookeeper(make_store) -> None:
    stores = [make_store() for _ in range(3)]
    for i, s in enumerate(stores, start=1):
        s.register_broker(endpoint(i))
    channel = RecordingChannel()
    controller = Controller(stores[0], 1, channel)
    assert controller.startup() and controller.epoch == 1
    assert not Controller(stores[1], 2, RecordingChannel()).startup()

    # Placed by hand: the controller's own placement is random.
    placed = {0: (1, 2), 1: (2, 3), 2: (3, 1)}
    topic = controller.create_topic("events", -1, -1, {"retention.ms": "1000"}, assignment=placed)
    assert topic.assignment == placed
    assert stores[2].topics()["events"] == topic
    assert stores[2].partition_states("events")[0] == PartitionState(1, 0, (1, 2), 1, version=0)
    controller.create_partitions("events", 4)
    controller.alter_topic_config("events", {"cleanup.policy": "compact"})
    assert stores[1].topics()["events"].config == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert sorted(stores[1].partition_states("events")) == [0, 1, 2, 3]

    # The controller, broker 1, dies; its successor moves leadership off it (CAS on each state).
    stores[0].close()
    successor = Controller(stores[1], 2, RecordingChannel())
    assert successor.startup() and successor.epoch == 2
    states = stores[1].partition_states("events")
    assert all(s.leader in (2, 3) for s in states.values())
    assert states[0] == PartitionState(2, 1, (2,), 2, version=1)
    assert states[1] == PartitionState(2, 0, (2, 3), 1, version=0)

    stores[1].request_topic_deletion("events")
    assert stores[1].pending_topic_deletions() == ["events"]
    successor.delete_topic("events")
    assert stores[1].topics() == {} and stores[1].pending_topic_deletions() == []


PAUSED_BROKER = """
import sys, time
from loglake.coordination.model import BrokerEndpoint
from loglake.coordination.zookeeper import ZooKeeperMetadataStore
store = ZooKeeperMetadataStore(sys.argv[1], session_timeout_ms=int(sys.argv[2]))
store.on_session_expired(lambda: print("expired", flush=True))
store.register_broker(BrokerEndpoint(5, "127.0.0.1", 9097, "127.0.0.1", 8087))
print("registered", flush=True)
time.sleep(60)
"""


def test_a_paused_broker_loses_its_session_and_comes_back(make_store, zk_connect) -> None:
    """SIGSTOP a broker for longer than its session: ZooKeeper expires the session and its
    registration; after SIGCONT its store notices, and registers again in a new session."""
    observer = make_store()
    seen = Recorder()
    observer.watch_brokers(seen.ids)
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED_BROKER, zk_connect, "1500"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "registered"
        seen.wait_last({5})
        first_owner = observer.client.exists("/brokers/ids/5").ephemeralOwner
        proc.send_signal(signal.SIGSTOP)
        seen.wait_last(set(), timeout=8)  # expired by ZooKeeper, ~1.5 s later
        proc.send_signal(signal.SIGCONT)
        assert proc.stdout.readline().strip() == "expired"
        seen.wait_last({5})
        assert observer.client.exists("/brokers/ids/5").ephemeralOwner != first_owner
        assert seen.values == [set(), {5}, set(), {5}]
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_zookeeper_process_config_and_health(zookeeper) -> None:
    from harness.zookeeper_process import four_letter_word, read_properties

    props = read_properties(zookeeper.config_file)
    assert props["clientPort"] == str(zookeeper.port) and props["tickTime"] == "500"
    assert props["dataDir"] == str(zookeeper.data_dir / "data")
    assert props["admin.enableServer"] == "false" and props["maxSessionTimeout"] == "60000"
    assert four_letter_word(zookeeper.host, zookeeper.port, "ruok") == "imok"
    assert "Mode: standalone" in four_letter_word(zookeeper.host, zookeeper.port, "srvr")
    assert zookeeper.is_serving()


def test_tiered_offsets_only_rise_and_every_store_reads_them(make_store) -> None:
    store, other = make_store(), make_store()
    topic = TopicDescription("tiered", "3f0c6c8e-0000-4000-8000-000000000002", {0: (1, 2), 1: (2, 1)})
    store.create_topic(topic, {0: PartitionState(1, 0, (1, 2), 1), 1: PartitionState(2, 0, (2, 1), 1)})
    assert store.tiered_offset("tiered", 0) is store.tiered_offset("tiered", 1) is None  # never tiered: not 0

    assert store.record_tiered_offset("tiered", 0, 120) == 120
    assert raw(store, "/brokers/topics/tiered/partitions/0/loglake_tiered_offset") == {"version": 1, "offset": 120}
    # A later leader (another broker's store) knows it; a lower value never lowers it.
    assert (other.tiered_offset("tiered", 0), other.tiered_offset("tiered", 1)) == (120, None)
    assert other.record_tiered_offset("tiered", 0, 80) == 120
    assert other.record_tiered_offset("tiered", 1, 7) == 7
    assert (store.tiered_offset("tiered", 0), store.tiered_offset("tiered", 1)) == (120, 7)

    # Racing raises from two stores end at the highest, whatever the interleaving (CAS).
    values = list(range(121, 161))
    threads = [
        threading.Thread(target=lambda s=s, vs=vs: [s.record_tiered_offset("tiered", 0, v) for v in vs])
        for s, vs in ((store, values[::2]), (other, values[1::2]))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.tiered_offset("tiered", 0) == other.tiered_offset("tiered", 0) == 160

    with pytest.raises(KafkaError) as e:
        store.record_tiered_offset("tiered", 5, 1)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    store.delete_topic("tiered")
    assert other.tiered_offset("tiered", 0) is None
    with pytest.raises(KafkaError) as e:
        other.record_tiered_offset("tiered", 0, 200)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_user_and_client_names_are_sanitized_in_znode_paths(make_store) -> None:
    store = make_store()
    credential = "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"
    store.update_user_credentials("CN=a/b", lambda _: {"SCRAM-SHA-256": credential})
    assert store.client.exists("/config/users/CN%3Da%2Fb") is not None
    assert store.all_user_credentials() == {"CN=a/b": {"SCRAM-SHA-256": credential}}
    store.update_entity_config("users/CN%3Da%2Fb/clients/x%20y", lambda c: {**c, "producer_byte_rate": "10"})
    assert store.client.exists("/config/users/CN%3Da%2Fb/clients/x%20y") is not None
    assert store.entity_configs()["users/CN%3Da%2Fb/clients/x%20y"] == {"producer_byte_rate": "10"}


def test_log_dir_failures_use_kafkas_notification_znodes(make_store) -> None:
    broker, controller = make_store(), make_store()
    notified = Recorder()
    controller.watch_log_dir_failures(notified)
    assert controller.take_log_dir_failures() == []
    broker.notify_log_dir_failure(2, [("t", 0), ("u", 3)])
    broker.notify_log_dir_failure(3, [])
    wait_for(lambda: len(notified.last or ()) == 2, what="two notification znodes")
    children = sorted(broker.client.get_children("/log_dir_event_notification"))
    assert all(c.startswith("log_dir_event_") for c in children)
    assert raw(broker, f"/log_dir_event_notification/{children[0]}") == {
        "version": 1,
        "broker": 2,
        "event": 1,
        "partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 3}],
    }
    assert controller.take_log_dir_failures() == [LogDirFailure(2, (("t", 0), ("u", 3))), LogDirFailure(3, ())]
    assert broker.client.get_children("/log_dir_event_notification") == []
    assert controller.take_log_dir_failures() == []
