"""GET /metrics after known traffic from real clients: the scraped values are what the traffic implies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from client_helpers import BROKER_OVERRIDES, ROOT, create_topic, make_broker, produce_values, raw_request, serve
from harness.process import BrokerProcess, free_port
from loglake.protocol import ApiKey
from metrics_helpers import scrape


def _segment_bytes(broker: BrokerProcess, topic: str) -> int:
    """The partition's bytes on disk, read independently of the broker's metrics."""
    return sum(f.stat().st_size for f in (broker.log_dir / f"{topic}-0").glob("*.log"))


def test_records_in_and_out_and_group_lag(broker: BrokerProcess, topic: str) -> None:
    n, m = 120, 45
    create_topic(broker.bootstrap, topic)
    produce_values(broker.bootstrap, topic, [b"v%03d" % i for i in range(n)])
    stored = _segment_bytes(broker, topic)

    group = f"{topic}-group"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        got += sum(1 for msg in consumer.consume(n, 0.5) if msg.error() is None)
    assert got == n
    # The group has read everything but committed only the first M records: its lag is N - M.
    consumer.commit(offsets=[TopicPartition(topic, 0, m)], asynchronous=False)
    consumer.close()

    s = scrape(broker.http_url)
    assert s.value("kafka_server_broker_topic_messages_in_total", topic=topic) == n
    assert s.value("kafka_server_broker_topic_bytes_in_total", topic=topic) == stored
    # Every batch went out once, whole (the consumer read the partition once, start to end).
    assert s.value("kafka_server_broker_topic_bytes_out_total", topic=topic) == stored
    assert s.value("kafka_log_size_bytes", topic=topic, partition=0) == stored
    assert s.value("kafka_log_start_offset", topic=topic, partition=0) == 0
    assert s.value("kafka_log_end_offset", topic=topic, partition=0) == n
    assert s.value("kafka_consumergroup_committed_offset", group=group, topic=topic, partition=0) == m
    assert s.value("kafka_consumergroup_lag", group=group, topic=topic, partition=0) == n - m
    assert s.value("kafka_network_requests_total", request="Produce") >= 1
    assert s.value("kafka_network_requests_total", request="OffsetCommit") >= 1
    # A standalone broker is its own controller.
    assert s.value("kafka_controller_active_controller_count") == 1
    assert s.value("kafka_server_replica_manager_offline_partitions") == 0
    assert s.value("kafka_server_replica_manager_under_replicated_partitions") == 0
    assert s.value("kafka_server_replica_manager_leader_count") == s.value(
        "kafka_server_replica_manager_partition_count"
    )


@pytest.fixture
def quiet_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of this test's own: no other client's request (a closing consumer's last
    long poll) can land between two scrapes."""
    yield from serve(make_broker(tmp_path / "logs"))


def test_request_counts_errors_and_times(quiet_broker: BrokerProcess, topic: str) -> None:
    broker = quiet_broker
    created = raw_request(
        broker.bootstrap,
        ApiKey.CREATE_TOPICS,
        7,
        {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000},
    )
    assert created["topics"][0]["error_code"] == 0, created
    before = scrape(broker.http_url)

    for _ in range(3):
        raw_request(broker.bootstrap, ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
    # Two partitions that do not exist: one error code each.
    raw_request(
        broker.bootstrap,
        ApiKey.LIST_OFFSETS,
        7,
        {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 5}, {"partition_index": 6}]}]},
    )
    # A consumer's long poll on an empty partition: its wait is remote time, not local.
    raw_request(
        broker.bootstrap,
        ApiKey.FETCH,
        12,
        {
            "max_wait_ms": 400,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}
            ],
        },
    )
    after = scrape(broker.http_url)

    def delta(name: str, **labels: object) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta("kafka_network_requests_total", request="Metadata") == 3
    for kind in ("total", "queue", "local", "remote"):
        assert delta(f"kafka_network_request_{kind}_time_seconds_count", request="Metadata") == 3
    assert delta("kafka_network_request_remote_time_seconds_sum", request="Metadata") == 0
    errors = delta("kafka_network_request_errors_total", request="ListOffsets", error="UNKNOWN_TOPIC_OR_PARTITION")
    assert errors == 2
    assert delta("kafka_network_requests_total", request="Fetch") == 1
    remote = delta("kafka_network_request_remote_time_seconds_sum", request="Fetch")
    local = delta("kafka_network_request_local_time_seconds_sum", request="Fetch")
    total = delta("kafka_network_request_total_time_seconds_sum", request="Fetch")
    assert 0.35 <= remote <= total, (remote, total)
    assert local < remote
    # The exposition's histogram is cumulative: the 400 ms wait lands above the 250 ms bucket.
    assert delta("kafka_network_request_remote_time_seconds_bucket", request="Fetch", le="0.25") == 0
    assert delta("kafka_network_request_remote_time_seconds_bucket", request="Fetch", le="0.5") == 1


