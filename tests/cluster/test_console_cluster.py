"""The web console of a 3-broker cluster, read from a broker that is not the controller: the
whole cluster, other leaders' offsets, a group's lag as the CLI prints it, and partitions
flagged under-replicated while a follower is SIGSTOP'ed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cluster_helpers import FAST, serving
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from console_helpers import check_console, cli_lags, start_browser, table_cells

from harness.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPIC = "console-watched"
GROUP = "console-group"


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[LocalCluster]:
    # The paused follower must leave the ISR through its leaders' lag checks, not through
    # its ZooKeeper session expiring: sessions outlast the pause by far.
    with LocalCluster(tmp_path, 3, FAST | {"zookeeper.session.timeout.ms": "30000"}, zookeeper_connect=zk_connect) as c:
        yield c


def page(url: str) -> str:
    r = httpx.get(url, timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def produce(cluster: LocalCluster, leader: int, partition: int, count: int, acks: str = "all", topic: str = TOPIC) -> None:
    """acks=all by default: the records are below the leader's high watermark (readable)
    when the produce returns; with acks=1 they may not be yet."""
    r = serving(
        "POST",
        f"{cluster.http_url(leader)}/topics/{topic}/partitions/{partition}",
        params={"acks": acks},
        json={"records": [{"value": i} for i in range(count)]},
        headers={"content-type": "application/vnd.kafka.json.v2+json"},
    )
    assert r.status_code == 200, r.text


@pytest.mark.timeout(240)
def test_console_of_a_non_controller(cluster: LocalCluster, tmp_path) -> None:
    controller = cluster.status()["controller"]["broker_id"]
    viewer, follower = [b for b in sorted(cluster.brokers) if b != controller]
    # Partition 0 led by the viewer, partition 1 by the controller; the follower in both.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[viewer, follower, controller], [controller, follower, viewer]]
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=assignment)])[TOPIC].result(30)
    cluster.wait_for(lambda s: sum(p["topic"] == TOPIC and len(p["isr"]) == 3 for p in s["partitions"]) == 2)
    produce(cluster, viewer, 0, 5)
    produce(cluster, controller, 1, 8)
    ui = f"{cluster.http_url(viewer)}/ui"

    overview = page(ui)
    assert [(row[0], row[4]) for row in table_cells(overview, "brokers")] == [
        (str(b), "alive") for b in sorted(cluster.brokers)
    ]
    assert f'id="controller">broker {controller}<' in overview
    assert "All partitions are fully replicated" in overview

    # The other leader's offsets, asked of it as `loglake topics describe` does.
    rows = table_cells(page(f"{ui}/topics/{TOPIC}"), "partitions")
    assert [(row[0], row[1], row[6]) for row in rows] == [("0", str(viewer), "5"), ("1", str(controller), "8")]
    records = table_cells(page(f"{ui}/topics/{TOPIC}/messages?partition=1&offset=6"), "records")
    assert [(row[0], row[3]) for row in records] == [("6", "json6"), ("7", "json7")]

    # A group's committed offsets, on whichever broker coordinates it.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 2), TopicPartition(TOPIC, 1, 3)], asynchronous=False)
    finally:
        consumer.close()
    groups = table_cells(page(f"{ui}/groups"), "groups")
    assert [row[0] for row in groups] == [GROUP]
    coordinator = int(groups[0][3])
    shown = {(row[0], int(row[1])): row[4] for row in table_cells(page(f"{ui}/groups/{GROUP}"), "offsets")}
    assert shown == cli_lags(cluster.http_url(coordinator), GROUP) == {(TOPIC, 0): "3", (TOPIC, 1): "5"}

    cluster.pause(follower)
    try:
        # A follower is out of sync once it lags its leader's log end: records it cannot fetch.
        produce(cluster, viewer, 0, 1, acks="1")
        produce(cluster, controller, 1, 1, acks="1")
        deadline = time.monotonic() + 60
        while True:
            overview = page(ui)
            flagged = (
                [row for row in table_cells(overview, "flagged") if row[0] == TOPIC] if "flagged" in overview else []
            )
            if len(flagged) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert 'class="banner bad" id="health"' in overview
        assert [(row[0], row[1], row[5]) for row in flagged] == [
            (TOPIC, "0", "under-replicated"),
            (TOPIC, "1", "under-replicated"),
        ]
        topics = table_cells(page(f"{ui}/topics"), "topics")
        assert topics == [[TOPIC, "2", "3", "2 under-replicated"]]
        rows = table_cells(page(f"{ui}/topics/{TOPIC}"), "partitions")
        assert [row[8] for row in rows] == ["under-replicated", "under-replicated"]
        # And in a real browser: the overview shows the flag, with no console errors.
        browser = start_browser(tmp_path / "chromium-profile")
        try:
            browser.get(ui)
            check_console(browser, ui)
            assert "bad" in browser.find_element("id", "health").get_attribute("class")
            assert browser.page_source.count("under-replicated") >= 2
            browser.save_screenshot(str(tmp_path / "under-replicated.png"))
        finally:
            browser.quit()
    finally:
        cluster.resume(follower)
    cluster.wait_for(lambda s: s["under_replicated_partitions"] == 0)
    assert "All partitions are fully replicated" in page(ui)


def test_records_above_the_high_watermark_are_announced_not_hidden(tmp_path: Path, zk_connect: str) -> None:
    """The window of the fresh-clone failure, held open: acks=1 records on the leader that a
    (SIGSTOP'ed) follower has not fetched are above the high watermark. The console of a
    non-leader says they exist and are not yet replicated (it said "offsets 0 to 0"), shows
    them once the follower catches up, and no replica but the leader answers for offsets or
    records."""
    topic = "console-unreplicated"
    # The paused follower stays in the ISR for the whole test: the high watermark is held.
    props = FAST | {"zookeeper.session.timeout.ms": "60000", "replica.lag.time.max.ms": "60000"}
    with LocalCluster(tmp_path, 3, props, zookeeper_connect=zk_connect) as cluster:
        # The follower paused is not the controller (the test is about the console, not a failover).
        follower = cluster.a_broker_other_than(cluster.controller())
        leader, viewer = (b for b in sorted(cluster.brokers) if b != follower)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, follower, viewer]])])[topic].result(30)
        cluster.wait_for(lambda s: any(p["topic"] == topic and len(p["isr"]) == 3 for p in s["partitions"]))
        produce(cluster, leader, 0, 2, topic=topic)  # acks=all: readable at once
        ui = f"{cluster.http_url(viewer)}/ui"
        messages = f"{ui}/topics/{topic}/messages"
        cluster.pause(follower)
        try:
            produce(cluster, leader, 0, 6, acks="1", topic=topic)
            rows = table_cells(page(f"{ui}/topics/{topic}"), "partitions")
            assert [(row[5], row[6]) for row in rows] == [("2", "8")]  # high watermark, log end
            offsets = httpx.get(f"{cluster.http_url(leader)}/topics/{topic}/partitions/0/offsets", timeout=30)
            assert offsets.json() == {"beginning_offset": 0, "end_offset": 2, "log_end_offset": 8}
            for path in ("offsets", "records?offset=0"):
                r = httpx.get(f"{cluster.http_url(viewer)}/topics/{topic}/partitions/0/{path}", timeout=30)
                assert r.status_code == 503 and r.json()["kafka_error"] == "NOT_LEADER_OR_FOLLOWER", r.text
            html = page(f"{messages}?partition=0&offset=6")
            assert "offsets 2 to 7 are written on the leader but not yet on every in-sync replica" in html
            assert "No records here." in html
            assert [row[0] for row in table_cells(page(messages), "records")] == ["0", "1"]
            r = httpx.get(f"{messages}?partition=0&offset=9", timeout=30)
            assert r.status_code == 416 and "has offsets 0 to 8" in r.text
        finally:
            cluster.resume(follower)
        cluster.wait_for(lambda s: s["under_replicated_partitions"] == 0)
        deadline = time.monotonic() + 30
        while "not yet on every in-sync replica" in (html := page(f"{messages}?partition=0&offset=6")):
            assert time.monotonic() < deadline, html
            time.sleep(0.1)
        assert [row[0] for row in table_cells(html, "records")] == ["6", "7"]
