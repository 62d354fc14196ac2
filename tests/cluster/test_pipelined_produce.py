"""Produce requests pipelined on one connection while an earlier one waits for its followers:
the later ones are appended meanwhile (a linger.ms=0 producer is not held to one request per
replication round trip), and every answer still goes out in request order."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_helpers import FAST
from harness.local_cluster import LocalCluster
from loglake.protocol import ApiKey, decode_response, encode_request
from loglake.record.batch import encode_batch

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def recv_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, "the broker closed the connection"
            buf += chunk
        return bytes(buf)

    return exactly(int.from_bytes(exactly(4), "big"))


def produce(topic: str, value: bytes, correlation_id: int) -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 120_000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": encode_batch([(None, value, [], None)], 0)}],
            }
        ],
    }
    return encode_request(ApiKey.PRODUCE, 9, correlation_id, "raw", body)


def isr(status: dict, topic: str) -> list[int] | None:
    found = [p for p in status["partitions"] if p["topic"] == topic]
    return sorted(found[0]["isr"]) if found else None


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-reader"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


@pytest.mark.parametrize("half_closed", [False, True], ids=["open", "half-closed"])
def test_a_produce_waiting_for_its_followers_does_not_hold_back_the_next(
    tmp_path: Path, zk_connect: str, half_closed: bool
) -> None:
    """Half-closed: the client shuts its side after the two produces (no ApiVersions); the
    broker reads the end while the first still waits, and both answers still come."""
    # A paused follower stays in the ISR (and its ZooKeeper session alive) for the whole
    # test: the first produce can only be answered once it is resumed.
    overrides = {**FAST, "replica.lag.time.max.ms": "600000", "zookeeper.session.timeout.ms": "30000"}
    with LocalCluster(tmp_path, 2, overrides, zookeeper_connect=zk_connect) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = [NewTopic("slow", 1, replica_assignment=[[1, 2]]), NewTopic("quick", 1, replica_assignment=[[1]], config={"min.insync.replicas": "1"})]
        for future in admin.create_topics(topics).values():
            future.result(30)
        cluster.wait_for(lambda s: isr(s, "slow") == [1, 2] and isr(s, "quick") == [1])
        leader = cluster.brokers[1].bootstrap
        cluster.pause(2)
        try:
            with socket.create_connection(leader.rsplit(":", 1), timeout=60) as s:  # type: ignore[arg-type]
                api_versions = {"client_software_name": "t", "client_software_version": "1"}
                requests = produce("slow", b"first", 1) + produce("quick", b"second", 2)
                if half_closed:
                    s.sendall(requests)
                    s.shutdown(socket.SHUT_WR)
                else:
                    s.sendall(requests + encode_request(ApiKey.API_VERSIONS, 3, 3, "raw", api_versions))
                # The second produce is appended (its partition has no follower: it is
                # committed at once) while the first still waits for the paused follower.
                deadline = time.monotonic() + 60
                while high_watermark(leader, "quick") < 1:
                    assert time.monotonic() < deadline, "the second produce was not appended"
                    time.sleep(0.05)
                s.setblocking(False)
                with pytest.raises(BlockingIOError):
                    s.recv(1)  # nothing answered yet: the first answer comes first
                s.setblocking(True)
                assert high_watermark(leader, "slow") == 0
                cluster.resume(2)
                answers = [recv_frame(s) for _ in range(2 if half_closed else 3)]
        finally:
            cluster.resume(2)
        first = decode_response(ApiKey.PRODUCE, 9, answers[0])
        second = decode_response(ApiKey.PRODUCE, 9, answers[1])
        assert (first[0], second[0]) == (1, 2)
        for _, body in (first, second):
            assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
        if not half_closed:
            assert decode_response(ApiKey.API_VERSIONS, 3, answers[2])[0] == 3
        assert high_watermark(leader, "slow") == 1
