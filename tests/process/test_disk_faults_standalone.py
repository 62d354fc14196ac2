"""A standalone broker whose disks fill up (a real tmpfs): every request is answered with
Kafka's error, nothing acknowledged is lost, a restart with space recovers; with two log
dirs the healthy one keeps serving; damaged files at start-up are rebuilt."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from disk_helpers import fill_disk, small_disk
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.record.batch import encode_batch
from protocol_helpers import call

from harness.process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
STANDALONE = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
# What a producer may see from a broker whose disk is full: the storage error, then (once
# the partition is offline) no leader, so its records time out in its queue. Never a
# dropped connection (_TRANSPORT) or an unanswered request (_TIMED_OUT).
ALLOWED_DELIVERY_ERRORS = {
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError._MSG_TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def health(broker: BrokerProcess) -> httpx.Response:
    return httpx.get(f"{broker.http_url}/healthz", timeout=5)


class Writer:
    """An idempotent acks=all producer of numbered 1 KB records; remembers what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[int, list[int]] = {}
        self.errors: list[KafkaError] = []
        self.client_errors: list[KafkaError] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 8000,
                "request.timeout.ms": 5000,
                "error_cb": self.client_errors.append,
            }
        )
        self.sent = 0

    def _delivered(self, err: KafkaError | None, msg) -> None:
        if err is None:
            self.acked.setdefault(msg.partition(), []).append(int(msg.value()[:10]))
        else:
            self.errors.append(err)

    def send(self, topic: str, count: int, partition: int = 0) -> None:
        for _ in range(count):
            value = f"{self.sent:010d}".encode().ljust(1000, b"x")
            self.sent += 1
            while True:
                try:
                    self.producer.produce(topic, value, partition=partition, on_delivery=self._delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def unexpected_errors(self) -> list[KafkaError]:
        bad = [e for e in self.errors if e.code() not in ALLOWED_DELIVERY_ERRORS]
        bad += [e for e in self.client_errors if e.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)]
        return bad


