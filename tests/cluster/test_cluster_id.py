"""One cluster: one cluster id, kept in ZooKeeper (/cluster/id), adopted by every broker,
written to meta.properties (a log dir of another cluster refuses to start), and one Kafka
release presented by every broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from cluster_helpers import FAST
from protocol_helpers import call
from harness.local_cluster import LocalCluster
from harness.process import BrokerProcess
from loglake.protocol import ApiKey
from kafka_release import release_versions
from loglake.storage.meta_properties import META_PROPERTIES, MetaProperties

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def cluster_id_via(bootstrap: str) -> str:
    """The cluster id one broker's Metadata answer carries."""
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).cluster_id


@pytest.mark.timeout(180)
def test_every_broker_reports_the_id_in_zookeeper_and_keeps_it(cluster: LocalCluster, zk_connect: str) -> None:
    zk = KazooClient(zk_connect)
    zk.start()
    try:
        doc = json.loads(zk.get("/cluster/id")[0])
    finally:
        zk.stop()
        zk.close()
    assert doc["version"] == "1" and len(doc["id"]) == 22
    ids = {b: cluster_id_via(broker.bootstrap) for b, broker in cluster.brokers.items()}
    assert set(ids.values()) == {doc["id"]}, ids
    for broker in cluster.brokers.values():
        assert MetaProperties.read(broker.log_dir / META_PROPERTIES).cluster_id == doc["id"]
    restarted = cluster.a_broker_other_than(cluster.controller())
    cluster.kill(restarted)
    cluster.restart(restarted)
    assert cluster_id_via(cluster.brokers[restarted].bootstrap) == doc["id"]


@pytest.mark.timeout(120)
def test_a_cluster_broker_presents_one_release_too(cluster: LocalCluster) -> None:
    """With the controller-to-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata)."""
    answer = call(cluster.brokers[1].bootstrap, ApiKey.API_VERSIONS, 3, {})
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA} <= set(ranges)
    assert ranges == {k: release_versions(k) for k in ranges}


@pytest.mark.timeout(120)
def test_a_log_dir_of_another_cluster_refuses_to_start(tmp_path: Path, zk_connect: str) -> None:
    with LocalCluster(tmp_path / "a", 1, FAST, zookeeper_connect=zk_connect):
        pass
    stranger = tmp_path / "b" / "logs"
    stranger.mkdir(parents=True)
    MetaProperties(4, "AAAAAAAAAAAAAAAAAAAAAA").write(stranger / META_PROPERTIES)
    broker = BrokerProcess(stranger, overrides={**FAST, "zookeeper.connect": zk_connect}, broker_id=4)
    with pytest.raises(RuntimeError, match="exited with 1") as failure:
        broker.start(60)
    assert "trying to join the wrong cluster" in str(failure.value)
    assert MetaProperties.read(stranger / META_PROPERTIES).cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
