"""Partition reassignment (KIP-455) in a 3-broker cluster: replicas move while clients
produce, the replication factor rises and falls, reassignments are listed, cancelled,
requested through ZooKeeper's /admin/reassign_partitions, and bad input changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from cluster_helpers import FAST, create_topic, read_all, wait_hosted
from protocol_helpers import call
from harness.local_cluster import LocalCluster
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def reassign(bootstrap: str, targets: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], int]:
    """AlterPartitionReassignments; each partition's error code."""
    by_topic: dict[str, list[dict]] = {}
    for (topic, p), replicas in targets.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "replicas": replicas})
    body = {"timeout_ms": 30000, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    response = call(bootstrap, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert response["error_code"] == 0, response
    return {(r["name"], p["partition_index"]): p["error_code"] for r in response["responses"] for p in r["partitions"]}


def ongoing(bootstrap: str) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    response = call(bootstrap, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
    assert response["error_code"] == 0, response
    return {
        (t["name"], p["partition_index"]): (p["replicas"], p["adding_replicas"], p["removing_replicas"])
        for t in response["topics"]
        for p in t["partitions"]
    }


def hosts(cluster: LocalCluster, broker_id: int, topic: str, partition: int) -> bool:
    return (cluster.base_dir / f"broker-{broker_id}" / "logs" / f"{topic}-{partition}").exists()


def log_bytes(partition_dir: Path) -> int:
    """The bytes of record batches a replica holds on disk (its segments' .log files)."""
    total = 0
    for segment in partition_dir.glob("*.log"):
        try:
            total += segment.stat().st_size
        except FileNotFoundError:  # a segment deleted between the listing and the stat
            pass
    return total


def settled(cluster: LocalCluster, topic: str, partition: int, replicas: list[int], timeout: float = 60) -> None:
    """Wait until the partition's replicas and ISR are `replicas` and nothing is in progress."""
    cluster.wait_for(
        lambda s: any(
            p["topic"] == topic
            and p["partition"] == partition
            and p["replicas"] == replicas
            and sorted(p["isr"]) == sorted(replicas)
            for p in s["partitions"]
        ),
        timeout,
    )
    deadline = time.monotonic() + timeout
    while (topic, partition) in ongoing(cluster.brokers[cluster.live()[0]].bootstrap):
        assert time.monotonic() < deadline, "the reassignment did not complete"
        time.sleep(0.1)


class BackgroundProducer(threading.Thread):
    """A producer thread, run as a context manager: a test that fails while it runs stops it
    too (a producer left running would go on producing into later tests' machine)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.failed: list[str] = []
        self.unflushed = 0  # records the final flush left undelivered
        self._done = threading.Event()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self.join(90)

    def finish(self) -> None:
        """Stop, flush, and check that every record was delivered."""
        self._done.set()
        self.join(90)
        assert not self.is_alive(), "the producer did not flush within 90 s"
        assert not self.failed, self.failed[:3]
        assert self.unflushed == 0, f"{self.unflushed} records undelivered"


class SteadyProducer(BackgroundProducer):
    """An idempotent acks=all producer of numbered records at a steady rate, spread over
    `partitions` partitions in turn, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 1) -> None:
        super().__init__()
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "error_cb": lambda err: self.failed.append(str(err)),
            }
        )
        self.sent = 0
        self.acked: list[bytes] = []

    def run(self) -> None:
        def delivered(err, msg) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked.append(msg.value())

        while not self._done.is_set():
            for _ in range(20):
                self.producer.produce(
                    self.topic, b"%08d" % self.sent, partition=self.sent % self.partitions, on_delivery=delivered
                )
                self.sent += 1
            self.producer.poll(0)
            self._done.wait(0.01)
        self.unflushed = self.producer.flush(60)

    def keeps_delivering(self, timeout: float = 30) -> None:
        """Wait until records produced from now on are delivered too."""
        wanted = self.sent
        deadline = time.monotonic() + timeout
        while len(self.acked) < wanted:
            assert time.monotonic() < deadline, f"producer stalled at {len(self.acked)} of {wanted}: {self.failed[:3]}"
            time.sleep(0.05)


