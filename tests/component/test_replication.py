"""Replication between in-process brokers over real sockets: followers fetch with the
Kafka protocol, the leader tracks them, the HW and the ISR follow, acks=all waits for
the ISR, and followers truncate divergent tails by leader epoch (both stories of seed 002).
"""

from __future__ import annotations

import asyncio

from replication_harness import LAG_MS, Cluster, cluster_test, fetch, produce, until, values_of

from ingest_gateway.replica.replica_manager import HIGH_WATERMARK_CHECKPOINT
from loglake.errors import ErrorCode
from loglake.storage.checkpoints import OffsetCheckpointFile

T = "events"


def epochs(node, topic: str = T) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in node.log_manager.get_log(topic, 0).leader_epoch_cache.entries]


# The data path -----------------------------------------------------------------------------------


@cluster_test
async def test_acks_all_replicates_advances_hw_and_consumers_read(cluster: Cluster) -> None:
    nodes = [await cluster.start_node(i) for i in (1, 2, 3)]
    cluster.create_topic(T, (1, 2, 3), {"min.insync.replicas": "2"})
    leader = cluster.client(1)
    for i in range(5):
        r = await produce(leader, T, [f"m{i}".encode(), f"n{i}".encode()])
        assert r["error_code"] == 0, r
        assert r["base_offset"] == 2 * i
    # acks=all answered: every ISR member has the records and the leader's HW passed them.
    assert nodes[0].partition(T).high_watermark == 10
    assert all(n.partition(T).log_end_offset == 10 for n in nodes)
    # Followers learn the HW with their next fetch.
    await until(lambda: all(n.partition(T).high_watermark == 10 for n in nodes), what="follower HWs")
    assert nodes[1].log_bytes(T) == nodes[0].log_bytes(T) == nodes[2].log_bytes(T)
    assert epochs(nodes[1]) == epochs(nodes[0]) == [(0, 0)]
    assert cluster.states[(T, 0)].isr == (1, 2, 3)

    consumed = await fetch(leader, T)
    assert consumed["error_code"] == 0 and consumed["high_watermark"] == 10
    assert values_of(consumed["records"]) == [v for i in range(5) for v in (f"m{i}".encode(), f"n{i}".encode())]
    # Followers serve consumers from Fetch v11 (KIP-392), up to their own HW; not before.
    from_follower = await fetch(cluster.client(2), T, offset=4)
    assert from_follower["error_code"] == 0 and from_follower["high_watermark"] == 10
    assert values_of(from_follower["records"]) == values_of(consumed["records"])[4:]
    assert (await fetch(cluster.client(2), T, version=10))["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


@cluster_test
async def test_follower_fetch_protocol(cluster: Cluster) -> None:
    await cluster.start_node(1)
    await cluster.start_node(2)
    cluster.create_topic(T, (1, 2))  # min.insync.replicas=1
    # Take broker 2's fetcher out so this test's client plays the follower.
    cluster.nodes[2].rm.fetcher_manager.remove_fetcher_partitions([(T, 0)])
    leader = cluster.client(1)
    assert (await produce(leader, T, [b"a"], acks=1))["error_code"] == 0
    follower = cluster.client(1)

    # Followers read past the HW, up to the log end; consumers stop at the HW.
    r = await fetch(follower, T, 0, replica_id=2, current_leader_epoch=0)
    assert r["error_code"] == 0 and values_of(r["records"]) == [b"a"]
    assert r["high_watermark"] == 0 and r["log_start_offset"] == 0
    assert values_of((await fetch(leader, T))["records"]) == []
    # Fetching at 1 tells the leader the follower has offset 0: the HW moves.
    r = await fetch(follower, T, 1, replica_id=2, current_leader_epoch=0)
    assert r["high_watermark"] == 1
    assert values_of((await fetch(leader, T))["records"]) == [b"a"]

    # A waiting follower fetch wakes when the leader's log grows (not only its HW).
    waiting = asyncio.create_task(
        fetch(follower, T, 1, replica_id=2, current_leader_epoch=0, max_wait_ms=3000, min_bytes=1)
    )
    await asyncio.sleep(0.1)
    assert not waiting.done()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await produce(leader, T, [b"b"], acks=1))["error_code"] == 0
    r = await waiting
    assert loop.time() - started < 1.0
    assert values_of(r["records"]) == [b"b"]

    # Fencing and membership.
    r = await fetch(follower, T, 2, replica_id=3, current_leader_epoch=0)
    assert r["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # 3 is not a replica
    r = await fetch(follower, T, 2, replica_id=2, current_leader_epoch=1)
    assert r["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    cluster.elect(T, 1, (1, 2))  # epoch 1
    r = await fetch(follower, T, 2, replica_id=2, current_leader_epoch=0)
    assert r["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    r = await fetch(cluster.client(2), T, 0, replica_id=1, current_leader_epoch=1)
    assert r["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # broker 2 follows
    r = await fetch(follower, T, 99, replica_id=2, current_leader_epoch=1)
    assert r["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE


# ISR ----------------------------------------------------------------------------------------------------


@cluster_test
async def test_stopped_follower_leaves_isr_and_min_insync_replicas_holds(cluster: Cluster) -> None:
    await cluster.start_node(1)
    await cluster.start_node(2)
    cluster.create_topic(T, (1, 2), {"min.insync.replicas": "2"})
    leader = cluster.client(1)
    assert (await produce(leader, T, [b"m0"]))["error_code"] == 0

    await cluster.stop_node(2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    # In flight when the ISR shrinks below min.insync.replicas: appended, not acknowledged.
    r = await produce(leader, T, [b"m1"], timeout_ms=10_000)
    assert r["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    elapsed = loop.time() - started
    assert 0.2 < elapsed < 4 * LAG_MS / 1000
    # The shrink was written through the ISR writer (compare-and-set), leader epoch unchanged.
    topic, partition, state = cluster.isr_writes[-1]
    assert (topic, partition, state.isr, state.leader, state.leader_epoch) == (T, 0, (1,), 1, 0)
    assert cluster.nodes[1].partition(T).isr == (1,)
    # Refused up front now; acks=1 still works.
    assert (await produce(leader, T, [b"m2"]))["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await produce(leader, T, [b"m3"], acks=1))["error_code"] == 0

    # The follower comes back (LeaderAndIsr with the current state), catches up and rejoins.
    await cluster.start_node(2)
    cluster.leader_and_isr(T, send_to=(2,))
    await until(lambda: cluster.states[(T, 0)].isr == (1, 2), what="ISR expansion")
    assert cluster.nodes[1].partition(T).isr == (1, 2)
    r = await produce(leader, T, [b"m4"])
    assert r["error_code"] == 0 and r["base_offset"] == 3
    assert cluster.nodes[2].log_bytes(T) == cluster.nodes[1].log_bytes(T)


@cluster_test
async def test_isr_write_lost_to_the_controller_is_not_applied(cluster: Cluster) -> None:
    await cluster.start_node(1)
    await cluster.start_node(2)
    cluster.create_topic(T, (1, 2))
    await cluster.stop_node(2)
    # Someone else (the controller) wrote the state meanwhile: the leader's version is stale.
    key = (T, 0)
    cluster.states[key] = cluster.states[key].__class__(1, 0, (1, 2), 1, cluster.states[key].version + 1)
    await asyncio.sleep(2 * LAG_MS / 1000)
    assert cluster.isr_writes == []
    assert cluster.nodes[1].partition(T).isr == (1, 2)
    # The controller's next LeaderAndIsr carries the current version; the shrink then lands.
    cluster.elect(T, 1, (1, 2))
    await until(lambda: cluster.states[key].isr == (1,), timeout_s=3, what="ISR shrink")
    assert cluster.nodes[1].partition(T).isr == (1,)


# Truncation by leader epoch (seed 002) ----------------------------------------------------------------


@cluster_test
async def test_restarted_follower_with_stale_hw_keeps_committed_records(cluster: Cluster) -> None:
    """Seed 002, "lost m2": A fetched m2, the leader B committed it, A restarts before it
    learns the new HW. A must not cut m2 at its old HW: it asks B for the end of its
    epoch and keeps m2, so when B dies and A leads, m2 is still there."""
    b, a = 1, 2
    await cluster.start_node(b)
    await cluster.start_node(a)
    cluster.create_topic(T, (b, a), {"min.insync.replicas": "2"})
    leader = cluster.client(b)
    assert (await produce(leader, T, [b"m1"]))["error_code"] == 0
    assert (await produce(leader, T, [b"m2"]))["error_code"] == 0
    await cluster.stop_node(a)
    # A's checkpointed HW is from before m2 was committed.
    checkpoint = OffsetCheckpointFile(cluster.root / f"broker-{a}" / HIGH_WATERMARK_CHECKPOINT)
    checkpoint.write({(T, 0): 1})

    # B answers OffsetForLeaderEpoch but holds every fetch: whatever A has after its
    # truncation is what it kept, not something fetched again.
    async def never(*args, **kwargs):
        await asyncio.Event().wait()

    cluster.nodes[b].rm.fetch_for_follower = never
    await cluster.start_node(a)
    cluster.leader_and_isr(T, send_to=(a,))
    await until(lambda: cluster.nodes[a].rm.fetcher_manager.fetch_state((T, 0)).state == "fetching", what="truncation")
    assert cluster.nodes[a].partition(T).log_end_offset == 2  # m2 kept, though A's HW said 1

    await cluster.stop_node(b)
    cluster.elect(T, a, (a,))
    r = await fetch(cluster.client(a), T)
    assert r["error_code"] == 0
    assert values_of(r["records"]) == [b"m1", b"m2"]


@cluster_test
async def test_restarted_old_leader_truncates_its_divergent_tail(cluster: Cluster) -> None:
    """Seed 002, "diverged": leader A has m2, follower B lost it; both crash; B leads at
    a new epoch and writes m3 where m2 was. A comes back as follower, asks B where its
    epoch ends, cuts m2 and fetches m3: both logs end identical."""
    a, b = 1, 2
    await cluster.start_node(a)
    await cluster.start_node(b)
    cluster.create_topic(T, (a, b))
    leader = cluster.client(a)
    assert (await produce(leader, T, [b"m1"]))["error_code"] == 0
    await until(lambda: cluster.nodes[b].partition(T).high_watermark == 1, what="B has m1")
    # B stops fetching, so m2 (acks=1) reaches only A.
    cluster.nodes[b].rm.fetcher_manager.remove_fetcher_partitions([(T, 0)])
    assert (await produce(leader, T, [b"m2"], acks=1))["error_code"] == 0
    await cluster.stop_node(a)
    await cluster.stop_node(b)

    await cluster.start_node(b)
    cluster.elect(T, b, (b,))  # epoch 1
    assert (await produce(cluster.client(b), T, [b"m3"], acks=1))["base_offset"] == 1
    await cluster.start_node(a)
    cluster.leader_and_isr(T, send_to=(a,))
    await until(
        lambda: (
            cluster.nodes[a].log_manager.get_log(T, 0).log_end_offset == 2
            and cluster.nodes[a].rm.fetcher_manager.fetch_state((T, 0)).state == "fetching"
        ),
        what="A truncated and caught up",
    )
    await until(lambda: cluster.nodes[a].log_bytes(T) == cluster.nodes[b].log_bytes(T), what="identical logs")
    assert values_of(cluster.nodes[a].log_bytes(T)) == [b"m1", b"m3"]
    assert epochs(cluster.nodes[a]) == epochs(cluster.nodes[b]) == [(0, 0), (1, 1)]
    # A caught up: B lets it back into the ISR.
    await until(lambda: cluster.states[(T, 0)].isr == (b, a), what="ISR expansion")


@cluster_test
async def test_leader_change_old_leader_follows_and_truncates(cluster: Cluster) -> None:
    """A live leader change: the old leader has an unreplicated tail; it becomes a
    follower of the new leader, truncates the tail and replicates the new leader's data.
    Broker 1 hears of the change before broker 2 does: its first requests find broker 2
    still at the old epoch (UNKNOWN_LEADER_EPOCH) and are retried."""
    await cluster.start_node(1)
    await cluster.start_node(2)
    await cluster.start_node(3)
    cluster.create_topic(T, (1, 2, 3), {"min.insync.replicas": "2"})
    old = cluster.client(1)
    for v in (b"m1", b"m2"):
        assert (await produce(old, T, [v]))["error_code"] == 0
    for n in (2, 3):
        cluster.nodes[n].rm.fetcher_manager.remove_fetcher_partitions([(T, 0)])
    assert (await produce(old, T, [b"x3"], acks=1))["error_code"] == 0
    assert cluster.nodes[1].partition(T).log_end_offset == 3

    cluster.elect(T, 2, (2, 3), send_to=(1, 3))  # epoch 1; broker 2 is told later
    await asyncio.sleep(0.2)
    assert not cluster.nodes[1].partition(T).is_leader
    assert cluster.nodes[1].rm.fetcher_manager.fetch_state((T, 0)).state == "truncating"
    assert (await produce(old, T, [b"late"]))["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    cluster.leader_and_isr(T, send_to=(2,))
    new = cluster.client(2)
    r = await produce(new, T, [b"m3"])
    assert r["error_code"] == 0 and r["base_offset"] == 2
    for n in (1, 3):
        await until(
            lambda n=n: cluster.nodes[n].log_bytes(T) == cluster.nodes[2].log_bytes(T), what=f"broker {n} caught up"
        )
    assert values_of(cluster.nodes[1].log_bytes(T)) == [b"m1", b"m2", b"m3"]
    assert epochs(cluster.nodes[1]) == [(0, 0), (1, 2)]
    await until(lambda: set(cluster.states[(T, 0)].isr) == {1, 2, 3}, what="old leader back in the ISR")
    assert cluster.states[(T, 0)].leader_epoch == 1


@cluster_test
async def test_acks_all_wait_survives_a_new_epoch_of_the_same_leader_not_a_leader_change(cluster: Cluster) -> None:
    for i in (1, 2, 3):
        await cluster.start_node(i)
    cluster.create_topic(T, (1, 2, 3), {"min.insync.replicas": "2"})
    leader = cluster.client(1)
    for n in (2, 3):
        cluster.nodes[n].rm.fetcher_manager.remove_fetcher_partitions([(T, 0)])
    waiting = asyncio.create_task(produce(leader, T, [b"m0"]))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    # The controller bumps the epoch, same leader (as when it drops a dead broker from
    # the ISR): the followers start over at the new epoch and the wait completes.
    cluster.elect(T, 1, (1, 2, 3))
    r = await waiting
    assert r["error_code"] == 0 and r["base_offset"] == 0

    for n in (2, 3):
        cluster.nodes[n].rm.fetcher_manager.remove_fetcher_partitions([(T, 0)])
    waiting = asyncio.create_task(produce(leader, T, [b"m1"]))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    cluster.elect(T, 2, (2, 3))  # leadership moves while the produce waits
    assert (await waiting)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


@cluster_test
async def test_follower_behind_the_leaders_log_start_restarts_there(cluster: Cluster) -> None:
    """OFFSET_OUT_OF_RANGE below the leader's log start: the follower's log restarts at
    it (here inside a batch: the follower starts at the batch, as Kafka's does)."""
    await cluster.start_node(1)
    cluster.create_topic(T, (1, 2))
    cluster.states[(T, 0)] = cluster.states[(T, 0)].__class__(1, 1, (1,), 1, 1)
    cluster.leader_and_isr(T)
    leader = cluster.client(1)
    for i in range(3):
        assert (await produce(leader, T, [f"a{i}".encode(), f"b{i}".encode()]))["error_code"] == 0
    cluster.nodes[1].partition(T).delete_records(3)  # inside the batch [2, 3]

    await cluster.start_node(2)
    cluster.leader_and_isr(T, send_to=(2,))
    await until(lambda: cluster.states[(T, 0)].isr == (1, 2), what="follower in the ISR")
    follower = cluster.nodes[2].partition(T)
    assert follower.log_start_offset == 3 and follower.log_end_offset == 6
    await until(lambda: follower.high_watermark == 6, what="follower HW")
    # The first batch holds offset 2 (below the start) and 3.
    assert values_of(cluster.nodes[2].log_bytes(T)) == [b"a1", b"b1", b"a2", b"b2"]


@cluster_test
async def test_unreachable_leader_is_retried(cluster: Cluster) -> None:
    await cluster.start_node(2)
    cluster.ports[1] = 1  # nothing listens there
    cluster.create_topic(T, (1, 2))
    state = cluster.nodes[2].rm.fetcher_manager.fetch_state((T, 0))
    await asyncio.sleep(0.3)  # several refused connections, backing off between them
    assert not state.failed and cluster.nodes[2].rm.fetcher_manager.fetchers[1].running
    await cluster.start_node(1)
    cluster.leader_and_isr(T, send_to=(1,))
    assert (await produce(cluster.client(1), T, [b"x"]))["error_code"] == 0
    assert cluster.nodes[2].partition(T).log_end_offset == 1


@cluster_test
async def test_a_follower_told_before_its_leader_fetches_once_the_leader_serves(cluster: Cluster) -> None:
    """LeaderAndIsr reaches the follower before the leader, which answers NOT_LEADER_OR_FOLLOWER
    (the metadata names the partition; it does not lead it yet): the follower backs off and
    retries, as Kafka's fetcher does, instead of waiting for a LeaderAndIsr that never comes."""
    await cluster.start_node(1)
    await cluster.start_node(2)
    cluster.create_topic(T, (1, 2), send_to=(2,))
    state = cluster.nodes[2].rm.fetcher_manager.fetch_state((T, 0))
    assert state is not None
    await until(lambda: state.delayed_until > 0 or state.failed, what="the leader's refusal")
    assert not state.failed
    cluster.leader_and_isr(T, send_to=(1,))
    assert (await produce(cluster.client(1), T, [b"x"], acks=1))["error_code"] == 0
    await until(lambda: cluster.nodes[2].partition(T).log_end_offset == 1, what="the follower to fetch")
