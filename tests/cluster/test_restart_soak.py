"""Quick restarts, many times: a broker kill -9'ed and started again before ZooKeeper
expires its old session (alternately the controller and a partition leader). After each
restart every partition must accept an acks=all write within 15 s, and nothing
acknowledged may be lost."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import Producer

from cluster_helpers import create_topic, partition_of, read_all
from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROUNDS = 10  # five of each kind of victim
PARTITIONS = 6
ACCEPT_WITHIN_S = 15.0


@pytest.mark.timeout(900)
def test_every_partition_accepts_writes_soon_after_each_quick_restart(cluster: LocalCluster) -> None:
    create_topic(cluster, "soak", PARTITIONS, 3, {"min.insync.replicas": "2"})
    rng = random.Random(7)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": int(ACCEPT_WITHIN_S * 1000),
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for round_ in range(ROUNDS):
        status = cluster.wait_for(
            lambda s: (
                len(s["brokers"]) == 3 and all(len(p["isr"]) == 3 for p in s["partitions"] if p["topic"] == "soak")
            ),
            90,
        )
        victim = (
            status["controller"]["broker_id"] if round_ % 2 == 0 else partition_of(status, "soak", round_ % 6)["leader"]
        )
        cluster.kill(victim)
        time.sleep(rng.uniform(0.2, 2.5))  # within the 3 s session timeout: the old registration is still there
        cluster.restart(victim)
        restarted = time.monotonic()
        outcomes: dict[int, str | None] = {}

        def on_delivery(err, msg, outcomes=outcomes) -> None:
            outcomes[msg.partition()] = None if err is None else str(err)
            if err is None:
                acked[msg.partition()].append(msg.value())

        for p in range(PARTITIONS):
            producer.produce("soak", f"{round_}-{p}".encode(), partition=p, on_delivery=on_delivery)
        producer.flush(ACCEPT_WITHIN_S + 10)
        waited = time.monotonic() - restarted
        failed = {p: e for p, e in outcomes.items() if e is not None}
        assert len(outcomes) == PARTITIONS and not failed, (
            f"round {round_} (broker {victim} restarted): partitions without a serving leader "
            f"after {waited:.1f}s: {failed or 'no delivery report'}; cluster: {cluster.status()['partitions']}"
        )
    expected = sum(map(len, acked.values()))
    read = read_all(cluster.bootstrap, "soak", PARTITIONS, expected)
    for p, values in acked.items():
        assert read[p] == values, f"partition {p}: acknowledged {values}, read back {read[p]}"
