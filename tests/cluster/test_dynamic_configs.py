"""Dynamic broker configs across a 3-broker cluster: a change made through one broker is
stored in ZooKeeper as Kafka stores it (/config/brokers, /config/changes) and picked up by the
others through their watch, taking effect on the topics they lead."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin import NewTopic, ResourceType
from kazoo.client import KazooClient

from protocol_helpers import call
from harness.local_cluster import LocalCluster
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BROKER = 4


def eventually(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Retry `check` until it returns a truthy value (a watch fires asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, "condition not met before the deadline"
            return value
        time.sleep(0.2)


def described(bootstrap: str, resource_name: str) -> dict[str, tuple[str | None, int]]:
    body = {"resources": [{"resource_type": BROKER, "resource_name": resource_name, "configuration_keys": None}]}
    (result,) = call(bootstrap, ApiKey.DESCRIBE_CONFIGS, 4, body)["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def produce_error(bootstrap: str, topic: str, size: int) -> int | None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000})
    result: list[CKafkaError | None] = []
    producer.produce(topic, b"x" * size, partition=0, on_delivery=lambda err, msg: result.append(err))
    producer.flush(30)
    assert result, "no delivery report"
    return None if result[0] is None else result[0].code()


@pytest.mark.timeout(180)
def test_dynamic_default_set_through_one_broker_reaches_the_others(cluster: LocalCluster, zk_connect: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic("led-by-second", 1, 1, config={"min.insync.replicas": "1"})], operation_timeout=20
    )
    futures["led-by-second"].result(timeout=30)
    status = cluster.wait_for(
        lambda s: any(p["topic"] == "led-by-second" and p["leader"] >= 0 for p in s["partitions"])
    )
    # `second` leads the topic; the change goes through `first`.
    second = next(p["leader"] for p in status["partitions"] if p["topic"] == "led-by-second")
    first, third = sorted(b for b in cluster.brokers if b != second)
    eventually(lambda: produce_error(cluster.bootstrap, "led-by-second", 5000) is None)

    body = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": "",
                "configs": [{"name": "message.max.bytes", "config_operation": 0, "value": "2000"}],
            }
        ],
        "validate_only": False,
    }
    (response,) = call(cluster.brokers[first].bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    assert response["error_code"] == 0, response

    # Stored as Kafka stores it, with the change notification Kafka's brokers watch.
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        doc = json.loads(zk.get("/config/brokers/<default>")[0])
        assert doc == {"version": 1, "config": {"message.max.bytes": "2000"}}
        changes = zk.get_children("/config/changes")
        assert changes and all(c.startswith("config_change_") and len(c) == len("config_change_") + 10 for c in changes)
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes]
        assert {"version": 2, "entity_path": "brokers/<default>"} in notes
    finally:
        zk.stop()
        zk.close()

    # The other brokers picked it up through the watch: described, and in force.
    for broker_id in (second, third):
        bootstrap = cluster.brokers[broker_id].bootstrap
        eventually(lambda: described(bootstrap, str(broker_id)).get("message.max.bytes") == ("2000", 3))
        assert described(bootstrap, "") == {"message.max.bytes": ("2000", 3)}
    assert produce_error(cluster.bootstrap, "led-by-second", 5000) == CKafkaError.MSG_SIZE_TOO_LARGE

    # A per-broker config goes to that broker only; it wins over the default there.
    (future,) = admin.incremental_alter_configs(
        [
            ConfigResource(
                ResourceType.BROKER,
                str(second),
                incremental_configs=[
                    ConfigEntry("message.max.bytes", "100000", incremental_operation=AlterConfigOpType.SET)
                ],
            )
        ]
    ).values()
    future.result(timeout=30)
    assert described(cluster.brokers[second].bootstrap, str(second))["message.max.bytes"] == ("100000", 2)
    assert described(cluster.brokers[third].bootstrap, str(third))["message.max.bytes"] == ("2000", 3)
    assert produce_error(cluster.bootstrap, "led-by-second", 5000) is None

    # A topic config changed incrementally through a broker that is not the controller.
    controller = cluster.status()["controller"]["broker_id"]
    via = next(b for b in cluster.brokers if b != controller)
    via_admin = AdminClient({"bootstrap.servers": cluster.brokers[via].bootstrap})
    (future,) = via_admin.incremental_alter_configs(
        [
            ConfigResource(
                ResourceType.TOPIC,
                "led-by-second",
                incremental_configs=[
                    ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET),
                    ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
                ],
            )
        ]
    ).values()
    future.result(timeout=30)

    def topic_configs() -> dict[str, ConfigEntry]:
        (f,) = via_admin.describe_configs([ConfigResource(ResourceType.TOPIC, "led-by-second")]).values()
        return f.result(timeout=30)

    configs = eventually(lambda: (c := topic_configs())["retention.ms"].value == "12345" and c)
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"


def test_zookeeper_store_broker_configs_reach_another_store_by_notification(make_store) -> None:
    writer, reader = make_store(), make_store()
    seen: list[dict] = []
    arrived = threading.Event()

    def on_change(configs: dict) -> None:
        seen.append(configs)
        if configs:
            arrived.set()

    reader.watch_broker_configs(on_change)
    assert seen == [{}]
    writer.set_broker_config("<default>", {"log.retention.ms": "1000"})
    assert arrived.wait(10), "the watch did not fire"
    assert seen[-1] == {"<default>": {"log.retention.ms": "1000"}}
    writer.set_broker_config("3", {})
    assert reader.broker_configs() == {"<default>": {"log.retention.ms": "1000"}, "3": {}}


def alter_broker(bootstrap: str, resource_name: str, name: str, value: str) -> dict[str, Any]:
    """IncrementalAlterConfigs SET of one broker config; the resource's response."""
    body = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": resource_name,
                "configs": [{"name": name, "config_operation": 0, "value": value}],
            }
        ],
        "validate_only": False,
    }
    (response,) = call(bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    return response


def metadata_hosts(bootstrap: str) -> dict[int, tuple[str, int]]:
    brokers = call(bootstrap, ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    return {b["node_id"]: (b["host"], b["port"]) for b in brokers}


@pytest.mark.timeout(180)
def test_advertised_listeners_is_a_per_broker_dynamic_config(cluster: LocalCluster) -> None:
    """As Kafka 3.9 (ZooKeeper mode): broker 2's advertised.listeners altered at run time
    (its PLAINTEXT listener advertised as localhost instead of 127.0.0.1) reaches every
    broker's Metadata, and a client reaches broker 2 there; not at the cluster default, not
    naming a listener that does not exist, and DescribeConfigs shows it not read-only."""
    port = int(cluster.brokers[2].bootstrap.rsplit(":", 1)[1])
    assert metadata_hosts(cluster.brokers[1].bootstrap)[2] == ("127.0.0.1", port)
    bootstrap2 = cluster.brokers[2].bootstrap

    at_default = alter_broker(bootstrap2, "", "advertised.listeners", f"PLAINTEXT://localhost:{port}")
    assert at_default["error_code"] == 42, at_default  # INVALID_REQUEST
    assert "broker id must be specified" in at_default["error_message"]
    stranger = alter_broker(bootstrap2, "2", "advertised.listeners", f"EXTERNAL://localhost:{port}")
    assert stranger["error_code"] == 42 and "not in listeners" in stranger["error_message"], stranger
    assert metadata_hosts(cluster.brokers[1].bootstrap)[2] == ("127.0.0.1", port)

    altered = alter_broker(bootstrap2, "2", "advertised.listeners", f"PLAINTEXT://localhost:{port}")
    assert altered["error_code"] == 0, altered
    body = {"resources": [{"resource_type": BROKER, "resource_name": "2", "configuration_keys": None}]}
    (result,) = call(bootstrap2, ApiKey.DESCRIBE_CONFIGS, 4, body)["results"]
    (entry,) = [c for c in result["configs"] if c["name"] == "advertised.listeners"]
    assert (entry["value"], entry["read_only"]) == (f"PLAINTEXT://localhost:{port}", False)
    for b in (1, 2, 3):
        eventually(lambda b=b: metadata_hosts(cluster.brokers[b].bootstrap)[2] == ("localhost", port))

    # A client told only broker 1 reaches broker 2 at its new address (it leads the partition).
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    for future in admin.create_topics(
        [NewTopic("on-two", 1, replica_assignment=[[2]], config={"min.insync.replicas": "1"})]
    ).values():
        future.result(30)
    assert produce_error(cluster.brokers[1].bootstrap, "on-two", 10) is None
