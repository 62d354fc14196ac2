"""Dynamic broker configs changed at the same time through different brokers, over HTTP
PATCH and IncrementalAlterConfigs, on different keys of one entity: each change is a
compare-and-set on the stored document, so none is lost (a read, merge and write would let
the later writer drop the other's key)."""

from __future__ import annotations

import json
import threading

import pytest
import httpx
from kazoo.client import KazooClient

from harness.local_cluster import LocalCluster
from loglake.protocol import ApiKey
from protocol_helpers import call

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

# Dynamic broker configs whose values here change nothing the test relies on.
KEYS = (
    "log.retention.ms",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.index.interval.bytes",
    "log.flush.interval.ms",
    "log.segment.delete.delay.ms",
)
ROUNDS = 12


def _value(key_index: int, round_: int) -> str:
    return str(10_000_000 + 1000 * round_ + key_index)


def _stored(zk: KazooClient, entity: str) -> dict[str, str]:
    data, _ = zk.get(f"/config/brokers/{entity}")
    return json.loads(data)["config"]


@pytest.mark.parametrize("entity", ["<default>", "2"])
def test_concurrent_changes_of_other_keys_through_other_brokers_are_all_kept(
    cluster: LocalCluster, entity: str
) -> None:
    resource_name = "" if entity == "<default>" else entity
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start()
    try:
        for round_ in range(ROUNDS):
            start = threading.Barrier(len(KEYS))
            errors: list[BaseException] = []

            def change(i: int, key: str, round_: int = round_, start: threading.Barrier = start) -> None:
                via = 1 + i % 3
                value = _value(i, round_)
                try:
                    start.wait(30)
                    if i % 2 == 0:
                        response = httpx.patch(
                            f"{cluster.http_url(via)}/brokers/{entity}/configs", json={"configs": {key: value}}, timeout=60
                        )
                        assert response.status_code == 200, response.text
                    else:
                        # IncrementalAlterConfigs, SET (confluent-kafka's admin cannot name the
                        # cluster-wide default, resource name "").
                        resource = {
                            "resource_type": 4,
                            "resource_name": resource_name,
                            "configs": [{"name": key, "config_operation": 0, "value": value}],
                        }
                        body = {"resources": [resource], "validate_only": False}
                        # A broker's own configs are altered through it (Kafka's rule); the HTTP
                        # route takes any broker's.
                        to = via if entity == "<default>" else int(entity)
                        answer = call(cluster.brokers[to].bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)
                        assert answer["responses"][0]["error_code"] == 0, answer
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)

            threads = [threading.Thread(target=change, args=(i, key)) for i, key in enumerate(KEYS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert not errors, errors
            stored = _stored(zk, entity)
            lost = {k: stored.get(k) for i, k in enumerate(KEYS) if stored.get(k) != _value(i, round_)}
            assert not lost, f"round {round_}: changes lost: {lost}"
    finally:
        zk.stop()
        zk.close()