def test_a_partition_moves_and_its_replication_factor_rises_and_falls_under_load(cluster: LocalCluster) -> None:
    # min.insync.replicas 1: acks=all producing goes on at replication factor 1 too.
    create_topic(cluster, "moving", 1, 1, {"min.insync.replicas": "1"})
    (original,) = cluster.partition("moving", 0)["replicas"]
    others = [b for b in (1, 2, 3) if b != original]
    with SteadyProducer(cluster.bootstrap, "moving") as producer:
        time.sleep(0.5)  # records before the move, and the producer keeps going through it

        # Move the only replica to two other brokers (RF 1 -> 2), through a broker that is not
        # necessarily the controller (it forwards).
        via = cluster.brokers[others[0]].bootstrap
        assert reassign(via, {("moving", 0): others}) == {("moving", 0): 0}
        settled(cluster, "moving", 0, others)
        producer.keeps_delivering()
        # Then to all three (RF 3), then back to one (RF 1), each while producing.
        assert reassign(via, {("moving", 0): [others[1], others[0], original]}) == {("moving", 0): 0}
        settled(cluster, "moving", 0, [others[1], others[0], original])
        producer.keeps_delivering()
        assert reassign(via, {("moving", 0): [original]}) == {("moving", 0): 0}
        settled(cluster, "moving", 0, [original])
        producer.keeps_delivering()
        producer.finish()
    sent = producer.sent

    assert cluster.partition("moving", 0)["leader"] == original
    deadline = time.monotonic() + 30
    while any(hosts(cluster, b, "moving", 0) for b in others):
        assert time.monotonic() < deadline, "removed replicas were not deleted"
        time.sleep(0.1)
    records = read_all(cluster.bootstrap, "moving", 1, sent)[0]
    assert records == [b"%08d" % i for i in range(sent)]  # nothing lost, nothing twice, in order


