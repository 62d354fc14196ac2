"""Helpers for the client tests: topic creation, kcat runs, reading a topic back."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from harness.process import BrokerProcess, free_port

if TYPE_CHECKING:
    from bench.pki import Pki

ROOT = Path(__file__).resolve().parents[2]
KCAT = shutil.which("kcat") or "/usr/bin/kcat"

# Fast groups and a small __consumer_offsets: the defaults (3 s initial rebalance delay,
# 6 s minimum session timeout, 50 partitions) only slow tests down.
BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}

# Short consumer-group (KIP-848) timeouts, below Kafka's minimums (which the broker checks,
# hence the lowered bounds), so that fencing and reconciliation happen within a test's time.
CONSUMER_GROUP_SESSION_TIMEOUT_MS = 3000
CONSUMER_GROUP_OVERRIDES = {
    "group.consumer.session.timeout.ms": str(CONSUMER_GROUP_SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


def make_broker(log_dir: Path, **overrides: str) -> BrokerProcess:
    return BrokerProcess(log_dir, config=ROOT / "conf/server.properties", overrides={**BROKER_OVERRIDES, **overrides})


def sasl_ssl_broker(log_dir: Path, pki: Pki, **overrides: str) -> tuple[BrokerProcess, str]:
    """A broker with a SASL_SSL listener besides its PLAINTEXT one (the tests' own), with the
    keystore and truststore of `pki`; and that listener's bootstrap address."""
    address = f"127.0.0.1:{free_port()}"
    process = make_broker(log_dir, **overrides)
    process.overrides.update(
        {
            "listeners": process.overrides["listeners"] + f",SASL_SSL://{address}",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.location": str(pki.ca),
        }
    )
    return process, address


def serve(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """A fixture's body: start the broker, hand it over, then stop it and check it exited cleanly."""
    broker.start()
    yield broker
    if broker.proc is not None:
        code = broker.stop()
        assert code == 0, f"broker exited with {code}:\n{broker.output()}"


def add_users(broker: BrokerProcess, users: dict[str, str]) -> None:
    """SCRAM users (`loglake users add` over the broker's HTTP API, as long as it asks for no
    authentication: a test then restarts the broker with its security on)."""
    for user, password in users.items():
        argv = [sys.executable, "-m", "loglake.cli", "users", "add", "--user", user, "--password", password]
        added = subprocess.run([*argv, "--bootstrap-http", broker.http_url], capture_output=True, text=True)
        assert added.returncode == 0, added.stderr


def unique_name(base: str) -> str:
    return f"{re.sub(r'[^a-zA-Z0-9._-]', '-', base)[:80]}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    futures[name].result(timeout=30)
    wait_for_topic(bootstrap, name, partitions)


def wait_for_topic(bootstrap: str, name: str, partitions: int, timeout: float = 15.0) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            if all(p.leader >= 0 and p.error is None for p in md.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} not ready: {md}")
        time.sleep(0.1)


def kcat(
    bootstrap: str, *args: str, input: bytes | None = None, timeout: float = 30.0, check: bool = True
) -> subprocess.CompletedProcess:
    """Run kcat against the broker; stdout and stderr as bytes."""
    proc = subprocess.run([KCAT, "-b", bootstrap, *args], input=input, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kcat {' '.join(args)} exited with {proc.returncode}\nstdout:\n{proc.stdout.decode(errors='replace')}"
            f"\nstderr:\n{proc.stderr.decode(errors='replace')}"
        )
    return proc


def read_all(
    bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0, isolation: str = "read_committed"
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of a topic as (partition, offset, key, value), read with a confluent consumer
    assigned (no group) from the beginning of each partition to its end.

    It starts at offset 0 and resets to the earliest offset if that is gone (DeleteRecords):
    the same as OFFSET_BEGINNING, without librdkafka's half-second wait before that offset
    query; the short fetch.wait.max.ms makes the end-of-partition report come sooner."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "read-all-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "isolation.level": isolation,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_all({topic}): only partitions {sorted(at_end)} reached their end")
            msg = c.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            at_end.discard(msg.partition())
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return sorted(out)
    finally:
        c.close()


def produce_values(
    bootstrap: str, topic: str, values: list[bytes], partition: int | None = None, **config: object
) -> list[tuple[int, int]]:
    """Produce with confluent-kafka (acks=all); (partition, offset) of each record, in order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})
    results: list[tuple[int, int] | None] = [None] * len(values)
    errors = []

    def report(i: int):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                results[i] = (msg.partition(), msg.offset())

        return cb

    for i, v in enumerate(values):
        kwargs = {} if partition is None else {"partition": partition}
        p.produce(topic, value=v, on_delivery=report(i), **kwargs)
        p.poll(0)
    remaining = p.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, errors
    return results  # type: ignore[return-value]


Record = tuple[int, bytes, bytes | None]


def idempotent_producer(bootstrap: str):
    from confluent_kafka import Producer

    return Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 4000, "enable.idempotence": True}
    )


def produce_keyed(bootstrap: str, topic: str, rows: list[tuple[bytes, bytes | None]], producer=None) -> list[Record]:
    """Produce (key, value) rows to partition 0 in order, with `producer` or a new idempotent
    one; (offset, key, value) of each."""
    producer = producer or idempotent_producer(bootstrap)
    out: list[Record | None] = [None] * len(rows)
    errors = []

    def report(i: int):
        def cb(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                out[i] = (msg.offset(), msg.key(), msg.value())

        return cb

    for i, (key, value) in enumerate(rows):
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return out  # type: ignore[return-value]


# Raw protocol: hand-built frames over a plain socket -------------------------------------


def connect(bootstrap: str, timeout: float = 10.0):
    import socket

    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def recv_exact(sock, n: int) -> bytes:
    """n bytes, or fewer if the peer closed the connection first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def recv_frame(sock) -> bytes | None:
    """One response payload (without its size prefix); None if the connection was closed."""
    prefix = recv_exact(sock, 4)
    if len(prefix) < 4:
        return None
    size = int.from_bytes(prefix, "big", signed=True)
    payload = recv_exact(sock, size)
    if len(payload) < size:
        return None
    return payload


def raw_request(bootstrap: str, api_key: int, api_version: int, body: dict, correlation_id: int = 7) -> dict:
    """Send one request on a new connection and decode its response body."""
    from loglake.protocol import decode_response, encode_request

    with connect(bootstrap) as s:
        s.sendall(encode_request(api_key, api_version, correlation_id, "raw-test", body))
        payload = recv_frame(s)
    assert payload is not None, "the broker closed the connection instead of answering"
    cid, response = decode_response(api_key, api_version, payload)
    assert cid == correlation_id
    return response


def fetch_batches(bootstrap: str, topic: str, partition: int = 0, offset: int = 0, max_bytes: int = 1 << 24):
    """The record batches of one partition from `offset`, with a raw Fetch v12."""
    from loglake.protocol import ApiKey
    from loglake.record.batch import decode_batches

    body = {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}],
            }
        ],
    }
    response = raw_request(bootstrap, ApiKey.FETCH, 12, body)
    (t,) = response["responses"]
    (p,) = t["partitions"]
    assert p["error_code"] == 0, p
    return list(decode_batches(bytes(p["records"] or b"")))
