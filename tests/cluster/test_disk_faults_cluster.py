"""A cluster broker's log dir fills up or fails under load: the controller moves its
leaderships within seconds, idempotent acks=all producers and a consumer group go on,
nothing acknowledged is lost, duplicated or reordered, and the broker, restarted with a
working disk, rejoins the ISR."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Self

import pytest
from cluster_helpers import FAST
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from disk_helpers import ext4_disk, fail_disk, fill_disk, repair_disk, small_disk

from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(240)]

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


def read_everything(bootstrap: str) -> dict[int, list[tuple[int, int]]]:
    """Every record of the topic, read until each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([TOPIC])
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    at_end: set[int] = set()
    deadline = time.monotonic() + 90
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out[msg.partition()].append(tuple(map(int, msg.value().split(b":")[:2])))  # type: ignore[arg-type]
    consumer.close()
    return out


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
    logs, image = tmp_path / "broker-1" / "logs", tmp_path / "disk.img"
    overrides = {
        **FAST,
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "false",
        # Leadership goes back to broker 1 (the preferred replica) once it is in sync again.
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1",
    }
    with disk(logs, image), LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # Broker 1 leads every partition.
        assignment = [[1, 2, 3], [1, 3, 2], [1, 2, 3]]
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=assignment)])[TOPIC].result(30)
        cluster.wait_for(
            lambda s: (
                sum(p["topic"] == TOPIC and p["leader"] == 1 and len(p["isr"]) == 3 for p in s["partitions"])
                == PARTITIONS
            )
        )
        with Load(cluster.bootstrap) as load:
            wait_until(lambda: load.acked_count() >= 1000, 60, "records acknowledged before the fault")
            repair = break_it(logs, image)
            broken_at = time.monotonic()
            cluster.wait_for(
                lambda s: all(
                    p["leader"] in (2, 3) and 1 not in p["isr"] for p in s["partitions"] if p["topic"] == TOPIC
                ),
                timeout=30,
                exclude=(1,),
            )
            moved_after = time.monotonic() - broken_at
            before = load.acked_count()
            wait_until(lambda: load.acked_count() >= before + 1000, 60, "producers going on after the move")
        print(
            f"leadership moved {moved_after:.2f} s after the disk broke; {load.acked_count()} records acknowledged, "
            f"{len(load.retriable_seen)} retriable client errors"
        )
        assert not load.fatal, load.fatal[:5]
        assert moved_after < 10, f"leadership moved after {moved_after:.1f} s"
        # Broker 1 had only the broken dir: it shut down.
        wait_until(lambda: 1 not in cluster.live(), 30, "broker 1 to shut down")
        assert cluster.brokers[1].proc is not None and cluster.brokers[1].proc.returncode == 1
        stored = read_everything(cluster.bootstrap)
        assert_exactly_once_in_order(load.acked, stored)
        assert all(v in stored[p] for p, values in load.consumed.items() for v in values)
        cluster.brokers[1].kill()
        repair()
        cluster.restart(1)
        cluster.wait_for(
            lambda s: all(
                sorted(p["isr"]) == [1, 2, 3] and p["leader"] == 1 for p in s["partitions"] if p["topic"] == TOPIC
            ),
            timeout=60,
        )


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
