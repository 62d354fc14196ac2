"""A cluster whose brokers talk to each other over SASL_SSL (SCRAM-SHA-512): replica
fetchers, the controller channel and transaction markers authenticate; the cluster
replicates, loses its leader to kill -9, and nothing acknowledged is lost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from kazoo.client import KazooClient

from bench.pki import make_pki
from cluster_helpers import FAST, create_topic, read_all
from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def add_user(zk_connect: str, user: str, password: str) -> None:
    argv = [sys.executable, "-m", "loglake.cli", "users", "add", "--user", user, "--password", password]
    added = subprocess.run([*argv, "--zookeeper-connect", zk_connect], capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr


def test_brokers_replicate_and_fail_over_on_a_sasl_ssl_inter_broker_listener(tmp_path, zk_connect: str) -> None:
    pki = make_pki(tmp_path / "pki")
    add_user(zk_connect, "broker", "broker-secret")  # before the brokers start, as Kafka's bootstrap
    add_user(zk_connect, "alice", "alice-secret")
    overrides = {
        **FAST,
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
            'password="broker-secret";'
        ),
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
    }
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect, extra_listeners=("SASL_SSL",)) as cluster:
        # Registered (Kafka's JSON) with both endpoints; host and port are the inter-broker one.
        zk = KazooClient(hosts=zk_connect)
        zk.start(timeout=15)
        try:
            registration = json.loads(zk.get("/brokers/ids/1")[0])
        finally:
            zk.stop()
            zk.close()
        secure_port = cluster.listener_ports[(1, "SASL_SSL")]
        assert registration["port"] == secure_port
        assert f"SASL_SSL://127.0.0.1:{secure_port}" in registration["endpoints"]
        assert registration["listener_security_protocol_map"]["SASL_SSL"] == "SASL_SSL"

        create_topic(cluster, "guarded", 3, 3, {"min.insync.replicas": "2"})  # the ISR fills: fetchers authenticated
        secure = {
            "bootstrap.servers": f"127.0.0.1:{cluster.listener_ports[(2, 'SASL_SSL')]}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "ssl.ca.location": str(pki.ca),
            "enable.idempotence": True,
        }
        producer = Producer(secure)
        for i in range(1000):
            producer.produce("guarded", b"%04d" % i, partition=i % 3)
        assert producer.flush(30) == 0

        leader = cluster.partition("guarded", 0)["leader"]
        cluster.kill(leader)
        cluster.wait_for(
            lambda s: all(p["leader"] not in (leader, -1) for p in s["partitions"] if p["topic"] == "guarded"),
            exclude=(leader,),
        )
        for i in range(1000, 2000):
            producer.produce("guarded", b"%04d" % i, partition=i % 3)
        assert producer.flush(60) == 0
        cluster.restart(leader)
        cluster.wait_for(lambda s: all(len(p["isr"]) == 3 for p in s["partitions"] if p["topic"] == "guarded"))
        stored = sorted(
            v for values in read_all(cluster.brokers[leader].bootstrap, "guarded", 3, 2000).values() for v in values
        )
        assert stored == [b"%04d" % i for i in range(2000)]
