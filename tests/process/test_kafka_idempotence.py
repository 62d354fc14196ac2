"""Idempotent produce over the wire: InitProducerId, retries, sequence gaps, restarts."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from harness.process import BrokerProcess
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey, decode_response, encode_request
from loglake.record.batch import encode_batch

ROOT = Path(__file__).resolve().parents[2]


class KafkaConnection:
    """A bare protocol client: one request at a time, our own codec."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def call(self, api_key: ApiKey, version: int, body: dict) -> dict:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "test", body))
        size = struct.unpack(">i", self._read(4))[0]
        correlation_id, response = decode_response(api_key, version, self._read(size))
        assert correlation_id == self.correlation_id
        return response

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def produce(conn: KafkaConnection, topic: str, batch: bytes) -> dict:
    response = conn.call(
        ApiKey.PRODUCE,
        8,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    return response["responses"][0]["partition_responses"][0]


def batch(producer_id: int, epoch: int, sequence: int, n: int, tag: str) -> bytes:
    rows = [(None, f"{tag}-{i}".encode(), [], None) for i in range(n)]
    return encode_batch(
        rows, int(time.time() * 1000), producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )


@pytest.mark.timeout(120)
def test_retries_keep_their_offsets_gaps_are_refused_and_state_survives_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "logs", config=ROOT / "conf/server.properties")
    with broker:
        conn = KafkaConnection(broker.bootstrap)
        conn.call(
            ApiKey.CREATE_TOPICS,
            4,
            {
                "topics": [
                    {"name": "idem", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                ]
            },
        )
        init = conn.call(ApiKey.INIT_PRODUCER_ID, 2, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert init["error_code"] == 0
        pid, epoch = init["producer_id"], init["producer_epoch"]
        other = conn.call(ApiKey.INIT_PRODUCER_ID, 2, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert other["producer_id"] != pid

        first = batch(pid, epoch, 0, 5, "a")
        second = batch(pid, epoch, 5, 3, "b")
        assert produce(conn, "idem", first)["base_offset"] == 0
        assert produce(conn, "idem", second)["base_offset"] == 5
        # The same batches again (a producer retrying after a lost response).
        retried = produce(conn, "idem", first)
        assert (retried["error_code"], retried["base_offset"]) == (0, 0)
        assert produce(conn, "idem", second)["base_offset"] == 5
        gap = produce(conn, "idem", batch(pid, epoch, 20, 1, "gap"))
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        conn.close()
        broker.kill()  # no clean shutdown: the state must come back from the log itself

        broker.start()
        conn = KafkaConnection(broker.bootstrap)
        assert produce(conn, "idem", second)["base_offset"] == 5, "retry after a crash still deduplicated"
        assert produce(conn, "idem", batch(pid, epoch, 8, 2, "c"))["base_offset"] == 8
        listed = conn.call(
            ApiKey.LIST_OFFSETS,
            2,
            {"replica_id": -1, "topics": [{"name": "idem", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        )
        assert listed["topics"][0]["partitions"][0]["offset"] == 10, "nothing was appended twice"
        conn.close()
