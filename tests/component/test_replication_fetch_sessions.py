"""Followers fetch in incremental fetch sessions (KIP-227): after the first full request a
follower of many partitions names only those whose position changed, the leader answers
only those with news, and records still travel as file ranges. Leadership changes and a
restarted leader (whose sessions are gone) keep replication going."""

from __future__ import annotations

import uuid
from dataclasses import replace

from replication_harness import Cluster, cluster_test, produce, until

from ingest_gateway.replica.fetch_session import INITIAL_EPOCH
from loglake.cluster.metadata_image import MetadataImage
from loglake.coordination.model import BrokerEndpoint
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from protocol_helpers import request_context
from loglake.storage.file_records import LogSlice

TOPICS = [f"t{i}" for i in range(12)]


class Recorder:
    """What a follower's fetcher sends (partitions named per request) and processes
    (partitions answered)."""

    def __init__(self, fetcher) -> None:
        self.sent: list[tuple[int, int]] = []  # (session epoch, partitions named)
        self.answered: list[tuple[str, int]] = []
        build, process = fetcher._session.build, fetcher._process_partition_data

        def recording_build(wanted, uses_topic_ids):
            request = build(wanted, uses_topic_ids)
            self.sent.append((request.epoch, len(request.to_send)))
            return request

        def recording_process(tp, s, partition, data):
            self.answered.append(tp)
            return process(tp, s, partition, data)

        fetcher._session.build = recording_build
        fetcher._process_partition_data = recording_process

    def clear(self) -> None:
        self.sent.clear()
        self.answered.clear()


def consumer_fetch(
    topic_id: uuid.UUID, offsets: dict[int, int], session_id: int = 0, epoch: int = -1, leader_epoch: int = -1
) -> dict:
    """A consumer's Fetch body (v13+) for partitions of one topic."""
    partitions = [
        {
            "partition": p,
            "fetch_offset": offset,
            "partition_max_bytes": 1 << 20,
            "current_leader_epoch": leader_epoch,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
        }
        for p, offset in offsets.items()
    ]
    return {
        "replica_id": -1,
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic_id": topic_id, "partitions": partitions}] if partitions else [],
        "forgotten_topics_data": [],
    }


async def replicated(cluster: Cluster, topic: str, end: int) -> None:
    await until(
        lambda: all(n.partition(topic).log_end_offset == end for n in cluster.nodes.values()),
        what=f"{topic} replicated to {end}",
    )


@cluster_test
async def test_follower_of_many_partitions_sends_and_receives_only_changes(cluster: Cluster) -> None:
    leader, follower = await cluster.start_node(1), await cluster.start_node(2)
    for t in TOPICS:
        cluster.create_topic(t, (1, 2))
    client = cluster.client(1)
    for t in TOPICS:
        assert (await produce(client, t, [t.encode()]))["error_code"] == 0
    fetcher = follower.rm.fetcher_manager.fetchers[1]
    # One session on the leader, a follower's (privileged), holding every partition.
    cache = leader.fetch_apis.sessions.cache
    await until(lambda: fetcher._session.epoch > 2, what="incremental fetches")
    (session,) = cache.sessions.values()
    assert session.privileged and session.uses_topic_ids and len(session.partitions) == len(TOPICS)
    assert fetcher._session.session_id == session.id

    # Idle: the follower's requests name no partition, the answers carry none.
    await until(lambda: all(n.partition(t).high_watermark == 1 for n in (leader, follower) for t in TOPICS))
    recorder = Recorder(fetcher)
    await until(lambda: len(recorder.sent) >= 3, what="idle fetches")
    assert all(epoch > INITIAL_EPOCH and named == 0 for epoch, named in recorder.sent)
    assert recorder.answered == []

    # A record in one partition: only that one is answered, then named again (new offset).
    recorder.clear()
    assert (await produce(client, "t5", [b"more"]))["error_code"] == 0
    await replicated(cluster, "t5", 2)
    await until(lambda: follower.partition("t5").high_watermark == 2, what="follower HW")
    assert set(recorder.answered) == {("t5", 0)}
    assert all(named <= 1 for _, named in recorder.sent)
    assert leader.partition("t5").isr == (1, 2)

    # The leader's log start moves (DeleteRecords): answered, the follower's follows, and
    # the follower names the partition again with its new log start (nothing else changed).
    recorder.clear()
    leader.partition("t3").delete_records(1)
    await until(lambda: follower.partition("t3").log_start_offset == 1, what="follower log start")
    held = session.partitions[(uuid.UUID(cluster.topics["t3"].topic_id), 0)]
    await until(lambda: held.request.log_start_offset == 1, what="the new log start in the leader's session")
    assert held.request.fetch_offset == 1
    assert set(recorder.answered) == {("t3", 0)}


