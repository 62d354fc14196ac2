"""/metrics of a 3-broker cluster: a SIGSTOP'ed follower seen as under-replicated and as an ISR
shrink then expansion on its leader, the controller's metrics only on the controller, an
election counted there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_helpers import FAST, partition_of
from harness.local_cluster import LocalCluster
from metrics_helpers import Scrape, scrape

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

UNDER_REPLICATED = "kafka_server_replica_manager_under_replicated_partitions"


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[LocalCluster]:
    # A paused broker must leave the ISR through its leader's lag check
    # (replica.lag.time.max.ms, 2 s), never through its ZooKeeper session expiring (which
    # the controller would handle instead): sessions outlast the pause by far.
    with LocalCluster(tmp_path, 3, FAST | {"zookeeper.session.timeout.ms": "30000"}, zookeeper_connect=zk_connect) as c:
        yield c


def wait_for_scrape(url: str, predicate: Callable[[Scrape], bool], timeout: float = 30) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        s = scrape(url)
        if predicate(s):
            return s
        assert time.monotonic() < deadline, f"/metrics of {url} never matched; last: {s.samples}"
        time.sleep(0.2)


@pytest.mark.timeout(240)
def test_paused_follower_controller_and_election(cluster: LocalCluster) -> None:
    status = cluster.status()
    controller = status["controller"]["broker_id"]
    leader, follower = [b for b in sorted(cluster.brokers) if b != controller]
    # Leader and paused follower are not the controller, whose metrics are checked meanwhile.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(
        "watched", 1, replica_assignment=[[leader, follower, controller]], config={"min.insync.replicas": "2"}
    )
    admin.create_topics([topic])["watched"].result(30)
    cluster.wait_for(lambda s: len(partition_of(s, "watched")["isr"]) == 3)

    epoch = status["controller"]["epoch"]
    for broker_id in cluster.brokers:
        # The store has the topic before each broker has applied its LeaderAndIsr.
        s = wait_for_scrape(
            cluster.http_url(broker_id), lambda s: s.value("kafka_server_replica_manager_partition_count") == 1
        )
        is_controller = broker_id == controller
        assert s.value("kafka_controller_active_controller_count") == int(is_controller)
        assert (s.get("kafka_controller_epoch") == epoch) if is_controller else s.get("kafka_controller_epoch") is None
        offline = s.get("kafka_server_replica_manager_offline_partitions")
        assert offline == 0 if is_controller else offline is None
        assert s.value("kafka_server_replica_manager_leader_count") == int(broker_id == leader)
        assert s.value(UNDER_REPLICATED) == 0

    cluster.pause(follower)
    try:
        # A follower is out of sync once it lags the leader's log end (Kafka's rule): a
        # record it cannot fetch makes it lag.
        r = httpx.post(
            f"{cluster.http_url(leader)}/topics/watched",
            params={"acks": "1"},
            json={"records": [{"value": 1}]},
            headers={"content-type": "application/vnd.kafka.json.v2+json"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        s = wait_for_scrape(cluster.http_url(leader), lambda s: s.value(UNDER_REPLICATED) == 1)
        assert s.value("kafka_server_replica_manager_isr_shrinks_total") == 1
        assert s.value("kafka_server_replica_manager_under_min_isr_partitions") == 0  # 2 in sync, min 2
        # Only the leader reports a partition as under-replicated.
        assert scrape(cluster.http_url(controller)).value(UNDER_REPLICATED) == 0
    finally:
        cluster.resume(follower)
    s = wait_for_scrape(cluster.http_url(leader), lambda s: s.value(UNDER_REPLICATED) == 0)
    assert s.value("kafka_server_replica_manager_isr_expands_total") == 1
    assert s.value("kafka_server_replica_manager_isr_shrinks_total") == 1

    before = scrape(cluster.http_url(controller))
    assert before.value("kafka_controller_leader_elections_total") == 0
    cluster.brokers[leader].stop()  # a clean stop closes its session: the controller elects at once
    s = wait_for_scrape(cluster.http_url(controller), lambda s: s.value("kafka_controller_leader_elections_total") == 1)
    assert s.value("kafka_controller_unclean_leader_elections_total") == 0
    for broker_id in (follower,):
        assert scrape(cluster.http_url(broker_id)).value("kafka_controller_leader_elections_total") == 0
