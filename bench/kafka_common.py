"""What the Kafka-protocol benchmarks share: the two clusters they compare.

The baseline is librdkafka's in-process mock cluster (`test.mock.num.brokers=1`): the
same client code against a broker that costs next to nothing, so the ratio shows how much
loglake's broker slows a client down.
"""

from __future__ import annotations

import contextlib
import queue
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.process import BrokerProcess

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def loglake_cluster(overrides: dict[str, str] | None = None) -> Iterator[str]:
    """A standalone loglake broker process; yields its bootstrap address."""
    with loglake_broker(overrides) as broker:
        yield broker.bootstrap


@contextlib.contextmanager
def loglake_broker(overrides: dict[str, str] | None = None) -> Iterator[BrokerProcess]:
    """A standalone loglake broker process (`overrides`: its properties)."""
    with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
        with BrokerProcess(Path(tmp) / "logs", config=ROOT / "conf/server.properties", overrides=overrides) as broker:
            yield broker


@contextlib.contextmanager
def mock_cluster() -> Iterator[str]:
    """librdkafka's mock cluster, kept alive by a client that owns it; yields its address.

    librdkafka announces the mock cluster's address in a log line; other clients connect
    to it like to any broker.
    """
    lines: queue.Queue[str] = queue.Queue()

    class _Logger:
        def log(self, level: int, message: str, *args: object) -> None:
            lines.put(message % args if args else message)

    owner = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "unused:1", "logger": _Logger()})
    owner.poll(0)
    deadline = time.monotonic() + 10
    bootstrap = None
    while bootstrap is None and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            owner.poll(0)
            continue
        if "replaced with" in line:
            bootstrap = line.rsplit("replaced with", 1)[1].strip().split()[0]
    if bootstrap is None:
        raise RuntimeError("librdkafka did not announce its mock cluster")
    try:
        yield bootstrap
    finally:
        owner.flush(1)


MOCK_PARTITIONS = 4


def create_topic(bootstrap: str, name: str, partitions: int, mock: bool = False, replication: int = 1) -> int:
    """Create `name`; returns its partition count. The mock cluster does not answer
    CreateTopics, so there the topic is auto-created with its fixed default (4 partitions)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if mock:
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(name, b"")
        producer.flush(30)
        partitions = MOCK_PARTITIONS
    else:
        for future in admin.create_topics([NewTopic(name, partitions, replication)]).values():
            future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return partitions
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} did not appear")
