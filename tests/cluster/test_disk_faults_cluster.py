"""A cluster broker's log dir fills up or fails under load: the controller moves its
leaderships within seconds, idempotent acks=all producers and a consumer group go on,
nothing acknowledged is lost, duplicated or reordered, and the broker, restarted with a
working disk, rejoins the ISR, leads again and serves the same records (each read is
assigned to the partitions and goes to their high watermark, or fails naming them)."""

from __future__ import annotations

import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Self

import pytest
from cluster_helpers import FAST, read_to_high_watermark, wait_hosted
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from disk_helpers import ext4_disk, fail_disk, fill_disk, repair_disk, small_disk

from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(300)]

TOPIC = "orders"
PARTITIONS = 3
RETRIABLE = {
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,  # the failed broker shuts down once its only dir is offline
    KafkaError._ALL_BROKERS_DOWN,
}


class Load:
    """Idempotent acks=all producers writing numbered records to every partition (each
    record's value: producer, sequence) and a consumer group reading them, on threads."""

    def __init__(self, bootstrap: str, producers: int = 2) -> None:
        self.bootstrap = bootstrap
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> acked values, in order
        self.consumed: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.fatal: list[KafkaError] = []
        self.retriable_seen: list[KafkaError] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(producers)]
        self._threads.append(threading.Thread(target=self._consume, daemon=True))

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def acked_count(self) -> int:
        with self._lock:
            return sum(map(len, self.acked.values()))

    def _produce(self, producer_id: int) -> None:
        def on_error(err: KafkaError) -> None:
            (self.retriable_seen if err.code() in RETRIABLE else self.fatal).append(err)

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "error_cb": on_error,
            }
        )

        def delivered(err: KafkaError | None, msg) -> None:
            if err is not None:
                self.fatal.append(err)  # the idempotent producer retries every retriable error itself
                return
            producer_of, sequence = map(int, msg.value().split(b":")[:2])
            with self._lock:
                self.acked[msg.partition()].append((producer_of, sequence))

        sequence = 0
        while not self._stop.is_set():
            for partition in range(PARTITIONS):
                value = f"{producer_id}:{sequence}:".encode().ljust(1000, b"x")
                try:
                    producer.produce(TOPIC, value, partition=partition, on_delivery=delivered)
                except BufferError:
                    producer.poll(0.1)
                    continue
            sequence += 1
            producer.poll(0.001)
        assert producer.flush(120) == 0

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "disk-faults",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 500,
            }
        )
        consumer.subscribe([TOPIC])
        while not self._stop.is_set():
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    producer_of, sequence = map(int, msg.value().split(b":")[:2])
                    self.consumed[msg.partition()].append((producer_of, sequence))
        consumer.close()


def parse(stored: dict[int, list[bytes]]) -> dict[int, list[tuple[int, int]]]:
    """Each partition's (producer, sequence) values, in log order."""
    return {p: [tuple(map(int, v.split(b":")[:2])) for v in values] for p, values in stored.items()}  # type: ignore[misc]


def assert_exactly_once_in_order(
    acked: dict[int, list[tuple[int, int]]], stored: dict[int, list[tuple[int, int]]]
) -> None:
    for partition in range(PARTITIONS):
        log = stored.get(partition, [])
        assert len(log) == len(set(log)), f"duplicates in partition {partition}"
        positions = {value: i for i, value in enumerate(log)}
        missing = [v for v in acked.get(partition, []) if v not in positions]
        assert not missing, f"{len(missing)} acknowledged records lost from partition {partition}: {missing[:5]}"
        for producer_id in {p for p, _ in log}:
            sequences = [s for p, s in log if p == producer_id]
            assert sequences == sorted(sequences), f"producer {producer_id}'s records reordered in {partition}"


def fill(logs: Path, _image: Path) -> Callable[[], None]:
    """Fill the disk (the next append fails); returns how to free it."""
    return fill_disk(logs).unlink


def fail(logs: Path, image: Path) -> Callable[[], None]:
    fail_disk(logs)
    return lambda: repair_disk(logs, image)


def tmpfs(logs: Path, image: Path) -> AbstractContextManager[Path]:
    return small_disk(logs, 48)


def ext4(logs: Path, image: Path) -> AbstractContextManager[Path]:
    return ext4_disk(logs, image)


