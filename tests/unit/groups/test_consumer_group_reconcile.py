"""Reconciliation: revoke before assign, kept partitions never lost, regex and metadata changes,
session and rebalance timeouts with a fake clock; randomized and hypothesis state-machine runs."""

from __future__ import annotations

import random
import uuid

from consumer_group_support import (
    GROUP,
    Client,
    Cluster,
    assert_disjoint,
    converge,
    group_view,
    replayed,
    topic_id,
    two_members,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from loglake.errors import ErrorCode
from loglake.groups.consumer_group import ConsumerGroupState, MemberState, TopicPartitions


def _server_disjoint(cluster: Cluster) -> None:
    """No partition is assigned or pending revocation on two members at once."""
    seen: set[tuple[uuid.UUID, int]] = set()
    for m in cluster.group().members.values():
        for parts in (m.assigned, m.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    assert (t, p) not in seen
                    seen.add((t, p))


def test_scale_up_and_down_members_keep_what_they_keep() -> None:
    cluster = Cluster(t=12)
    clients = [Client(cluster)]
    clients[0].join()
    for _ in range(5):
        clients.append(Client(cluster))
        before = {c.member_id: c.partitions() for c in clients}
        clients[-1].join()
        for _ in range(10):
            for c in clients:
                kept = c.partitions() & before.get(c.member_id, set())
                c.beat()
                assert_disjoint(clients)
                _server_disjoint(cluster)
                # A partition a member keeps in the new target is never taken away meanwhile.
                target = cluster.group().target.get(c.member_id, {})
                assert {tp for tp in kept if tp[1] in target.get(tp[0], ())} <= c.partitions()
        assert cluster.group().state is ConsumerGroupState.STABLE
    assert sorted(len(c.partitions()) for c in clients) == [2] * 6
    while len(clients) > 1:
        clients.pop().leave()
        converge(clients)
        assert_disjoint(clients)
    assert len(clients[0].partitions()) == 12


def test_randomized_sequences_never_double_own_and_replay_reproduces_the_group() -> None:
    rng = random.Random(848)
    for _ in range(20):
        cluster = Cluster(t=rng.randint(1, 8), u=rng.randint(1, 5))
        clients: list[Client] = []
        for _ in range(60):
            action = rng.random()
            if action < 0.2 and len(clients) < 6:
                c = Client(
                    cluster, topics=rng.choice([("t",), ("u",), ("t", "u")]), assignor=rng.choice([None, "range"])
                )
                c.join()
                clients.append(c)
            elif action < 0.3 and clients:
                clients.pop(rng.randrange(len(clients))).leave()
            elif action < 0.35:
                cluster.topics["u"] = (topic_id("u"), cluster.topics["u"][1] + 1)
            elif clients:
                assert rng.choice(clients).beat().error is ErrorCode.NONE
            assert_disjoint(clients)
            if GROUP in cluster.groups.groups:
                _server_disjoint(cluster)
        if clients:
            converge(clients, rounds=20)
            assert_disjoint(clients)
            owned = set().union(*(c.partitions() for c in clients))
            subscribed = {n for c in clients for n in c.topics}
            assert owned == {(topic_id(n), p) for n in subscribed for p in range(cluster.topics[n][1])}
        if GROUP in cluster.groups.groups:
            assert group_view(replayed(cluster.records).groups[GROUP]) == group_view(cluster.group())


class HeartbeatMachine(RuleBasedStateMachine):
    """Members join, leave, heartbeat (or lose a response) in any order."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster(t=6, u=3)
        self.clients: list[Client] = []

    @rule(topics=st.sampled_from([("t",), ("u",), ("t", "u")]))
    def join(self, topics: tuple[str, ...]) -> None:
        if len(self.clients) < 5:
            c = Client(self.cluster, topics=topics)
            c.join()
            self.clients.append(c)

    @rule(i=st.integers(0, 10))
    def leave(self, i: int) -> None:
        if self.clients:
            self.clients.pop(i % len(self.clients)).leave()

    @rule(i=st.integers(0, 10))
    def heartbeat(self, i: int) -> None:
        if self.clients:
            c = self.clients[i % len(self.clients)]
            if c.beat().error is ErrorCode.FENCED_MEMBER_EPOCH:  # after lost responses
                c.join()
            assert c.last is not None and c.last.error is ErrorCode.NONE

    @rule(i=st.integers(0, 10))
    def response_lost(self, i: int) -> None:
        """The coordinator processes the heartbeat but the client never sees the answer."""
        if self.clients:
            c = self.clients[i % len(self.clients)]
            # Two lost responses in a row and the member is fenced: it learns so on its next heartbeat.
            assert self.cluster.heartbeat(c.request()).error in (ErrorCode.NONE, ErrorCode.FENCED_MEMBER_EPOCH)

    @rule()
    def add_partition(self) -> None:
        self.cluster.topics["u"] = (topic_id("u"), self.cluster.topics["u"][1] + 1)

    @invariant()
    def never_owned_twice(self) -> None:
        assert_disjoint(self.clients)
        if GROUP in self.cluster.groups.groups:
            _server_disjoint(self.cluster)

    @invariant()
    def replay_matches(self) -> None:
        if GROUP in self.cluster.groups.groups:
            assert group_view(replayed(self.cluster.records).groups[GROUP]) == group_view(self.cluster.group())


TestHeartbeatMachine = HeartbeatMachine.TestCase
TestHeartbeatMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


def test_regex_subscription_picks_up_new_topics_and_partitions() -> None:
    cluster = Cluster(**{"orders-eu": 2, "other": 1, "__consumer_offsets": 50})
    a = Client(cluster, topics=(), regex="orders-.*")
    assert a.join().assignment == (TopicPartitions(topic_id("orders-eu"), (0, 1)),)
    epoch = cluster.group().group_epoch
    cluster.topics["orders-us"] = (topic_id("orders-us"), 1)
    cluster.topics["orders-eu"] = (topic_id("orders-eu"), 3)
    result = a.beat()
    assert cluster.group().group_epoch == epoch + 1
    assert a.partitions() == {(topic_id("orders-eu"), p) for p in range(3)} | {(topic_id("orders-us"), 0)}
    assert result.member_epoch == epoch + 1
    # A regex matches whole names only, and never an internal topic.
    assert Client(cluster, topics=(), regex="orders").join().assignment == ()
    assert Client(cluster, topics=(), regex="__.*").join().assignment == ()


def test_deleted_topic_leaves_the_assignment() -> None:
    cluster = Cluster(t=2, u=2)
    a = Client(cluster, topics=("t", "u"))
    a.join()
    del cluster.topics["u"]
    a.beat()
    assert a.owned == (TopicPartitions(topic_id("t"), (0, 1)),)


def test_session_timeout_fences_a_silent_member() -> None:
    cluster = Cluster(t=4)
    a, b = two_members(cluster)
    assert cluster.groups.next_deadline_ms() == cluster.now_ms + 45_000
    cluster.now_ms += 30_000
    a.beat()  # a keeps its session alive; b goes silent (kill -9)
    cluster.now_ms += 15_000
    records = cluster.expire()
    assert records and b.member_id not in cluster.group().members and a.member_id in cluster.group().members
    assert b.beat().error is ErrorCode.UNKNOWN_MEMBER_ID
    converge([a])
    assert len(a.partitions()) == 4


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    cluster = Cluster(t=4)
    a, b = two_members(cluster, stable=False)
    a.beat()  # told to revoke 2 partitions
    assert cluster.group().members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(3):  # it keeps heartbeating but never lets go
        cluster.now_ms += 9_000
        a.beat(owned_partitions=(TopicPartitions(topic_id("t"), (0, 1, 2, 3)),))
        b.beat()
        assert cluster.expire() == []
    cluster.now_ms += 4_000  # 31 s after the revocation was asked: past the 30 s rebalance timeout
    assert cluster.expire()
    assert a.member_id not in cluster.group().members
    converge([b])
    assert len(b.partitions()) == 4


def test_revocation_in_time_cancels_the_rebalance_timeout() -> None:
    cluster = Cluster(t=4)
    a, b = two_members(cluster, stable=False)
    a.beat()
    a.beat()  # acked
    cluster.now_ms += 31_000
    b.beat()
    a.beat()
    assert cluster.expire() == []


def test_timers_restart_after_a_reload() -> None:
    cluster = Cluster(t=2)
    a = Client(cluster)
    a.join()
    fresh = replayed(cluster.records)
    fresh.on_loaded(now_ms=100_000)
    assert fresh.next_deadline_ms() == 145_000
    assert fresh.expire(144_999, cluster.topics).records == ()
    assert fresh.expire(145_000, cluster.topics).records
    assert fresh.groups[GROUP].members == {}