def test_request_logging_is_off_by_default(broker: BrokerProcess) -> None:
    raw_request(broker.bootstrap, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert "kafka.request.logger" not in broker.output()


def test_json_logs_request_log_and_log_level_from_the_cli(tmp_path: Path) -> None:
    """`loglake broker start --log-level DEBUG` with log.format=json and request logging on:
    every line is a JSON object, DEBUG lines are there, and each request has its line."""
    kafka_port, http_port = free_port(), free_port()
    overrides = {
        **BROKER_OVERRIDES,
        "log.dirs": str(tmp_path / "logs"),
        "listeners": f"PLAINTEXT://127.0.0.1:{kafka_port}",
        "http.listeners": f"http://127.0.0.1:{http_port}",
        "log.format": "json",
        "request.logging.enable": "true",
    }
    argv = [sys.executable, "-m", "loglake.cli", "broker", "start", "--config", str(ROOT / "conf/server.properties")]
    for k, v in overrides.items():
        argv += ["--override", f"{k}={v}"]
    argv += ["--log-level", "debug"]
    out = tmp_path / "broker.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, out.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        bootstrap = f"127.0.0.1:{kafka_port}"
        raw_request(bootstrap, ApiKey.METADATA, 12, {"topics": [{"name": "logged"}]}, correlation_id=4242)
        # A full fetch with session epoch 0 creates a fetch session, which is logged at DEBUG.
        fetch = {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1024,
            "session_id": 0,
            "session_epoch": 0,
            "topics": [{"topic": "logged", "partitions": [{"partition": 0, "fetch_offset": 0}]}],
        }
        raw_request(bootstrap, ApiKey.FETCH, 12, fetch)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
    entries = [json.loads(line) for line in lines]
    assert {"DEBUG", "INFO"} <= {e["level"] for e in entries}
    assert all(e["broker_id"] == 0 and e["time"] and e["logger"] for e in entries)
    (metadata,) = [e for e in entries if e["logger"] == "kafka.request.logger" and e.get("correlation_id") == 4242]
    assert metadata["request"] == "Metadata" and metadata["api_version"] == 12
    assert metadata["client_id"] == "raw-test"
    assert metadata["total_ms"] >= metadata["local_ms"] >= 0
    # The HTTP side's request log (uvicorn's access log) goes through the same formatter.
    assert any(e["logger"] == "uvicorn.access" and "/healthz" in e["message"] for e in entries)


def test_bad_metrics_or_log_settings_refuse_to_start(tmp_path: Path) -> None:
    for bad in ("metrics.enabled=maybe", "log.format=xml", "metrics.per.partition.enabled=2"):
        r = subprocess.run(
            [sys.executable, "-m", "ingest_gateway", "--override", f"log.dirs={tmp_path}", "--override", bad],
            capture_output=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        assert b"bad configuration" in r.stderr and bad.split("=")[0].encode() in r.stderr
        assert not any(tmp_path.iterdir()), "nothing may be written before the configuration is accepted"
