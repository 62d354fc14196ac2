"""Replication under faults, with real ZooKeeper and broker processes: Kafka's replication
system test (kill -9 while an idempotent producer writes), follower lag (SIGSTOP), the two
leader-epoch stories of seed 002, and clients following leaders."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import defaultdict

import httpx
import pytest
from confluent_kafka import Consumer, Producer

from cluster_helpers import create_topic, partition_of, read_all, serving, serving_get
from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

JSON_V2 = "application/vnd.kafka.json.v2+json"


def produce_json(cluster: LocalCluster, via: int, topic: str, values: list, acks: str = "all") -> httpx.Response:
    return httpx.post(
        f"{cluster.http_url(via)}/topics/{topic}/partitions/0",
        json={"records": [{"value": v} for v in values]},
        headers={"content-type": JSON_V2},
        params={"acks": acks, "timeout_ms": "5000"},
        timeout=30,
    )


def produce_to_new_leader(cluster: LocalCluster, leader: int, topic: str, values: list) -> httpx.Response:
    return serving(
        "POST",
        f"{cluster.http_url(leader)}/topics/{topic}/partitions/0",
        json={"records": [{"value": v} for v in values]},
        headers={"content-type": JSON_V2},
        params={"acks": "1"},
    )


def end_offset(cluster: LocalCluster, via: int, topic: str) -> int:
    return serving_get(f"{cluster.http_url(via)}/topics/{topic}/partitions/0/offsets")["end_offset"]


@pytest.mark.timeout(420)
def test_every_acknowledged_record_survives_hard_kills(cluster: LocalCluster) -> None:
    """Kafka's replication system test: RF=3, min.insync.replicas=2, acks=all, an idempotent
    producer writing a numbered sequence to 6 partitions while brokers are kill -9'ed and
    restarted, chasing leaders and the controller. Every acknowledged record is read back
    exactly once, in order within its partition."""
    create_topic(cluster, "system", 6, 3, {"min.insync.replicas": "2"})
    acked: dict[int, list[int]] = defaultdict(list)
    failed = 0
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err, msg) -> None:
        nonlocal failed
        with lock:
            if err is None:
                acked[msg.partition()].append(int(msg.value()))
            else:
                failed += 1

    def write() -> None:
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "retry.backoff.ms": 100,
            }
        )
        n = 0
        while not stop.is_set():
            try:
                producer.produce("system", str(n).encode(), key=str(n).encode(), on_delivery=on_delivery)
                n += 1
            except BufferError:
                pass
            producer.poll(0.001 if n % 100 else 0.01)
        producer.flush(120)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(2)
        for round_ in range(6):
            status = cluster.wait_for(lambda s: len(s["brokers"]) == 3)
            # Alternate between the controller and the leader of some partition.
            if round_ % 2 == 0:
                victim = status["controller"]["broker_id"]
            else:
                victim = partition_of(status, "system", round_ % 6)["leader"]
            cluster.kill(victim)
            time.sleep(2)
            cluster.restart(victim)
            cluster.wait_for(lambda s: all(len(p["isr"]) >= 2 for p in s["partitions"] if p["topic"] == "system"), 90)
            time.sleep(1)
    finally:
        stop.set()
        writer.join(180)
    total = sum(map(len, acked.values()))
    assert total > 1000, f"only {total} records acknowledged"
    read = read_all(cluster.bootstrap, "system", 6, total)
    for partition, values in acked.items():
        got = [int(v) for v in read[partition]]
        assert len(got) == len(set(got)), f"partition {partition}: duplicates"
        assert set(values) <= set(got), (
            f"partition {partition}: {len(set(values) - set(got))} acknowledged records lost"
        )
        assert got == sorted(got), f"partition {partition}: out of order"


@pytest.mark.timeout(240)
def test_a_paused_follower_leaves_the_isr_and_rejoins_after_catching_up(cluster: LocalCluster) -> None:
    create_topic(cluster, "lag", 1, 3, {"min.insync.replicas": "2"})
    status = cluster.status()
    p = partition_of(status, "lag")
    # Not the controller: paused, it could not send the other follower its LeaderAndIsr
    # (placement is random, so any broker may be a follower).
    leader = p["leader"]
    follower = next(r for r in reversed(p["replicas"]) if r not in (leader, status["controller"]["broker_id"]))
    cluster.pause(follower)
    started = time.monotonic()
    cluster.wait_for(lambda s: follower not in partition_of(s, "lag")["isr"], timeout=30, exclude=(follower,))
    assert time.monotonic() - started < 2 + 6, "out of the ISR within replica.lag.time.max.ms plus a little"
    r = produce_json(cluster, leader, "lag", list(range(100)))
    assert r.status_code == 200, r.text  # acks=all with 2 of 3 in sync
    cluster.resume(follower)
    cluster.wait_for(lambda s: follower in partition_of(s, "lag")["isr"], timeout=30)
    assert end_offset(cluster, leader, "lag") == 100


@pytest.mark.timeout(240)
def test_not_enough_replicas_is_refused_up_front(cluster: LocalCluster) -> None:
    create_topic(cluster, "strict", 1, 2, {"min.insync.replicas": "2"})
    p = partition_of(cluster.status(), "strict")
    leader, follower = p["replicas"]
    cluster.kill(follower)
    cluster.wait_for(lambda s: partition_of(s, "strict")["isr"] == [leader], exclude=(follower,))
    r = produce_json(cluster, leader, "strict", [1])
    assert r.status_code == 503 and r.json()["kafka_error"] == "NOT_ENOUGH_REPLICAS", r.text
    assert produce_json(cluster, leader, "strict", [1], acks="1").status_code == 200


@pytest.mark.timeout(240)
def test_committed_record_survives_follower_restart_then_leader_loss(cluster: LocalCluster) -> None:
    """Seed 002 (a): a follower restarts before it learned the new HW; then the leader dies.
    Truncating to its own HW would drop the committed record; with leader epochs the
    follower asks the leader and keeps it."""
    create_topic(cluster, "story-a", 1, 2, {"min.insync.replicas": "1"})
    leader, follower = partition_of(cluster.status(), "story-a")["replicas"]
    assert produce_json(cluster, leader, "story-a", ["m1", "m2"]).status_code == 200
    cluster.restart(follower)
    cluster.wait_for(
        lambda s: partition_of(s, "story-a")["isr"] == [leader, follower] or len(partition_of(s, "story-a")["isr"]) == 2
    )
    cluster.kill(leader)
    cluster.wait_for(lambda s: partition_of(s, "story-a")["leader"] == follower, exclude=(leader,))
    records = serving_get(
        f"{cluster.http_url(follower)}/topics/story-a/partitions/0/records",
        params={"offset": 0},
        headers={"accept": JSON_V2},
    )
    assert [r["value"] for r in records] == ["m1", "m2"]


@pytest.mark.timeout(300)
def test_divergent_logs_end_identical_after_the_old_leader_returns(cluster: LocalCluster) -> None:
    """Seed 002 (b): leader and follower die together; the follower comes back first without
    the leader's last (unreplicated) record and takes new writes; the old leader returns and
    truncates its divergent tail: both logs end identical."""
    # Unclean election allowed only so the story does not depend on whether the ISR shrank
    # before the leader died; the follower is normally still in it.
    create_topic(cluster, "story-b", 1, 2, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    leader, follower = partition_of(cluster.status(), "story-b")["replicas"]
    assert produce_json(cluster, leader, "story-b", ["committed"]).status_code == 200
    cluster.wait_for(lambda s: len(partition_of(s, "story-b")["isr"]) == 2)
    time.sleep(1)  # the follower has fetched the first record
    cluster.pause(follower)  # so the next record reaches only the leader
    assert produce_json(cluster, leader, "story-b", ["leader-only"], acks="1").status_code == 200
    cluster.kill(leader)
    # Killed while still stopped: resumed first, it could handle a fetch answer already in
    # its socket (the leader answers a long poll with "leader-only") before the kill lands.
    cluster.kill(follower)
    cluster.restart(follower)  # back first, without "leader-only"
    cluster.wait_for(lambda s: partition_of(s, "story-b")["leader"] == follower, exclude=(leader,))
    assert produce_to_new_leader(cluster, follower, "story-b", ["new-leader"]).status_code == 200
    cluster.restart(leader)
    cluster.wait_for(lambda s: len(partition_of(s, "story-b")["isr"]) == 2)
    time.sleep(1)
    logs = {}
    for broker_id in (leader, follower):
        segment = next((cluster.brokers[broker_id].log_dir / "story-b-0").glob("*.log"))
        logs[broker_id] = segment.read_bytes()
    assert logs[leader] == logs[follower], "the old leader truncated its divergent tail and re-fetched"
    records = serving_get(
        f"{cluster.http_url(follower)}/topics/story-b/partitions/0/records",
        params={"offset": 0},
        headers={"accept": JSON_V2},
    )
    assert [r["value"] for r in records] == ["committed", "new-leader"]


@pytest.mark.timeout(240)
def test_kcat_and_confluent_follow_a_moving_leader(cluster: LocalCluster) -> None:
    create_topic(cluster, "moving", 1, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(50):
        producer.produce("moving", str(i).encode())
    assert producer.flush(30) == 0
    old_leader = partition_of(cluster.status(), "moving")["leader"]
    cluster.kill(old_leader)
    cluster.wait_for(lambda s: partition_of(s, "moving")["leader"] not in (-1, old_leader), exclude=(old_leader,))
    for i in range(50, 100):
        producer.produce("moving", str(i).encode())
    assert producer.flush(60) == 0
    live = ",".join(cluster.brokers[b].bootstrap for b in cluster.live())
    out = subprocess.run(
        ["kcat", "-C", "-b", live, "-t", "moving", "-o", "beginning", "-e", "-q", "-f", "%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert [int(v) for v in out] == list(range(100))


@pytest.mark.timeout(240)
def test_a_group_survives_the_loss_of_its_coordinator(cluster: LocalCluster) -> None:
    from loglake.groups.runtime import offsets_partition_for

    create_topic(cluster, "orders", 3, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce("orders", str(i).encode(), key=str(i).encode())
    assert producer.flush(30) == 0

    def consume(n: int) -> list[int]:
        consumer = Consumer(
            {
                "bootstrap.servers": ",".join(cluster.brokers[b].bootstrap for b in cluster.live()),
                "group.id": "survivors",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["orders"])
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(int(msg.value()))
                consumer.commit(msg, asynchronous=False)
        consumer.close()
        assert len(got) >= n, f"the group consumed {len(got)} of {n} records in 60 s"
        return got

    first = consume(150)
    assert len(first) == 150
    # The coordinator is the leader of the group's __consumer_offsets partition.
    offsets_partition = offsets_partition_for("survivors", 3)
    coordinator = partition_of(cluster.status(), "__consumer_offsets", offsets_partition)["leader"]
    cluster.kill(coordinator)
    cluster.wait_for(
        lambda s: partition_of(s, "__consumer_offsets", offsets_partition)["leader"] not in (-1, coordinator),
        exclude=(coordinator,),
    )
    rest = consume(150)
    assert sorted(first + rest) == list(range(300)), "the committed offsets moved with the partition's leader"
