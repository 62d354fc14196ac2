"""SCRAM credentials kept in the broker: with ZooKeeper stopped (SIGSTOP), a known user
still authenticates (SASL/SCRAM), and a user the broker never heard of is refused with the
reason; once ZooKeeper is back, removing a user takes effect as soon as the notification
arrives."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from cluster_helpers import FAST
from harness.local_cluster import LocalCluster
from harness.zookeeper_process import ZooKeeperProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]


def _users(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "loglake.cli", "users", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _metadata(port: int, user: str, password: str, timeout: float = 60) -> None:
    """A Metadata request over a fresh SASL/SCRAM connection (raises if authentication fails)."""
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }
    )
    admin.list_topics(timeout=timeout)


def test_known_users_authenticate_while_zookeeper_is_down(
    tmp_path, zk_connect: str, zookeeper: ZooKeeperProcess
) -> None:
    _users("add", "--user", "alice", "--password", "alice-secret", "--zookeeper-connect", zk_connect)
    # Sessions that outlive the pause: the test is about the credentials.
    overrides = {**FAST, "zookeeper.session.timeout.ms": "60000"}
    with LocalCluster(tmp_path, 1, overrides, zookeeper_connect=zk_connect, extra_listeners=("SASL_PLAINTEXT",)) as c:
        port = c.listener_ports[(1, "SASL_PLAINTEXT")]
        _metadata(port, "alice", "alice-secret")
        zookeeper.pause()
        try:
            started = time.monotonic()
            _metadata(port, "alice", "alice-secret")
            assert time.monotonic() - started < 10, "no store round trip for a known user"
            with pytest.raises(KafkaException):
                _metadata(port, "bob", "bob-secret", timeout=40)
            # The reason, as the broker gives it (librdkafka reports only a transport failure).
            out = (tmp_path / "broker-1" / "broker-1.out").read_text()
            assert "SASL/SCRAM-SHA-512: the metadata store did not answer the credential check in time" in out
        finally:
            zookeeper.resume()
        _users("delete", "--user", "alice", "--bootstrap-http", c.http_url(1))
        started = time.monotonic()
        while True:
            attempt = time.monotonic()
            try:
                _metadata(port, "alice", "alice-secret", timeout=5)
            except KafkaException:
                break
            assert time.monotonic() - started < 30, "the removal never took effect"
        print(f"refused from the attempt {attempt - started:.2f} s after the removal returned")
