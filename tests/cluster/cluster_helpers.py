"""What the cluster tests share."""

from __future__ import annotations

import time
from typing import Any

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.local_cluster import LocalCluster

# Settings that make failures show within seconds: short ZooKeeper sessions and ISR lag,
# no initial rebalance delay, few offsets partitions, no background leader moves.
FAST = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "auto.leader.rebalance.enable": "false",
}


def serving(method: str, url: str, timeout: float = 30.0, **kwargs: Any) -> httpx.Response:
    """Send until the broker answers other than "not (yet) the leader": a broker the
    controller just made leader may not have received its LeaderAndIsr yet."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.request(method, url, timeout=10, **kwargs)
        if r.status_code not in (404, 503) or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def serving_get(url: str, **kwargs: Any) -> Any:
    """`serving` GET that must succeed; returns the JSON."""
    r = serving("GET", url, **kwargs)
    r.raise_for_status()
    return r.json()


def create_topic(
    cluster: LocalCluster, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})]).values():
        future.result(30)
    cluster.wait_for(lambda s: sum(p["topic"] == name and len(p["isr"]) == rf for p in s["partitions"]) == partitions)
    wait_hosted(cluster, name)


def wait_hosted(cluster: LocalCluster, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """Until every replica of the topic's partitions holds its log on disk and each leader
    serves: /cluster is ZooKeeper's view, which lists a partition (and its leader) before
    the replicas' LeaderAndIsr has arrived. Returns the last /cluster status."""
    deadline = time.monotonic() + timeout
    while True:
        status = cluster.status()
        entries = [p for p in status["partitions"] if p["topic"] == name]
        missing = [
            f"{name}-{p['partition']} on broker {b}"
            for p in entries
            for b in p["replicas"]
            if b in cluster.live()
            and not any((cluster.base_dir / f"broker-{b}").glob(f"logs*/{name}-{p['partition']}"))
        ]
        if entries and not missing:
            break
        assert time.monotonic() < deadline, f"replicas not on disk after {timeout} s: {missing or 'no partitions'}"
        time.sleep(0.1)
    for p in entries:
        url = f"{cluster.http_url(p['leader'])}/topics/{name}/partitions/{p['partition']}/offsets"
        serving("GET", url, timeout=max(1.0, deadline - time.monotonic())).raise_for_status()
    return status


def read_to_high_watermark(
    bootstrap: str,
    topic: str,
    partitions: int | list[int],
    timeout: float = 60,
    at_least: int | None = None,
    config: dict[str, Any] | None = None,
) -> dict[int, list[bytes]]:
    """Every record value of the partitions (all of 0..partitions-1 if a count), read by a
    consumer assigned to them (no group: the read does not depend on a coordinator's health)
    from the beginning to each partition's high watermark as it stood when the read began
    (read_committed: the last stable offset). Fails, naming the partitions that did not get
    there and how far they got, instead of returning less.

    With `at_least`, first waits (within `timeout` too) until the partitions' high watermarks
    add up to that many records: a new leader may report a high watermark behind what its
    predecessor acknowledged until its followers fetch again."""
    numbers = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",  # never joined: offsets are assigned
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            **(config or {}),
        }
    )
    deadline = time.monotonic() + timeout
    try:
        target: dict[int, int] = {}
        last_error: object = None
        while True:
            try:
                target = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in numbers}
                if at_least is None or sum(target.values()) >= at_least:
                    break
            except KafkaException as exc:
                target = {}
                last_error = exc
            assert time.monotonic() < deadline, (
                f"{topic}: high watermarks {target or last_error} did not reach {at_least} records in {timeout} s"
            )
            time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in numbers])
        out: dict[int, list[bytes]] = {p: [] for p in numbers}
        reached = dict.fromkeys(numbers, 0)
        errors: list[str] = []
        while any(reached[p] < target[p] for p in numbers):
            if time.monotonic() > deadline:
                short = {p: f"at {reached[p]} of {target[p]}" for p in numbers if reached[p] < target[p]}
                raise AssertionError(
                    f"{topic}: partitions {sorted(short)} not read to their high watermark in {timeout} s: {short}"
                    + (f"; consumer errors: {errors[-3:]}" if errors else "")
                )
            for msg in consumer.consume(1000, 0.2):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        reached[msg.partition()] = max(reached[msg.partition()], msg.offset())
                    else:
                        errors.append(str(error))
                    continue
                out[msg.partition()].append(msg.value())
                reached[msg.partition()] = max(reached[msg.partition()], msg.offset() + 1)
        return out
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> dict[int, list[bytes]]:
    """`read_to_high_watermark` once the high watermarks cover `expected` records."""
    return read_to_high_watermark(bootstrap, topic, partitions, timeout, at_least=expected)


def partition_of(status: dict, topic: str, partition: int = 0) -> dict:
    """One partition's entry of a /cluster status."""
    return next(p for p in status["partitions"] if p["topic"] == topic and p["partition"] == partition)
