"""Consumer-group members for the client tests: confluent-kafka consumers polling in threads,
a steady producer, and the broker settings that make KIP-848 groups fast to test."""

from __future__ import annotations

import threading
import time

from client_helpers import raw_request
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
# Commit errors that mean the group moved on: the record was not committed, and the
# partition may be another member's by now.
_REBALANCE_COMMIT_ERRORS = frozenset(
    {
        "ILLEGAL_GENERATION",
        "REBALANCE_IN_PROGRESS",
        "UNKNOWN_MEMBER_ID",
        "STALE_MEMBER_EPOCH",
        "FENCED_MEMBER_EPOCH",
        "_ASSIGNMENT_LOST",
    }
)


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
    commits each one synchronously before taking the next, so none is delivered twice.

    A commit refused because the group moved on (the record may belong to another member by
    now) does not count the record: the member rewinds to it, so it reads it again if it
    still owns the partition, else the partition's next owner reads it from the last commit."""

    def __init__(self, config: dict[str, object], topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(config)
        # Kept by the rebalance callbacks (run within poll): asking the consumer for its
        # assignment from another thread while it polls can block.
        self.owned: set[int] = set()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        self.received: list[tuple[float, int, bytes]] = []  # (time, partition, value)
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.refused_commits = 0

    def _assigned(self, consumer, partitions) -> None:
        self.owned = self.owned | {p.partition for p in partitions}

    def _revoked(self, consumer, partitions) -> None:
        self.owned = self.owned - {p.partition for p in partitions}

    def run(self) -> None:
        from confluent_kafka import KafkaException

        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if not msg.error().retriable():
                        self.errors.append(str(msg.error()))
                    continue
                try:
                    self.consumer.commit(message=msg, asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].name() not in _REBALANCE_COMMIT_ERRORS:
                        raise
                    self.refused_commits += 1
                    self._rewind(msg)
                    continue
                self.received.append((time.monotonic(), msg.partition(), msg.value()))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
        finally:
            self.consumer.close()

    def _rewind(self, msg) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
        except KafkaException:
            pass  # no longer assigned: its next owner starts from the last commit

    def partitions(self) -> set[int]:
        return self.owned

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=15)


def heartbeat(bootstrap: str, group: str, **fields: object) -> dict:
    """A raw ConsumerGroupHeartbeat v1: a new member joining with `fields` changed."""
    body = {
        "group_id": group,
        "member_id": "",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
        **fields,
    }
    return raw_request(bootstrap, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)


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