def test_bad_reassignments_get_kafkas_errors_and_change_nothing(cluster: LocalCluster) -> None:
    create_topic(cluster, "fixed", 2, 2)
    before = [cluster.partition("fixed", p)["replicas"] for p in (0, 1)]
    bootstrap = cluster.brokers[1].bootstrap
    results = reassign(
        bootstrap,
        {
            ("fixed", 0): [1, 9],  # unknown broker
            ("fixed", 1): [2, 2],  # duplicate replicas
            ("nope", 0): [1],  # unknown topic
            ("fixed", 7): [1],  # unknown partition
        },
    )
    assert results == {
        ("fixed", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("fixed", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("fixed", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert reassign(bootstrap, {("fixed", 0): []}) == {("fixed", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert reassign(bootstrap, {("fixed", 0): None}) == {("fixed", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
    assert ongoing(bootstrap) == {}
    # Over HTTP, a malformed plan is refused before anything is tried.
    for bad in ({"partitions": [{"topic": 1, "partition": 0, "replicas": [1]}]}, {"partitions": []}, [1]):
        answer = httpx.post(f"{cluster.http_url(1)}/reassignments", json=bad, timeout=30)
        assert answer.status_code == 422, answer.text
    assert [cluster.partition("fixed", p)["replicas"] for p in (0, 1)] == before


def test_a_reassignment_written_to_zookeeper_is_carried_out(cluster: LocalCluster, zk_connect: str) -> None:
    create_topic(cluster, "tooled", 1, 1)
    (original,) = cluster.partition("tooled", 0)["replicas"]
    target = [b for b in (1, 2, 3) if b != original]
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        request = {"version": 1, "partitions": [{"topic": "tooled", "partition": 0, "replicas": target}]}
        zk.create("/admin/reassign_partitions", json.dumps(request).encode())
        settled(cluster, "tooled", 0, target)
        deadline = time.monotonic() + 30
        while zk.exists("/admin/reassign_partitions") is not None:
            assert time.monotonic() < deadline, "the controller did not take the request"
            time.sleep(0.1)
        doc = json.loads(zk.get("/brokers/topics/tooled")[0])
        assert doc["partitions"] == {"0": target}
        assert doc["adding_replicas"] == {} and doc["removing_replicas"] == {}
    finally:
        zk.stop()
        zk.close()


def test_a_reassignment_survives_the_controller_and_a_target_replica_killed(tmp_path, zk_connect: str) -> None:
    # Sessions long enough that a paused broker stays registered while the reassignment starts.
    overrides = {**FAST, "zookeeper.session.timeout.ms": "10000"}
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        controller = cluster.status()["controller"]["broker_id"]
        staying, joining = [b for b in (1, 2, 3) if b != controller]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = NewTopic("survivor", 1, replica_assignment=[[controller, staying]], config={"min.insync.replicas": "1"})
        for future in admin.create_topics([topic]).values():
            future.result(30)
        cluster.wait_for(lambda s: any(p["topic"] == "survivor" and len(p["isr"]) == 2 for p in s["partitions"]))
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
        for i in range(1000):
            producer.produce("survivor", b"%04d" % i, partition=0)
        assert producer.flush(30) == 0

        # The joining replica cannot fetch (stopped), so the reassignment stays in progress
        # while its controller is killed, and then the joining replica too.
        cluster.pause(joining)
        bootstrap = cluster.brokers[staying].bootstrap
        assert reassign(bootstrap, {("survivor", 0): [staying, joining]}) == {("survivor", 0): 0}
        assert ongoing(bootstrap) == {("survivor", 0): ([staying, joining, controller], [joining], [controller])}
        cluster.kill(controller)
        cluster.kill(joining)
        cluster.wait_for(lambda s: s["controller"]["broker_id"] == staying, exclude=(controller, joining))
        assert ongoing(bootstrap) == {("survivor", 0): ([staying, joining, controller], [joining], [controller])}

        cluster.restart(joining)
        settled(cluster, "survivor", 0, [staying, joining])
        assert cluster.partition("survivor", 0)["leader"] in (staying, joining)
        records = read_all(cluster.bootstrap, "survivor", 1, 1000)[0]
        assert records == [b"%04d" % i for i in range(1000)]


def loglake(cluster: LocalCluster, *args: str, via: int = 1) -> subprocess.CompletedProcess:
    """The CLI against one broker's HTTP API (any broker forwards to the controller)."""
    argv = [sys.executable, "-m", "loglake.cli", *args, "--bootstrap-http", cluster.http_url(via)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_the_cli_changes_replication_factors_and_runs_plans(cluster: LocalCluster, tmp_path) -> None:
    create_topic(cluster, "cli-moved", 2, 1, {"min.insync.replicas": "1"})
    raised = loglake(cluster, "topics", "alter", "--topic", "cli-moved", "--replication-factor", "3")
    assert raised.returncode == 0, raised.stderr
    for p in (0, 1):
        settled(cluster, "cli-moved", p, cluster.partition("cli-moved", p)["replicas"])
        assert sorted(cluster.partition("cli-moved", p)["replicas"]) == [1, 2, 3]
    described = loglake(cluster, "topics", "describe", "--topic", "cli-moved").stdout
    assert "ReplicationFactor: 3" in described and described.count("Adding Replicas") == 0, described
    status = loglake(cluster, "cluster", "status").stdout
    rows = [line.split() for line in status.splitlines() if line.startswith("cli-moved")]
    assert [sorted(r[4].split(",")) for r in rows] == [["1", "2", "3"]] * 2 and {r[6] for r in rows} == {"ok"}
    lowered = loglake(cluster, "topics", "alter", "--topic", "cli-moved", "--replication-factor", "1")
    assert lowered.returncode == 0, lowered.stderr
    for p in (0, 1):
        settled(cluster, "cli-moved", p, cluster.partition("cli-moved", p)["replicas"])
        assert len(cluster.partition("cli-moved", p)["replicas"]) == 1
    assert "ReplicationFactor: 1" in loglake(cluster, "topics", "describe", "--topic", "cli-moved").stdout

    generated = loglake(
        cluster, "reassign", "generate", "--topics", "cli-moved", "--brokers", "2,3", "--replication-factor", "2"
    )
    assert generated.returncode == 0, generated.stderr
    proposal = json.loads(generated.stdout.split("Proposed partition reassignment configuration")[1])
    assert {e["partition"] for e in proposal["partitions"]} == {0, 1}
    assert all(sorted(e["replicas"]) == [2, 3] for e in proposal["partitions"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposal))
    executed = loglake(cluster, "reassign", "execute", "--plan", str(plan))
    assert executed.returncode == 0, executed.stderr
    deadline = time.monotonic() + 60
    while (verified := loglake(cluster, "reassign", "verify", "--plan", str(plan))).returncode != 0:
        assert "still in progress" in verified.stdout, verified.stdout
        assert time.monotonic() < deadline, verified.stdout
        time.sleep(0.2)
    assert verified.stdout.count("is completed") == 2
    assert [cluster.partition("cli-moved", p)["replicas"] for p in (0, 1)] == [
        e["replicas"] for e in proposal["partitions"]
    ]

    # Cancelling what already completed, and plans that cannot run: Kafka's errors, exit 1.
    cancelled = loglake(cluster, "reassign", "cancel", "--plan", str(plan))
    assert cancelled.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in cancelled.stderr
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "cli-moved", "partition": 0, "replicas": [7]}]}))
    refused = loglake(cluster, "reassign", "execute", "--plan", str(plan))
    assert refused.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in refused.stderr
    too_many = loglake(cluster, "topics", "alter", "--topic", "cli-moved", "--replication-factor", "4")
    assert too_many.returncode == 1 and "between 1 and the 3 live brokers" in too_many.stderr
    plan.write_text("{not json")
    malformed = loglake(cluster, "reassign", "execute", "--plan", str(plan))
    assert malformed.returncode == 1 and "is not JSON" in malformed.stderr


def test_a_drained_broker_holds_nothing_and_stopping_it_changes_nothing(cluster: LocalCluster) -> None:
    create_topic(cluster, "drained", 3, 2, {"min.insync.replicas": "1"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(300):
        producer.produce("drained", b"%03d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    # The broker retired is not the controller (retiring that is a failover too); the CLI
    # talks to another one.
    leaving = cluster.a_broker_other_than(cluster.controller())
    via = cluster.a_broker_other_than(leaving)
    assert any(leaving in cluster.partition("drained", p)["replicas"] for p in range(3))

    drained = loglake(cluster, "brokers", "drain", "--broker", str(leaving), "--timeout", "120", via=via)
    assert drained.returncode == 0, drained.stderr
    assert f"Broker {leaving} holds no replica and leads nothing." in drained.stdout
    status = cluster.status()
    assert all(leaving not in p["replicas"] and p["leader"] != leaving for p in status["partitions"])
    assert all(len(cluster.partition("drained", p)["replicas"]) == 2 for p in range(3))

    cluster.brokers[leaving].stop()  # retired: clients do not notice
    cluster.wait_for(lambda s: leaving not in [b["broker_id"] for b in s["brokers"]], exclude=(leaving,))
    records = read_all(cluster.brokers[via].bootstrap, "drained", 3, 300)
    assert sorted(v for values in records.values() for v in values) == [b"%03d" % i for i in range(300)]
    gone = loglake(cluster, "brokers", "drain", "--broker", str(leaving), via=via)
    assert gone.returncode == 1 and str(leaving) in gone.stderr, gone.stderr  # not alive any more


def test_half_the_partitions_move_to_a_new_broker_under_producer_and_group(cluster: LocalCluster) -> None:
    """A fourth broker joins a loaded cluster and half the partitions move onto it while an
    idempotent acks=all producer and a consumer group run: nothing acknowledged is lost or
    doubled, and the group keeps consuming."""
    topic, partitions = "loaded", 4
    create_topic(cluster, topic, partitions, 2, {"min.insync.replicas": "1"})
    consumed: list[bytes] = []
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "loaded-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    consumer.subscribe([topic])

    def consume_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    consumed.append(msg.value())

    with SteadyProducer(cluster.bootstrap, topic, partitions) as producer:
        consume_for(2)
        new_broker = cluster.add_broker()
        moves = {}
        for p in range(0, partitions, 2):
            replicas = cluster.partition(topic, p)["replicas"]
            moves[(topic, p)] = [new_broker, replicas[1]]  # the new broker leads them once moved
        assert reassign(cluster.brokers[1].bootstrap, moves) == dict.fromkeys(moves, 0)
        deadline = time.monotonic() + 90
        while ongoing(cluster.brokers[1].bootstrap):
            before = len(consumed)
            consume_for(1)
            assert time.monotonic() < deadline, "the reassignment did not complete"
            assert len(consumed) > before, "the group stopped consuming during the reassignment"
        for (t, p), target in moves.items():
            settled(cluster, t, p, target)
        consume_for(1)
        producer.finish()
    acked = producer.acked
    deadline = time.monotonic() + 60
    while len(set(consumed)) < len(acked):
        assert time.monotonic() < deadline, f"consumed {len(set(consumed))} of {len(acked)}"
        consume_for(0.5)
    consumer.close()

    everything = read_all(cluster.bootstrap, topic, partitions, len(acked))
    stored = [v for values in everything.values() for v in values]
    assert sorted(stored) == sorted(acked)  # nothing lost, nothing twice
    assert set(consumed) == set(acked)
    assert all(new_broker in cluster.partition(topic, p)["replicas"] for p in range(0, partitions, 2))


class FullSpeedProducer(BackgroundProducer):
    """Produces 10 KB records as fast as the cluster takes them (acks=all); the bytes
    delivered are sampled to measure throughput over a window."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10})
        self.delivered_bytes = 0

    def run(self) -> None:
        value = bytes(range(256)) * 40

        def delivered(err, msg) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.delivered_bytes += len(msg.value())

        while not self._done.is_set():
            try:
                self.producer.produce(self.topic, value, on_delivery=delivered)
            except BufferError:
                self.producer.poll(0.01)
            self.producer.poll(0)
        self.unflushed = self.producer.flush(60)

    def mark(self) -> tuple[int, float]:
        return self.delivered_bytes, time.monotonic()

    def rate_since(self, mark: tuple[int, float]) -> float:
        return (self.delivered_bytes - mark[0]) / (time.monotonic() - mark[1])

    def rate_over(self, seconds: float) -> float:
        mark = self.mark()
        time.sleep(seconds)
        return self.rate_since(mark)


@pytest.fixture
def trimming_cluster(tmp_path: Path, zk_connect: str) -> Iterator[LocalCluster]:
    """The cluster fixture's three brokers, checking retention every second: a producer at
    full speed writes gigabytes a minute, and only its topic's retention.bytes stay on disk."""
    overrides = {**FAST, "log.retention.check.interval.ms": "1000"}
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        yield cluster


def test_a_throttled_reassignment_keeps_to_the_throttle_and_spares_producers(
    trimming_cluster: LocalCluster, tmp_path: Path
) -> None:
    """200 MB move onto a new replica at a 16 MB/s throttle: the new replica copies at the
    throttle's rate (within 20 %), a producer on the same brokers keeps >= 0.7 of its
    throughput (before and after the move), and `verify` removes the throttles afterwards."""
    cluster = trimming_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [
        NewTopic("heavy", 1, replica_assignment=[[1]], config={"min.insync.replicas": "1"}),
        NewTopic(
            "busy",
            2,
            replica_assignment=[[1, 2], [2, 1]],
            config={
                "min.insync.replicas": "1",
                "retention.bytes": "64000000",
                "segment.bytes": "16000000",
                "file.delete.delay.ms": "0",
            },
        ),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    cluster.wait_for(lambda s: sum(p["topic"] in ("heavy", "busy") for p in s["partitions"]) == 3)
    filler = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    chunk = bytes(range(256)) * 400  # 100 KB, stored as is (no compression)
    for _ in range(2000):
        while True:
            try:
                filler.produce("heavy", chunk, partition=0)
                break
            except BufferError:
                filler.poll(0.05)
    assert filler.flush(120) == 0
    size = httpx.get(f"{cluster.http_url(1)}/topics/heavy", timeout=10).json()["partitions"][0]["size"]
    assert size >= 200_000_000

    throttle = 16_000_000
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "heavy", "partition": 0, "replicas": [1, 2]}]}))
    new_replica = cluster.base_dir / "broker-2" / "logs" / "heavy-0"
    copied: list[tuple[float, int]] = []  # (when, bytes the new replica held) while it caught up
    with FullSpeedProducer(cluster.bootstrap, "busy") as busy:
        busy.rate_over(1)  # warmed up
        before = busy.rate_over(4)
        started = time.monotonic()
        executed = loglake(cluster, "reassign", "execute", "--plan", str(plan), "--throttle", str(throttle))
        assert executed.returncode == 0, executed.stderr
        assert "Throttling replication" in executed.stdout
        # In progress: topics describe and cluster status show the step (the copy is not missing).
        described = loglake(cluster, "topics", "describe", "--topic", "heavy")
        assert "Replicas: 1,2\tIsr: 1\tAdding Replicas: 2\tRemoving Replicas: " in described.stdout, described.stdout
        status = loglake(cluster, "cluster", "status").stdout
        (row,) = [line.split() for line in status.splitlines() if line.startswith("heavy")]
        assert row[4:] == ["1,2", "1", "ok,reassigning"], status
        mark = busy.mark()  # from here on only the move competes with the producer
        while ongoing(cluster.brokers[1].bootstrap):
            assert time.monotonic() - started < 60, "the throttled reassignment did not complete"
            copied.append((time.monotonic(), log_bytes(new_replica)))
            time.sleep(0.05)
        during = busy.rate_since(mark)
        after = busy.rate_over(4)
        busy.finish()
    settled(cluster, "heavy", 0, [1, 2])

    # The copy's rate between a tenth and nine tenths of the way, from the new replica's own
    # log: the command's start-up and the completion's detection are not part of it.
    middle = [(when, held) for when, held in copied if 0.1 * size <= held <= 0.9 * size]
    assert len(middle) >= 2, copied
    (t0, b0), (t1, b1) = middle[0], middle[-1]
    rate = (b1 - b0) / (t1 - t0)
    assert 0.8 * throttle <= rate <= 1.2 * throttle, f"copied {b1 - b0} B in {t1 - t0:.1f} s: {rate / 1e6:.1f} MB/s"
    # The baseline: the lower of the two windows around the move, so that a machine whose
    # load moves from one level to another while the test runs does not count as starvation.
    baseline = min(before, after)
    assert during >= 0.7 * baseline, (
        f"producer: {during / 1e6:.1f} MB/s during the move, {before / 1e6:.1f} before, {after / 1e6:.1f} after"
    )

    verified = loglake(cluster, "reassign", "verify", "--plan", str(plan))
    assert verified.returncode == 0, verified.stdout
    assert "Throttles removed." in verified.stdout
    for b in (1, 2, 3):
        assert httpx.get(f"{cluster.http_url(1)}/brokers/{b}/configs", timeout=10).json()["configs"] == {}
    configs = httpx.get(f"{cluster.http_url(1)}/topics/heavy", timeout=10).json()["configs"]
    assert "leader.replication.throttled.replicas" not in configs
    assert "follower.replication.throttled.replicas" not in configs
    assert read_all(cluster.bootstrap, "heavy", 1, 2000, timeout=120)[0][-1] == chunk


def test_execute_submits_only_once_every_involved_broker_applied_the_throttle(tmp_path, zk_connect: str) -> None:
    """`reassign execute --throttle`: a paused (SIGSTOP) involved broker cannot report the
    throttle applied, so the CLI refuses after --throttle-wait, naming it, and no reassignment
    starts; with every broker running, each reports the throttle (its rates and the topic's
    throttled replicas) applied, and only then is the plan submitted."""
    # Sessions long enough that the paused broker stays registered (and so involved).
    overrides = {**FAST, "zookeeper.session.timeout.ms": "30000"}
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        controller = cluster.status()["controller"]["broker_id"]
        joining = max(b for b in (2, 3) if b != controller)  # neither the CLI's broker (1) nor the controller
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("slowed", 1, replica_assignment=[[1]])]).values():
            future.result(30)
        cluster.wait_for(lambda s: any(p["topic"] == "slowed" for p in s["partitions"]))
        source, target = [1], [1, joining]
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps({"version": 1, "partitions": [{"topic": "slowed", "partition": 0, "replicas": target}]})
        )

        cluster.pause(joining)
        try:
            refused = loglake(
                cluster, "reassign", "execute", "--plan", str(plan), "--throttle", "1000000", "--throttle-wait", "1"
            )
        finally:
            cluster.resume(joining)
        assert refused.returncode == 1, refused.stdout
        assert f"broker {joining} has not applied the replication throttle" in refused.stderr, refused.stderr
        assert "no reassignment was submitted" in refused.stderr
        assert "accepted" not in refused.stdout
        assert ongoing(cluster.brokers[1].bootstrap) == {}
        assert cluster.partition("slowed", 0)["replicas"] == source

        executed = loglake(cluster, "reassign", "execute", "--plan", str(plan), "--throttle", "2000000")
        assert executed.returncode == 0, executed.stderr
        throttling = executed.stdout.index("Throttling replication")
        assert throttling < executed.stdout.index("slowed-0: accepted"), executed.stdout
        for b in target:
            applied = httpx.get(f"{cluster.http_url(b)}/replication-throttles", timeout=10).json()
            assert applied["broker"] == b
            assert applied["rates"] == {
                "leader.replication.throttled.rate": 2000000,
                "follower.replication.throttled.rate": 2000000,
            }
            assert applied["topics"]["slowed"] == {
                "leader.replication.throttled.replicas": "0:1",
                "follower.replication.throttled.replicas": f"0:{joining}",
            }
        settled(cluster, "slowed", 0, target)


