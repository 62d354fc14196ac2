"""KIP-848 consumer groups (group.protocol=consumer) with confluent-kafka and raw requests."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from client_helpers import create_topic, make_broker, produce_values, raw_request, serve, unique_name
from ingest_gateway.process import BrokerProcess
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

SESSION_TIMEOUT_MS = 3000
# Short consumer-group timeouts, below Kafka's minimums (which the broker checks, hence the
# lowered bounds), so that fencing and reconciliation happen within a test's time.
CONSUMER_GROUP_OVERRIDES = {
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **CONSUMER_GROUP_OVERRIDES))


def consumer_config(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **extra,
    }


class Member(threading.Thread):
    """A consumer polling in a thread: records every value it gets (with the time) and
    commits each one synchronously before taking the next, so none is delivered twice."""

    def __init__(self, config: dict[str, object], topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(config)
        self.consumer.subscribe([topic])
        self.received: list[tuple[float, int, bytes]] = []  # (time, partition, value)
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if not msg.error().retriable() and msg.error().code() != msg.error()._PARTITION_EOF:
                        self.errors.append(str(msg.error()))
                    continue
                self.consumer.commit(message=msg, asynchronous=False)
                self.received.append((time.monotonic(), msg.partition(), msg.value()))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
        finally:
            self.consumer.close()

    def partitions(self) -> set[int]:
        return {p.partition for p in self.consumer.assignment()}

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=15)


def wait_until(condition, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


class SteadyProducer(threading.Thread):
    """Produces numbered values to every partition until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic = topic
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            self.producer.produce(self.topic, value=b"%d" % self.sent)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        assert self.producer.flush(30) == 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


@pytest.mark.slow
def test_scale_up_and_down_consumes_every_record_once(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=6)
    group = unique_name("g848")
    producer = SteadyProducer(broker.bootstrap, topic)
    producer.start()
    first = Member(consumer_config(broker.bootstrap, group, **{"group.remote.assignor": "uniform"}), topic)
    first.start()
    wait_until(lambda: len(first.partitions()) == 6, what="first member owns all partitions")
    others = [Member(consumer_config(broker.bootstrap, group), topic) for _ in range(2)]
    change_started = time.monotonic()
    for m in others:
        m.start()
    wait_until(lambda: all(len(m.partitions()) == 2 for m in (first, *others)), what="3 members, 2 partitions each")
    kept = first.partitions()
    for m in others:
        m.stop()
    wait_until(lambda: len(first.partitions()) == 6, what="the first member owns all partitions again")
    change_ended = time.monotonic()
    time.sleep(0.5)
    producer.stop()
    wait_until(
        lambda: sum(len(m.received) for m in (first, *others)) >= producer.sent, what="every record consumed"
    )
    first.stop()
    members = (first, *others)
    assert not [e for m in members for e in m.errors]
    values = [v for m in members for _, _, v in m.received]
    assert len(values) == len(set(values)) == producer.sent
    # The partitions the first member kept never stopped flowing while the group changed.
    times = [t for t, p, _ in first.received if p in kept and change_started <= t <= change_ended]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times and max(gaps) < 2.0, gaps


def test_group_describe_and_list(broker: BrokerProcess, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, topic, partitions=2)
    group = unique_name("g848")
    member = Member(consumer_config(broker.bootstrap, group), topic)
    member.start()
    try:
        wait_until(lambda: len(member.partitions()) == 2, what="assignment")
        body = raw_request(
            broker.bootstrap,
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [group, "no-such-group"], "include_authorized_operations": False},
        )
        described, missing = body["groups"]
        assert described["error_code"] == 0 and described["group_state"] == "Stable"
        (m,) = described["members"]
        assert m["member_epoch"] == described["group_epoch"] > 0
        assert [t["topic_name"] for t in m["assignment"]["topic_partitions"]] == [topic]
        assert m["assignment"] == m["target_assignment"]
        assert missing["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_consumer_groups().result(timeout=10)
        assert group in {g.group_id for g in listed.valid}
    finally:
        member.stop()
