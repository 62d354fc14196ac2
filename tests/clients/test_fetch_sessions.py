"""Fetch sessions (KIP-227) and Fetch v13-17 on the wire: raw requests checking what an
incremental answer carries, the session errors and the topic-id errors; then confluent-kafka
and kafka-python consumers (both use sessions when offered) reading many partitions."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from client_helpers import connect, create_topic, produce_values, recv_frame
from loglake.protocol import ApiKey, decode_response, encode_request
from loglake.record.batch import decode_batches

NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
UNKNOWN_TOPIC_ID = 100
FETCH_SESSION_TOPIC_ID_ERROR = 106
ZERO_UUID = uuid.UUID(int=0)


class RawFetcher:
    """Fetch requests of one version over one connection, naming topics as that version does."""

    def __init__(self, bootstrap: str, version: int, topic: str, topic_id: uuid.UUID) -> None:
        self.sock = connect(bootstrap)
        self.version = version
        self.topic, self.topic_id = topic, topic_id
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, api_key: int, version: int, body: dict) -> dict:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "raw-fetch", body))
        payload = recv_frame(self.sock)
        assert payload is not None, "the broker closed the connection"
        cid, response = decode_response(api_key, version, payload)
        assert cid == self.correlation
        return response

    def _topic(self, partitions: list, topic_id: uuid.UUID | None = None) -> dict:
        return {"topic": self.topic, "topic_id": topic_id or self.topic_id, "partitions": partitions}

    def fetch(
        self,
        session_id: int,
        epoch: int,
        offsets: dict[int, int],
        forget: list[int] = (),  # type: ignore[assignment]
        max_wait_ms: int = 50,
        replica_id: int = -1,
        version: int | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> dict:
        partitions = [
            {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20, "log_start_offset": -1}
            for p, o in offsets.items()
        ]
        body = {
            "replica_id": replica_id,
            "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 24,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [self._topic(partitions, topic_id)] if partitions else [],
            "forgotten_topics_data": [self._topic(list(forget), topic_id)] if forget else [],
        }
        return self.request(ApiKey.FETCH, version or self.version, body)


def answered(response: dict) -> dict[int, dict]:
    """partition -> its answer."""
    out = {}
    for t in response["responses"]:
        out.update({p["partition_index"]: p for p in t["partitions"]})
    return out


def values(entry: dict) -> list[bytes]:
    return [r.value for _, batch in decode_batches(bytes(entry["records"] or b"")) for r in batch]


def topic_id_of(bootstrap: str, topic: str, version: int = 12) -> uuid.UUID:
    with connect(bootstrap) as sock:
        sock.sendall(
            encode_request(
                ApiKey.METADATA, version, 1, "raw", {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
            )
        )
        _, body = decode_response(ApiKey.METADATA, version, recv_frame(sock))
    (t,) = body["topics"]
    assert t["error_code"] == 0
    return t["topic_id"]


def test_metadata_hands_out_the_topic_ids_fetch_uses(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=2)
    topic_id = topic_id_of(broker.bootstrap, topic, version=12)
    assert topic_id != ZERO_UUID
    assert topic_id_of(broker.bootstrap, topic, version=10) == topic_id
    produce_values(broker.bootstrap, topic, [b"by-id"], partition=1)
    f = RawFetcher(broker.bootstrap, 13, topic, topic_id)
    try:
        response = f.fetch(0, -1, {1: 0})
        (t,) = response["responses"]
        assert t["topic_id"] == topic_id
        assert values(t["partitions"][0]) == [b"by-id"]
    finally:
        f.close()


@pytest.mark.parametrize("version", [12, 13, 15, 17])
def test_incremental_fetch_session_on_the_wire(broker, topic, version):
    create_topic(broker.bootstrap, topic, partitions=3)
    topic_id = topic_id_of(broker.bootstrap, topic) if version >= 13 else ZERO_UUID
    produce_values(broker.bootstrap, topic, [b"a", b"b"], partition=0)
    f = RawFetcher(broker.bootstrap, version, topic, topic_id)
    try:
        # Full fetch, epoch 0: a session, and every partition in the answer.
        full = f.fetch(0, 0, {0: 0, 1: 0, 2: 0})
        session_id = full["session_id"]
        assert full["error_code"] == NONE and session_id > 0
        parts = answered(full)
        assert sorted(parts) == [0, 1, 2] and values(parts[0]) == [b"a", b"b"]
        assert all(t["topic_id"] == topic_id for t in full["responses"]) if version >= 13 else True

        # Incremental, epoch 1: partition 0 moves on; nothing is new, so nothing is answered.
        nothing = f.fetch(session_id, 1, {0: 2})
        assert (nothing["error_code"], nothing["session_id"], nothing["responses"]) == (NONE, session_id, [])

        # New records in partition 1 (not named in the request): only it is answered.
        produce_values(broker.bootstrap, topic, [b"c"], partition=1)
        news = answered(f.fetch(session_id, 2, {}, max_wait_ms=2000))
        assert list(news) == [1] and values(news[1]) == [b"c"] and news[1]["high_watermark"] == 1

        # Forget partition 2; partition 1 continues at 1. Records in partition 2 are no news now.
        produce_values(broker.bootstrap, topic, [b"d"], partition=2)
        produce_values(broker.bootstrap, topic, [b"e"], partition=0)
        after = answered(f.fetch(session_id, 3, {1: 1}, forget=[2], max_wait_ms=2000))
        assert list(after) == [0] and values(after[0]) == [b"e"]

        # Session errors: a wrong epoch, an unknown session; the session survives them.
        wrong = f.fetch(session_id, 7, {})
        assert (wrong["error_code"], wrong["session_id"], wrong["responses"]) == (INVALID_FETCH_SESSION_EPOCH, 0, [])
        assert f.fetch(session_id + 1, 1, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        if version >= 13:
            # A session by topic ids cannot go on by names.
            assert f.fetch(session_id, 4, {}, version=12)["error_code"] == FETCH_SESSION_TOPIC_ID_ERROR
        assert f.fetch(session_id, 4, {})["error_code"] == NONE

        # Sessionless (epoch -1) closes the session and answers everything asked.
        sessionless = f.fetch(session_id, -1, {0: 0, 2: 0})
        assert sessionless["session_id"] == 0 and sorted(answered(sessionless)) == [0, 2]
        assert f.fetch(session_id, 5, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
    finally:
        f.close()


@pytest.mark.parametrize("version", [13, 17])
def test_unknown_topic_id(broker, topic, version):
    create_topic(broker.bootstrap, topic)
    unknown = uuid.uuid4()
    f = RawFetcher(broker.bootstrap, version, topic, unknown)
    try:
        response = f.fetch(0, 0, {0: 0})
        (t,) = response["responses"]
        assert t["topic_id"] == unknown and t["partitions"][0]["error_code"] == UNKNOWN_TOPIC_ID
        # The partition stays in the session and keeps its error.
        again = f.fetch(response["session_id"], 1, {})
        assert answered(again)[0]["error_code"] == UNKNOWN_TOPIC_ID
    finally:
        f.close()


@pytest.mark.parametrize("version", [12, 15, 16, 17])
def test_follower_fetch_from_a_non_replica_names_the_leader(broker, topic, version):
    """v15 moved the replica id into replica_state: a fetch as broker 7 (no replica of the
    topic) is refused, not served as a consumer's; from v16 the answer names the leader
    and its endpoint (KIP-951)."""
    create_topic(broker.bootstrap, topic)
    produce_values(broker.bootstrap, topic, [b"x"], partition=0)
    topic_id = topic_id_of(broker.bootstrap, topic) if version >= 13 else ZERO_UUID
    f = RawFetcher(broker.bootstrap, version, topic, topic_id)
    try:
        response = f.fetch(0, -1, {0: 0}, replica_id=7)
        entry = answered(response)[0]
        assert entry["error_code"] == NOT_LEADER_OR_FOLLOWER
        if version >= 16:
            port = broker.bootstrap.rsplit(":", 1)[1]
            assert entry["current_leader"]["leader_id"] == 0 and entry["current_leader"]["leader_epoch"] >= 0
            (node,) = response["node_endpoints"]
            assert (node["node_id"], node["port"]) == (0, int(port))
    finally:
        f.close()


# Real clients ----------------------------------------------------------------------------------

PARTITIONS = 24
PER_PARTITION = 30


def fill(bootstrap: str, topic: str) -> set[bytes]:
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    expected = set()
    for p in range(PARTITIONS):
        batch = [b"%d-%d" % (p, i) for i in range(PER_PARTITION)]
        produce_values(bootstrap, topic, batch, partition=p)
        expected.update(batch)
    return expected


def test_confluent_consumer_reads_many_partitions(broker, topic):
    expected = fill(broker.bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    seen: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(seen) < len(expected) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    seen.append(msg.value())
        # Records produced while the consumer idles in its session still arrive.
        produce_values(broker.bootstrap, topic, [b"late-3"], partition=3)
        produce_values(broker.bootstrap, topic, [b"late-17"], partition=17)
        deadline = time.monotonic() + 15
        while len(seen) < len(expected) + 2 and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    seen.append(msg.value())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(expected | {b"late-3", b"late-17"}), "records lost or duplicated"


def test_kafka_python_consumer_reads_many_partitions_in_a_session(broker, topic):
    expected = fill(broker.bootstrap, topic)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        api_version=(3, 9),
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    seen: list[bytes] = []
    try:
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)

        def drain(count: int) -> None:
            deadline = time.monotonic() + 30
            while len(seen) < count and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    seen.extend(r.value for r in records)

        drain(len(expected))
        produce_values(broker.bootstrap, topic, [b"late-5"], partition=5)
        drain(len(expected) + 1)
        # kafka-python's own session state: a session, and incremental requests in it.
        sessions = consumer._fetcher._session_handlers
        assert any(h.next_metadata.session_id > 0 and h.next_metadata.epoch > 1 for h in sessions.values())
    finally:
        consumer.close()
    assert sorted(seen) == sorted(expected | {b"late-5"}), "records lost or duplicated"
