"""TLS and SASL on the Kafka protocol, with unmodified clients: one broker with a
PLAINTEXT, an SSL (client certificates required), a SASL_SSL and a SASL_PLAINTEXT
listener; users with SCRAM credentials added by `loglake users`."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from client_helpers import make_broker, serve, unique_name
from ingest_gateway.network.kafka_client import KafkaClient
from harness.process import BrokerProcess, free_port
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from bench.pki import Pki, make_pki

USERS = {"alice": ("alice-secret", "SCRAM-SHA-512"), "bob": ("bob-secret", "SCRAM-SHA-256")}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    return {name: free_port() for name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT")}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki, ports: dict[str, int]) -> Iterator[BrokerProcess]:
    process = make_broker(tmp_path_factory.mktemp("secure") / "logs")
    plain = process.overrides["listeners"]
    process.overrides.update(
        {
            "listeners": plain + "".join(f",{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "listener.name.ssl.ssl.client.auth": "required",
        }
    )
    for broker in serve(process):
        for user, (password, mechanism) in USERS.items():
            added = loglake(broker, "users", "add", "--user", user, "--password", password, "--mechanism", mechanism)
            assert added.returncode == 0, added.stderr
        yield broker


def loglake(broker: BrokerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "loglake.cli", *args, "--bootstrap-http", broker.http_url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, input=stdin)


def sasl_ssl(pki: Pki, port: int, user: str, password: str, mechanism: str) -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca),
    }


def round_trip(config: dict[str, str], topic: str, count: int = 100) -> list[bytes]:
    """Produce `count` records and consume them back with a confluent-kafka client."""
    producer = Producer({**config, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, b"%04d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    return values


EXPECTED = [b"%04d" % i for i in range(100)]


def test_confluent_kafka_over_sasl_ssl_with_scram_sha_512(broker, pki: Pki, ports, topic: str) -> None:
    config = sasl_ssl(pki, ports["SASL_SSL"], "alice", "alice-secret", "SCRAM-SHA-512")
    assert round_trip(config, topic) == EXPECTED


def test_confluent_kafka_over_ssl_with_a_client_certificate(broker, pki: Pki, ports, topic: str) -> None:
    config = {
        "bootstrap.servers": f"127.0.0.1:{ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    assert round_trip(config, topic) == EXPECTED


def test_kafka_python_over_sasl_ssl_with_scram(broker, pki: Pki, ports, topic: str) -> None:
    common = {
        "bootstrap_servers": f"127.0.0.1:{ports['SASL_SSL']}",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "bob-secret",
        "ssl_cafile": str(pki.ca),
    }
    producer = KafkaProducer(**common)
    for value in EXPECTED:
        producer.send(topic, value)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", **common)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < len(EXPECTED) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values += [r.value for r in records]
    consumer.close()
    assert values == EXPECTED


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], capture_output=True, text=True, timeout=60, input=stdin)


def test_kcat_over_sasl_ssl_with_plain_and_over_ssl(broker, pki: Pki, ports, topic: str) -> None:
    sasl = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice",
            "-X", "sasl.password=alice-secret", "-X", f"ssl.ca.location={pki.ca}"]  # fmt: skip
    produced = kcat("-b", f"127.0.0.1:{ports['SASL_SSL']}", *sasl, "-P", "-t", topic, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}",
           "-X", f"ssl.certificate.location={pki.client_cert}", "-X", f"ssl.key.location={pki.client_key}"]  # fmt: skip
    consumed = kcat("-b", f"127.0.0.1:{ports['SSL']}", *tls, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]


def failing_client_error(config: dict[str, str]) -> str:
    """What librdkafka reports connecting with these settings (it must fail)."""
    errors: list[str] = []
    producer = Producer({**config, "error_cb": lambda err: errors.append(str(err)), "message.timeout.ms": 5000})
    producer.produce("nowhere", b"x")
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    assert errors, "the connection was accepted"
    return " ".join(errors)


def test_bad_credentials_and_untrusted_certificates_are_refused(broker, pki: Pki, ports, topic: str) -> None:
    wrong_password = sasl_ssl(pki, ports["SASL_SSL"], "alice", "not-her-secret", "SCRAM-SHA-512")
    assert "Authentication failed" in failing_client_error(wrong_password)
    unknown_user = sasl_ssl(pki, ports["SASL_SSL"], "eve", "whatever", "SCRAM-SHA-512")
    assert "Authentication failed" in failing_client_error(unknown_user)
    plain_wrong = sasl_ssl(pki, ports["SASL_SSL"], "alice", "nope", "PLAIN")
    assert "Authentication failed" in failing_client_error(plain_wrong)
    # bob has only a SCRAM-SHA-256 credential
    wrong_mechanism = sasl_ssl(pki, ports["SASL_SSL"], "bob", "bob-secret", "SCRAM-SHA-512")
    assert "Authentication failed" in failing_client_error(wrong_mechanism)
    untrusted = {
        "bootstrap.servers": f"127.0.0.1:{ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.stranger_cert),
        "ssl.key.location": str(pki.stranger_key),
    }
    failing_client_error(untrusted)
    no_certificate = {k: v for k, v in untrusted.items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    failing_client_error(no_certificate)
    # Everyone else is still served, and no password reached the broker's log.
    config = sasl_ssl(pki, ports["SASL_SSL"], "alice", "alice-secret", "SCRAM-SHA-512")
    assert round_trip(config, topic, 10) == EXPECTED[:10]
    log = broker.output() + broker.log_file.read_text(errors="replace")
    assert "not-her-secret" not in log and "alice-secret" not in log and "bob-secret" not in log


async def _request(client: KafkaClient, key: ApiKey, version: int, body: dict) -> dict:
    return await client.request(key, version, body, timeout_ms=10000)


def test_the_sasl_exchange_refuses_bad_input_and_the_broker_keeps_serving(broker, pki: Pki, ports, topic) -> None:
    import asyncio

    async def main() -> None:
        port = ports["SASL_PLAINTEXT"]
        # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones.
        client = KafkaClient("127.0.0.1", port)
        answer = await _request(client, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        client.close_nowait()
        # A request before authentication: the connection is closed.
        client = KafkaClient("127.0.0.1", port)
        with pytest.raises((ConnectionError, OSError)):
            await _request(client, ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                          "include_topic_authorized_operations": False})  # fmt: skip
        client.close_nowait()
        # Garbage in the SCRAM exchange: SASL_AUTHENTICATION_FAILED, then closed.
        for garbage in (b"\xff\xfe", b"n,,n=alice", b"y,,n=alice,r=abc", b"n,,n=alice,r=abc"):
            client = KafkaClient("127.0.0.1", port)
            answer = await _request(client, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
            assert answer["error_code"] == 0
            answer = await _request(client, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": garbage})
            if garbage == b"n,,n=alice,r=abc":  # a well-formed first message: the exchange goes on
                assert answer["error_code"] == 0 and answer["auth_bytes"].startswith(b"r=abc")
                answer = await _request(client, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"c=biws,r=x,p=AAAA"})
            assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED, answer
            client.close_nowait()
        # SASL on a listener without it: ILLEGAL_SASL_STATE.
        client = KafkaClient("127.0.0.1", broker.kafka_port)
        answer = await _request(client, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        client.close_nowait()

    asyncio.run(main())
    config = sasl_ssl(pki, ports["SASL_SSL"], "bob", "bob-secret", "SCRAM-SHA-256")
    assert round_trip(config, topic, 10) == EXPECTED[:10]


def test_users_are_listed_without_secrets_and_can_be_removed(broker, pki: Pki, ports) -> None:
    added = loglake(broker, "users", "add", "--user", "carol", "--password", "-", stdin="carol-secret\n")
    assert added.returncode == 0, added.stderr
    listed = loglake(broker, "users", "list")
    assert "user-principal 'carol' are SCRAM-SHA-512=iterations=4096" in listed.stdout
    assert "salt" not in listed.stdout and "stored_key" not in listed.stdout
    carol = sasl_ssl(pki, ports["SASL_SSL"], "carol", "carol-secret", "SCRAM-SHA-512")
    assert round_trip(carol, unique_name("carol"), 5) == EXPECTED[:5]
    assert loglake(broker, "users", "delete", "--user", "carol").returncode == 0
    assert "Authentication failed" in failing_client_error(carol)
    gone = loglake(broker, "users", "delete", "--user", "carol")
    assert gone.returncode == 1 and "no SCRAM credential" in gone.stderr


def test_random_bytes_on_the_sasl_and_tls_listeners_are_refused_and_the_broker_keeps_serving(
    broker, pki: Pki, ports, topic: str
) -> None:
    import random
    import socket
    import struct

    rng = random.Random(1234)
    for port in (ports["SASL_PLAINTEXT"], ports["SSL"], ports["SASL_SSL"]):
        for _ in range(20):
            size = rng.randrange(1, 200)
            junk = rng.randbytes(size)
            if rng.random() < 0.5:  # a well-formed frame of junk: past the framing, into the parsers
                junk = struct.pack(">i", len(junk)) + junk
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(junk)
                sock.shutdown(socket.SHUT_WR)
                try:
                    while sock.recv(4096):  # whatever comes back, the connection must end
                        pass
                except (ConnectionResetError, TimeoutError) as exc:
                    assert not isinstance(exc, TimeoutError), f"the broker hung on {junk!r}"
    config = sasl_ssl(pki, ports["SASL_SSL"], "alice", "alice-secret", "SCRAM-SHA-512")
    assert round_trip(config, topic, 10) == EXPECTED[:10]