@pytest.mark.parametrize(("disk", "break_it"), [(tmpfs, fill), (ext4, fail)], ids=["full", "failing"])
def test_the_leaders_disk_fills_or_fails_under_load(tmp_path: Path, zk_connect: str, disk, break_it) -> None:
    overrides = {
        **FAST,
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "false",
        # Leadership goes back to the victim (the preferred replica) once it is in sync again.
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1",
    }
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        # The victim is a broker that is not the controller (whose loss would be another test);
        # its only log dir goes onto the disk under test: stopped, its dir (nothing in it but
        # meta.properties, which it writes anew, durably) replaced by the new file system's,
        # started again.
        victim = cluster.a_broker_other_than(cluster.controller())
        a, b = (x for x in sorted(cluster.brokers) if x != victim)
        logs, image = cluster.brokers[victim].log_dir, tmp_path / "disk.img"
        cluster.brokers[victim].stop()
        shutil.rmtree(logs)
        with disk(logs, image):
            try:
                cluster.restart(victim)
                cluster.wait_for(lambda s: len(s["brokers"]) == 3)
                check_through_the_fault(cluster, victim, a, b, logs, image, break_it)
            finally:
                cluster.kill(victim)  # before its disk goes


def check_through_the_fault(
    cluster: LocalCluster, victim: int, a: int, b: int, logs: Path, image: Path, break_it
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # The victim leads every partition.
    assignment = [[victim, a, b], [victim, b, a], [victim, a, b]]
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=assignment)])[TOPIC].result(30)
    cluster.wait_for(
        lambda s: (
            sum(p["topic"] == TOPIC and p["leader"] == victim and len(p["isr"]) == 3 for p in s["partitions"])
            == PARTITIONS
        )
    )
    wait_hosted(cluster, TOPIC)
    with Load(cluster.bootstrap) as load:
        wait_until(lambda: load.acked_count() >= 1000, 60, "records acknowledged before the fault")
        repair = break_it(logs, image)
        broken_at = time.monotonic()
        cluster.wait_for(
            lambda s: all(
                p["leader"] in (a, b) and victim not in p["isr"] for p in s["partitions"] if p["topic"] == TOPIC
            ),
            timeout=30,
            exclude=(victim,),
        )
        moved_after = time.monotonic() - broken_at
        before = load.acked_count()
        wait_until(lambda: load.acked_count() >= before + 1000, 60, "producers going on after the move")
    acked = load.acked_count()
    print(
        f"leadership moved {moved_after:.2f} s after broker {victim}'s disk broke; {acked} records acknowledged, "
        f"{len(load.retriable_seen)} retriable client errors"
    )
    assert not load.fatal, load.fatal[:5]
    assert moved_after < 10, f"leadership moved after {moved_after:.1f} s"
    # The victim had only the broken dir: it shut down.
    wait_until(lambda: victim not in cluster.live(), 30, f"broker {victim} to shut down")
    assert cluster.brokers[victim].proc is not None and cluster.brokers[victim].proc.returncode == 1
    survivors = ",".join(cluster.brokers[x].bootstrap for x in (a, b))
    stored = parse(read_to_high_watermark(survivors, TOPIC, PARTITIONS, timeout=90, at_least=acked))
    assert_exactly_once_in_order(load.acked, stored)
    assert all(v in stored[p] for p, values in load.consumed.items() for v in values)

    # With a working disk the victim comes back, catches up, leads again (the preferred
    # replica, by the automatic rebalance), and serves the same records.
    cluster.brokers[victim].kill()
    repair()
    cluster.restart(victim)
    cluster.wait_for(
        lambda s: all(
            sorted(p["isr"]) == sorted((victim, a, b)) and p["leader"] == victim
            for p in s["partitions"]
            if p["topic"] == TOPIC
        ),
        timeout=60,
    )
    wait_hosted(cluster, TOPIC)
    again = parse(
        read_to_high_watermark(cluster.brokers[victim].bootstrap, TOPIC, PARTITIONS, timeout=90, at_least=acked)
    )
    assert_exactly_once_in_order(load.acked, again)
    for p in range(PARTITIONS):
        assert again[p] == stored[p], f"partition {p} read from broker {victim} differs from what the survivors served"


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