@cluster_test
async def test_incremental_answers_are_file_ranges(cluster: Cluster) -> None:
    leader = await cluster.start_node(1)
    cluster.create_topic("t0", (1,))
    client = cluster.client(1)
    assert (await produce(client, "t0", [b"a"]))["error_code"] == 0
    topic_id = cluster.topics["t0"].topic_id
    fetch = leader.fetch_apis.fetch
    context = request_context(ApiKey.FETCH, 17)
    full = await fetch(context, consumer_fetch(uuid.UUID(topic_id), {0: 1}, session_id=0, epoch=0))
    assert full["session_id"] > 0
    assert (await produce(client, "t0", [b"b"]))["error_code"] == 0
    incremental = await fetch(context, consumer_fetch(uuid.UUID(topic_id), {}, session_id=full["session_id"], epoch=1))
    (entry,) = incremental["responses"][0]["partitions"]
    assert isinstance(entry["records"], LogSlice) and entry["records"].size > 0


@cluster_test
async def test_replication_survives_leader_changes_and_a_restarted_leader(cluster: Cluster) -> None:
    for i in (1, 2, 3):
        await cluster.start_node(i)
    for t in TOPICS[:4]:
        cluster.create_topic(t, (1, 2, 3))
    for t in TOPICS[:4]:
        assert (await produce(cluster.client(1), t, [b"one"]))["error_code"] == 0
    # Leadership of t0 moves to 2: 3 now follows it from 2 and still the others from 1.
    cluster.elect("t0", 2, (1, 2, 3))
    assert (await produce(cluster.client(2), "t0", [b"two"]))["error_code"] == 0
    for t in TOPICS[1:4]:
        assert (await produce(cluster.client(1), t, [b"two"]))["error_code"] == 0
    for t in TOPICS[:4]:
        await replicated(cluster, t, 2)

    # Broker 1 restarts: its sessions are gone; its followers open new ones with it.
    await cluster.stop_node(1)
    await cluster.start_node(1)
    for t in TOPICS[1:4]:
        cluster.leader_and_isr(t)
    fetcher = cluster.nodes[3].rm.fetcher_manager.fetchers[1]
    restarted = cluster.nodes[1].fetch_apis.sessions.cache
    await until(lambda: fetcher._session.session_id in restarted.sessions, what="a session with the restarted leader")
    for t in TOPICS[1:4]:
        assert (await produce(cluster.client(1), t, [b"three"]))["error_code"] == 0
        await replicated(cluster, t, 3)


@cluster_test
async def test_a_topic_id_that_is_not_the_local_replicas_is_inconsistent(cluster: Cluster) -> None:
    """The metadata names the topic by a new id (deleted and recreated) while this broker
    still holds the old topic's replica: a fetch by the new id must not read it."""
    leader = await cluster.start_node(1)
    cluster.create_topic("t0", (1,))
    new_id = uuid.uuid4()
    cluster.topics["t0"] = replace(cluster.topics["t0"], topic_id=str(new_id))
    context = request_context(ApiKey.FETCH, 13)
    response = await leader.fetch_apis.fetch(context, consumer_fetch(new_id, {0: 0}))
    (t,) = response["responses"]
    assert t["topic_id"] == new_id and t["partitions"][0]["error_code"] == ErrorCode.INCONSISTENT_TOPIC_ID


@cluster_test
async def test_a_consumer_session_outlives_a_leadership_change(cluster: Cluster) -> None:
    """The session stays valid; the partition whose leader moved answers FENCED_LEADER_EPOCH
    (the consumer knows the old epoch) with, from v16, the new leader and its endpoint
    (KIP-951). (Without an epoch the old leader, now a follower, would serve it: KIP-392.)"""
    old, new = await cluster.start_node(1), await cluster.start_node(2)
    cluster.create_topic("t0", (1, 2))
    client = cluster.client(1)
    assert (await produce(client, "t0", [b"a"]))["error_code"] == 0
    topic_id = uuid.UUID(cluster.topics["t0"].topic_id)
    context = request_context(ApiKey.FETCH, 16)
    full = await old.fetch_apis.fetch(context, consumer_fetch(topic_id, {0: 1}, session_id=0, epoch=0, leader_epoch=0))
    session_id = full["session_id"]
    assert session_id > 0

    cluster.elect("t0", 2, (1, 2))
    old.cache.image = MetadataImage(
        brokers={2: BrokerEndpoint(2, "127.0.0.1", cluster.ports[2], "127.0.0.1", 0)},
        topics=cluster.topics,
        partition_states={"t0": {0: cluster.states[("t0", 0)]}},
    )
    moved = await old.fetch_apis.fetch(context, consumer_fetch(topic_id, {}, session_id=session_id, epoch=1))
    assert (moved["error_code"], moved["session_id"]) == (ErrorCode.NONE, session_id)
    (entry,) = moved["responses"][0]["partitions"]
    assert entry["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    assert entry["current_leader"] == {"leader_id": 2, "leader_epoch": 1}
    assert moved["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": cluster.ports[2], "rack": None}]
    assert new.partition("t0").is_leader
