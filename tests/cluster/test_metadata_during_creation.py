"""Topics created through one broker while a client asks another for them: in the moment a
topic is in ZooKeeper but not yet in the asked broker's metadata image, the answer is an
error the client retries on (LEADER_NOT_AVAILABLE), never a dropped connection."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ingest_gateway.network.kafka_client import KafkaClient
from harness.local_cluster import LocalCluster
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPICS = [f"burst-{i}" for i in range(20)]
RETRIABLE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE}


def create_one_by_one(bootstrap: str, started: list[str], done: threading.Event) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for name in TOPICS:
            started.append(name)
            try:
                admin.create_topics([NewTopic(name, 3, 3)])[name].result(30)
            except KafkaException as exc:  # auto-created through the other broker first
                assert exc.args[0].code() == ErrorCode.TOPIC_ALREADY_EXISTS, exc
    finally:
        done.set()


async def hammer(host: str, port: int, started: list[str], done: threading.Event) -> dict[str, set[int]]:
    """Metadata for every topic being created, on one connection, until all are served."""
    seen: dict[str, set[int]] = {name: set() for name in TOPICS}
    client = KafkaClient(host, port, client_id="hammer")
    try:
        for attempt in range(100_000):
            names = list(started)
            body = {
                "topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names],
                "allow_auto_topic_creation": attempt % 2 == 0,
                "include_topic_authorized_operations": False,
            }
            answer = await client.request(ApiKey.METADATA, 12, body)  # raises if the connection drops
            for t in answer["topics"]:
                seen[t["name"]].add(t["error_code"])
            complete = all(t["error_code"] == 0 and len(t["partitions"]) >= 1 for t in answer["topics"])
            if done.is_set() and len(names) == len(TOPICS) and complete:
                return seen
            await asyncio.sleep(0.005)
        raise AssertionError("the topics never all became available")
    finally:
        await client.close()


@pytest.mark.timeout(240)
def test_metadata_while_another_broker_creates_topics(cluster: LocalCluster) -> None:
    started: list[str] = []
    done = threading.Event()
    creator = threading.Thread(target=create_one_by_one, args=(cluster.brokers[1].bootstrap, started, done))
    creator.start()
    try:
        asked = cluster.brokers[2]
        seen = asyncio.run(hammer("127.0.0.1", asked.kafka_port, started, done))
    finally:
        creator.join(120)
    codes = set().union(*seen.values())
    assert codes <= RETRIABLE, {n: c for n, c in seen.items() if c - RETRIABLE}
    assert cluster.brokers[2].proc.poll() is None
