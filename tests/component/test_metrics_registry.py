"""/metrics of in-process brokers: one registry per broker, the switches, flush times."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from ingest_gateway.server.broker import Broker
from loglake.config import BrokerConfig

JSON_V2 = "application/vnd.kafka.json.v2+json"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator:
    brokers: list[Broker] = []
    clients: list[TestClient] = []

    def make(name: str, **props: str) -> tuple[Broker, TestClient]:
        config = BrokerConfig.from_properties({"log.dirs": str(tmp_path / name), "num.partitions": "1", **props})
        broker = Broker(config)
        broker.startup()
        brokers.append(broker)
        client = TestClient(broker.create_http_app())
        clients.append(client)
        return broker, client

    yield make
    for client in clients:
        client.close()
    for broker in brokers:
        broker.shutdown()


def samples(client: TestClient) -> dict[tuple[str, frozenset], float]:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def produce(client: TestClient, topic: str, n: int) -> None:
    client.post("/topics", json={"name": topic, "partitions": 1})
    r = client.post(
        f"/topics/{topic}",
        json={"records": [{"value": i} for i in range(n)]},
        headers={"content-type": JSON_V2},
    )
    assert r.status_code == 200, r.text


def test_each_broker_has_its_own_registry(make_client) -> None:
    first, a = make_client("a")
    _, b = make_client("b")
    produce(a, "only-a", 7)
    label = frozenset({("topic", "only-a")})
    assert samples(a)[("kafka_server_broker_topic_messages_in_total", label)] == 7
    assert ("kafka_server_broker_topic_messages_in_total", label) not in samples(b)
    # The HTTP produce path goes through the same append as the Kafka one, and is counted.
    size = first.replica_manager.partitions[("only-a", 0)].log.size
    assert samples(a)[("kafka_server_broker_topic_bytes_in_total", label)] == size
    # So is the HTTP fetch, as bytes out: the batches read for it.
    assert a.get("/topics/only-a/partitions/0/records", params={"offset": 0}).status_code == 200
    assert samples(a)[("kafka_server_broker_topic_bytes_out_total", label)] == size


def test_flush_times_are_observed(make_client) -> None:
    broker, client = make_client("flush")
    produce(client, "flushed", 3)
    before = samples(client)[("kafka_log_flush_time_seconds_count", frozenset())]
    broker.replica_manager.partitions[("flushed", 0)].log.flush()
    assert samples(client)[("kafka_log_flush_time_seconds_count", frozenset())] == before + 1
    # A flush with nothing new to sync is no flush (as Kafka times only real ones).
    broker.replica_manager.partitions[("flushed", 0)].log.flush()
    assert samples(client)[("kafka_log_flush_time_seconds_count", frozenset())] == before + 1


def test_per_partition_series_can_be_turned_off(make_client) -> None:
    _, client = make_client("quiet", **{"metrics.per.partition.enabled": "false"})
    produce(client, "many", 3)
    names = {name for name, _ in samples(client)}
    assert not names & {"kafka_log_size_bytes", "kafka_log_start_offset", "kafka_log_end_offset"}
    assert "kafka_server_replica_manager_partition_count" in names
    assert "kafka_server_broker_topic_messages_in_total" in names


def test_metrics_disabled_records_nothing_and_answers_404(make_client) -> None:
    broker, client = make_client("off", **{"metrics.enabled": "false"})
    produce(client, "still-works", 3)
    assert broker.metrics is None and broker.replica_manager.metrics is None
    r = client.get("/metrics")
    assert r.status_code == 404
    assert "metrics.enabled=false" in r.json()["message"]


def test_the_grafana_dashboard_uses_only_exported_names(make_client) -> None:
    """conf/grafana/loglake-dashboard.json (and the console) read these names: each must be
    one the broker exports."""
    _, client = make_client("dashboard")
    produce(client, "dashboard", 1)
    exported = {family.name for family in text_string_to_metric_families(client.get("/metrics").text)}
    dashboard = json.loads((ROOT / "conf/grafana/loglake-dashboard.json").read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    used = {n for e in expressions for n in re.findall(r"kafka_\w+", e)}
    assert len(used) > 20
    # A sample name is its family's, or the family's plus a counter's or histogram's suffix.
    unknown = {n for n in used if n not in exported and re.sub(r"_(total|bucket|sum|count)$", "", n) not in exported}
    assert not unknown
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