def test_a_reassignment_in_progress_is_cancelled_back_to_the_original_replicas(cluster: LocalCluster, tmp_path) -> None:
    """A move whose new replica cannot catch up (its broker is paused) is cancelled with
    `loglake reassign cancel`: the replicas are the original ones again, the added replica
    is deleted once its broker is back, and nothing is lost."""
    # The paused broker is the one joining, never the controller: the cancel goes to it.
    joining = cluster.a_broker_other_than(cluster.controller())
    original = cluster.a_broker_other_than(joining)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic("held-back", 1, replica_assignment=[[original]], config={"min.insync.replicas": "1"})
    for future in admin.create_topics([topic]).values():
        future.result(30)
    cluster.wait_for(lambda s: any(p["topic"] == "held-back" for p in s["partitions"]))
    wait_hosted(cluster, "held-back")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(500):
        producer.produce("held-back", b"%04d" % i, partition=0)
    assert producer.flush(30) == 0

    plan = tmp_path / "plan.json"
    move = {"topic": "held-back", "partition": 0, "replicas": [joining]}
    plan.write_text(json.dumps({"version": 1, "partitions": [move]}))
    cluster.pause(joining)
    try:
        executed = loglake(cluster, "reassign", "execute", "--plan", str(plan), via=original)
        assert executed.returncode == 0, executed.stderr
        bootstrap = cluster.brokers[original].bootstrap
        assert ongoing(bootstrap) == {("held-back", 0): ([joining, original], [joining], [original])}
        cancelled = loglake(cluster, "reassign", "cancel", "--plan", str(plan), via=original)
        assert cancelled.returncode == 0, cancelled.stderr
        assert ongoing(bootstrap) == {}
        assert cluster.partition("held-back", 0)["replicas"] == [original]
    finally:
        cluster.resume(joining)
    settled(cluster, "held-back", 0, [original])
    deadline = time.monotonic() + 30
    while hosts(cluster, joining, "held-back", 0):
        assert time.monotonic() < deadline, "the cancelled replica was not deleted"
        time.sleep(0.1)
    assert cluster.partition("held-back", 0)["leader"] == original
    records = read_all(cluster.bootstrap, "held-back", 1, 500)[0]
    assert records == [b"%04d" % i for i in range(500)]