def read_values(bootstrap: str, topic: str, partition: int, expected: int) -> list[int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"r{time.monotonic_ns()}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    values: list[int] = []
    deadline = time.monotonic() + 60
    while len(values) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                values.append(int(msg.value()[:10]))
    consumer.close()
    return values


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def test_a_full_disk_answers_every_request_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    with small_disk(tmp_path / "logs", 16) as logs:
        broker = BrokerProcess(logs, config=ROOT / "conf/server.properties", overrides=STANDALONE)
        try:
            broker.start()
            create(broker.bootstrap, "t")
            writer = Writer(broker.bootstrap)
            while health(broker).json()["status"] == "ok":
                writer.send("t", 500)
                assert writer.sent < 40_000, "the disk never filled"
            writer.flush()
            assert writer.acked, "nothing was acknowledged before the disk filled"
            assert not writer.unexpected_errors(), writer.unexpected_errors()
            status = health(broker)
            assert status.status_code == 503 and str(logs) in status.json()["offline_log_dirs"]
            fill_disk(logs)  # whatever a failed write gave back
            # Requests on the full disk are answered with Kafka's error, on open connections.
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            with pytest.raises(KafkaException) as refused:
                admin.create_topics([NewTopic("u", 1, 1)])["u"].result(15)
            assert refused.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
            with pytest.raises(KafkaException) as not_deleted:
                admin.delete_topics(["t"])["t"].result(15)
            assert not_deleted.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
            assert call_fetch(broker.bootstrap, "t") == ErrorCode.KAFKA_STORAGE_ERROR
            assert call_produce(broker.bootstrap, "t") == ErrorCode.KAFKA_STORAGE_ERROR
            late = Writer(broker.bootstrap)
            late.send("t", 20)
            late.flush()
            assert not late.acked and not late.unexpected_errors(), late.unexpected_errors()
            http = httpx.post(
                f"{broker.http_url}/topics/t/partitions/0", json={"records": [{"value": "v"}]}, timeout=10
            )
            assert (http.status_code, http.json()["kafka_error"]) in (
                (507, "KAFKA_STORAGE_ERROR"),
                (503, "LEADER_NOT_AVAILABLE"),
            )
            assert http.json()["message"]
            assert broker.proc is not None and broker.proc.poll() is None, "a standalone broker stays up"
            broker.kill()
            (logs / "filler").unlink()
            broker.start()
            acked = writer.acked[0]
            values = read_values(broker.bootstrap, "t", 0, len(acked))
            assert values[: len(acked)] == acked, "every acknowledged record, in order, once"
            assert len(values) == len(set(values))
        finally:
            broker.kill()


def call_produce(bootstrap: str, topic: str) -> int:
    """An acks=all Produce of one record to partition 0; its error code."""
    batch = encode_batch([(None, b"late", [], None)], int(time.time() * 1000))
    response = call(
        bootstrap,
        ApiKey.PRODUCE,
        8,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    return response["responses"][0]["partition_responses"][0]["error_code"]


def call_fetch(bootstrap: str, topic: str) -> int:
    """A Fetch (v6, the first that may answer KAFKA_STORAGE_ERROR; older ones are told
    NOT_LEADER_OR_FOLLOWER) of partition 0 from offset 0; its error code."""
    partition = {"partition": 0, "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    request = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0}
    response = call(bootstrap, ApiKey.FETCH, 6, {**request, "topics": [{"topic": topic, "partitions": [partition]}]})
    return response["responses"][0]["partitions"][0]["error_code"]


def describe_log_dirs(bootstrap: str) -> dict[str, tuple[int, dict[tuple[str, int], int]]]:
    """DescribeLogDirs: each dir's error code and its partitions' sizes."""
    response = call(bootstrap, ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": None})
    return {
        r["log_dir"]: (
            r["error_code"],
            {(t["name"], p["partition_index"]): p["partition_size"] for t in r["topics"] for p in t["partitions"]},
        )
        for r in response["results"]
    }


def dir_of(bootstrap: str, topic: str, partition: int) -> str:
    return next(d for d, (_, parts) in describe_log_dirs(bootstrap).items() if (topic, partition) in parts)


def test_with_two_log_dirs_one_full_the_other_keeps_serving(tmp_path: Path) -> None:
    healthy = tmp_path / "healthy"
    with small_disk(tmp_path / "small", 8) as small:
        # The embedded metadata document lives in the first dir: the healthy one.
        broker = BrokerProcess(
            healthy, config=ROOT / "conf/server.properties", overrides={**STANDALONE, "log.dirs": f"{healthy},{small}"}
        )
        try:
            broker.start()
            create(broker.bootstrap, "a", partitions=2)
            on_small = next(p for p in (0, 1) if dir_of(broker.bootstrap, "a", p) == str(small))
            on_healthy = 1 - on_small
            writer = Writer(broker.bootstrap)
            while health(broker).json()["status"] == "ok":
                writer.send("a", 500, partition=on_small)
                assert writer.sent < 20_000, "the disk never filled"
            writer.flush()
            assert not writer.unexpected_errors(), writer.unexpected_errors()
            status = health(broker)
            assert status.status_code == 200 and status.json()["status"] == "degraded"
            assert list(status.json()["offline_log_dirs"]) == [str(small)]
            dirs = describe_log_dirs(broker.bootstrap)
            assert dirs[str(small)][0] == ErrorCode.KAFKA_STORAGE_ERROR and dirs[str(healthy)][0] == ErrorCode.NONE
            metrics = httpx.get(f"{broker.http_url}/metrics", timeout=10).text
            assert "kafka_log_log_manager_offline_log_directory_count 1.0" in metrics
            # The healthy dir's partition, and new ones, keep serving.
            other = Writer(broker.bootstrap)
            other.send("a", 200, partition=on_healthy)
            other.flush()
            assert len(other.acked[on_healthy]) == 200 and not other.errors
            assert read_values(broker.bootstrap, "a", on_healthy, 200) == other.acked[on_healthy]
            create(broker.bootstrap, "b")
            assert dir_of(broker.bootstrap, "b", 0) == str(healthy)
            move = {"dirs": [{"path": str(small), "topics": [{"name": "b", "partitions": [0]}]}]}
            moved = call(broker.bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, move)
            assert moved["results"][0]["partitions"][0]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
            # The CLI and the console show it.
            cli = subprocess.run(
                [sys.executable, "-m", "loglake.cli", "cluster", "status", "--bootstrap-http", broker.http_url],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert cli.returncode == 0 and f"OFFLINE {small} (append to a-{on_small}" in cli.stdout, cli.stdout
            console = httpx.get(f"{broker.http_url}/ui", timeout=10).text
            assert f"offline: {small}" in console
            assert broker.proc is not None and broker.proc.poll() is None
        finally:
            broker.kill()


def test_start_up_with_damaged_files_loses_nothing_acknowledged(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    broker = BrokerProcess(
        first, config=ROOT / "conf/server.properties", overrides={**STANDALONE, "log.dirs": f"{first},{second}"}
    )
    try:
        broker.start()
        create(broker.bootstrap, "t", partitions=2)
        writer = Writer(broker.bootstrap)
        for p in (0, 1):
            writer.send("t", 3000, partition=p)
        writer.flush()
        assert [len(writer.acked[p]) for p in (0, 1)] == [3000, 3000]
        broker.kill()
        for log_dir in (first, second):
            (log_dir / "recovery-point-offset-checkpoint").write_bytes(b"\x00garbage")
            (log_dir / "log-start-offset-checkpoint").write_text("0\n5\n")
            (log_dir / "replication-offset-checkpoint.tmp").write_text("half")
            for partition in log_dir.glob("t-*"):
                (partition / "leader-epoch-checkpoint").write_text("nonsense")
                for index in partition.glob("*.index"):
                    index.write_bytes(b"")
        (second / "meta.properties").unlink()
        broker.start()
        for p in (0, 1):
            assert read_values(broker.bootstrap, "t", p, 3000) == writer.acked[p]
        assert (second / "meta.properties").exists() and not list(first.glob("*.tmp"))
    finally:
        broker.kill()
