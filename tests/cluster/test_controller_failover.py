"""The controller over a real ZooKeeper with broker processes: election, failover after a
SIGSTOP (the seeds' split-brain story) and fencing of the deposed controller, leader
election on broker loss, offline partitions without unclean election."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest

from cluster_helpers import FAST, partition_of, serving_get, wait_hosted
from protocol_helpers import call
from harness.local_cluster import LocalCluster
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def create_topic(
    cluster: LocalCluster, via: int, name: str, partitions: int, rf: int, configs: dict | None = None
) -> None:
    r = httpx.post(
        f"{cluster.http_url(via)}/topics",
        json={"name": name, "partitions": partitions, "replication_factor": rf, "configs": configs or {}},
        timeout=30,
    )
    r.raise_for_status()
    cluster.wait_for(lambda s: sum(p["topic"] == name for p in s["partitions"]) == partitions)
    wait_hosted(cluster, name)  # /cluster lists the topic before its replicas exist


@pytest.mark.timeout(180)
def test_paused_controller_is_replaced_and_its_stale_commands_change_nothing(cluster: LocalCluster) -> None:
    create_topic(cluster, 1, "fenced", 3, 3)
    before = cluster.status()
    old, old_epoch = before["controller"]["broker_id"], before["controller"]["epoch"]

    cluster.pause(old)  # past the ZooKeeper session timeout: its /controller znode expires
    others = tuple(b for b in cluster.brokers if b != old)
    after = cluster.wait_for(
        lambda s: s["controller"]["broker_id"] not in (None, old) and s["controller"]["epoch"] > old_epoch,
        timeout=60,
        exclude=(old,),
    )
    new_epoch = after["controller"]["epoch"]
    # The new controller moved leadership away from the paused broker.
    cluster.wait_for(
        lambda s: all(p["leader"] != old for p in s["partitions"] if p["topic"] == "fenced"), timeout=60, exclude=(old,)
    )
    cluster.resume(old)
    # The old controller learns it lost its session, re-registers and follows the new one.
    cluster.wait_for(
        lambda s: len(s["brokers"]) == 3 and s["controller"]["epoch"] == new_epoch, timeout=60, exclude=(old,)
    )
    via_old = cluster.wait_for(lambda s: s["controller"]["broker_id"] != old, timeout=30, exclude=others)
    assert via_old["controller"]["epoch"] == new_epoch

    # A command stamped with the old epoch, as the deposed controller would send: refused.
    # First let the resumed broker catch up and rejoin every ISR (its leaders let it back
    # in), so that the snapshot below stays put unless a stale command changes it.
    settled = cluster.wait_for(
        lambda s: all(len(p["isr"]) == 3 for p in s["partitions"] if p["topic"] == "fenced"), timeout=60
    )
    target = others[0]
    partition_states = settled["partitions"]
    stale = call(
        cluster.brokers[target].bootstrap,
        ApiKey.LEADER_AND_ISR,
        5,
        {
            "controller_id": old,
            "controller_epoch": old_epoch,
            "type": 0,
            "topic_states": [
                {
                    "topic_name": "fenced",
                    "topic_id": uuid.uuid4(),
                    "partition_states": [
                        {
                            "partition_index": 0,
                            "controller_epoch": old_epoch,
                            "leader": old,
                            "leader_epoch": 999,
                            "isr": [old],
                            "partition_epoch": 0,
                            "replicas": [1, 2, 3],
                        }
                    ],
                }
            ],
            "live_leaders": [],
        },
    )
    assert stale["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    stale_metadata = call(
        cluster.brokers[target].bootstrap,
        ApiKey.UPDATE_METADATA,
        7,
        {"controller_id": old, "controller_epoch": old_epoch, "live_brokers": []},
    )
    assert stale_metadata["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    assert cluster.status()["partitions"] == partition_states, "the stale commands changed nothing"


@pytest.mark.timeout(180)
def test_broker_loss_moves_leaders_within_the_isr_and_offline_partitions_wait(cluster: LocalCluster) -> None:
    create_topic(cluster, 1, "two", 1, 2)
    p = cluster.partition("two", 0)
    leader, follower = p["replicas"]
    third = next(b for b in cluster.brokers if b not in p["replicas"])
    cluster.kill(follower)
    cluster.wait_for(lambda s: partition_of(s, "two")["isr"] == [leader], exclude=(follower,))
    cluster.kill(leader)
    state = cluster.wait_for(lambda s: partition_of(s, "two")["leader"] == -1, exclude=(leader, follower))
    assert partition_of(state, "two")["offline"] and partition_of(state, "two")["isr"] == [leader]
    assert state["offline_partitions"] >= 1

    # The follower was not in the ISR: without unclean election it must not lead.
    cluster.restart(follower)
    time.sleep(3)
    assert partition_of(cluster.status(via=third), "two")["leader"] == -1
    cluster.restart(leader)
    cluster.wait_for(lambda s: partition_of(s, "two")["leader"] == leader)


@pytest.mark.timeout(180)
def test_unclean_election_brings_a_stale_replica_back_and_loses_what_it_missed(cluster: LocalCluster) -> None:
    create_topic(cluster, 1, "unclean", 1, 2, {"unclean.leader.election.enable": "true", "min.insync.replicas": "1"})
    p = cluster.partition("unclean", 0)
    leader, follower = p["replicas"]
    cluster.kill(follower)
    cluster.wait_for(lambda s: partition_of(s, "unclean")["isr"] == [leader], exclude=(follower,))
    records = [{"value": {"n": i}} for i in range(10)]
    r = httpx.post(
        f"{cluster.http_url(leader)}/topics/unclean",
        json={"records": records},
        headers={"content-type": "application/vnd.kafka.json.v2+json"},
        params={"acks": "all"},
        timeout=30,
    )
    r.raise_for_status()
    assert [o["offset"] for o in r.json()["offsets"]] == list(range(10)), "acknowledged by the only ISR member"
    cluster.kill(leader)
    cluster.restart(follower)
    # The stale replica leads: the trade-off unclean.leader.election.enable makes.
    cluster.wait_for(lambda s: partition_of(s, "unclean")["leader"] == follower, exclude=(leader,))
    end = serving_get(f"{cluster.http_url(follower)}/topics/unclean/partitions/0/offsets")["end_offset"]
    assert end == 0, "the ten acknowledged records are gone"


@pytest.mark.timeout(180)
def test_admin_through_any_broker_and_preferred_leaders_come_back(tmp_path: Path, zk_connect: str) -> None:
    overrides = {**FAST, "auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "1"}
    with LocalCluster(tmp_path, 3, overrides, zookeeper_connect=zk_connect) as cluster:
        controller = cluster.status()["controller"]["broker_id"]
        other = next(b for b in cluster.brokers if b != controller)
        create_topic(cluster, other, "admin", 2, 3)
        # Adding partitions and changing configs on a broker that is not the controller.
        r = httpx.patch(
            f"{cluster.http_url(other)}/topics/admin",
            json={"partitions": 3, "configs": {"retention.ms": "60000"}},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        state = cluster.wait_for(
            lambda s: sum(p["topic"] == "admin" and p["leader"] >= 0 for p in s["partitions"]) == 3
        )
        # The added partition goes on from where partition 0 started (Kafka's addPartitions).
        first = partition_of(state, "admin", 0)["replicas"][0]
        assert partition_of(state, "admin", 2)["replicas"][0] == [1, 2, 3][([1, 2, 3].index(first) + 2) % 3]
        assert httpx.get(f"{cluster.http_url(controller)}/topics/admin", timeout=10).json()["configs"] == {
            "retention.ms": "60000"
        }

        # The preferred leader of partition 0 (its first replica) comes back after a restart.
        preferred = partition_of(cluster.status(), "admin", 0)["replicas"][0]
        cluster.kill(preferred)
        cluster.wait_for(lambda s: partition_of(s, "admin", 0)["leader"] not in (-1, preferred), exclude=(preferred,))
        cluster.restart(preferred)
        cluster.wait_for(
            lambda s: (
                partition_of(s, "admin", 0)["leader"] == preferred and len(partition_of(s, "admin", 0)["isr"]) == 3
            ),
            60,
        )

        # Deleting through a non-controller goes by /admin/delete_topics; every replica's log goes.
        controller = cluster.status()["controller"]["broker_id"]
        other = next(b for b in cluster.brokers if b != controller)
        assert httpx.delete(f"{cluster.http_url(other)}/topics/admin", timeout=30).status_code == 204
        cluster.wait_for(lambda s: not any(p["topic"] == "admin" for p in s["partitions"]))

        def leftovers() -> list[str]:
            return [
                f"broker {i}: admin-{p}"
                for i, b in cluster.brokers.items()
                for p in range(3)
                if (b.log_dir / f"admin-{p}").exists()
            ]

        deadline = time.monotonic() + 30
        while leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not leftovers()


@pytest.mark.timeout(180)
def test_a_topic_deleted_while_a_replica_was_down_is_gone_from_it_after_restart(cluster: LocalCluster) -> None:
    create_topic(cluster, 1, "gone", 2, 3)
    victim = next(b for b in cluster.brokers if b != cluster.status()["controller"]["broker_id"])
    cluster.kill(victim)
    assert any(cluster.brokers[victim].log_dir.glob("gone-*"))
    survivor = next(b for b in cluster.live())
    assert httpx.delete(f"{cluster.http_url(survivor)}/topics/gone", timeout=30).status_code == 204
    cluster.wait_for(lambda s: not any(p["topic"] == "gone" for p in s["partitions"]), exclude=(victim,))
    cluster.restart(victim)
    assert not any(cluster.brokers[victim].log_dir.glob("gone-*")), "stray logs removed at start-up"
