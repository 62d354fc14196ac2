"""Classic members in consumer groups and the online migration between the classic and the
consumer protocol (Kafka 4's group.consumer.migration.policy), on the ConsumerGroups state
machine: upgrade, classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup, downgrade, policy
refusals, the classic members' timers, and replay after a failover."""

from __future__ import annotations

from dataclasses import replace

import pytest
from consumer_group_support import (
    CONFIG,
    GROUP,
    REBALANCE_MS,
    ClassicClient,
    Client,
    Cluster,
    assert_disjoint,
    group_view,
    replayed,
)

from loglake.errors import ErrorCode
from loglake.groups import records as classic_records
from loglake.groups import (
    Assignment,
    MemberIdentity,
    Subscription,
    TopicPartition,
    encode_assignment,
    encode_subscription,
)
from loglake.groups.consumer_group import (
    ClassicGroupSnapshot,
    ClassicMember,
    MemberState,
    MigrationPolicy,
)
from loglake.groups.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    PARTITION_METADATA_KEY,
    TARGET_ASSIGNMENT_MEMBER_KEY,
    TARGET_ASSIGNMENT_METADATA_KEY,
    ClassicMemberMetadata,
    decode_key,
)


def kinds(records) -> list[tuple[int, bool]]:
    """(key version, tombstone?) of each record: a consumer group's (3-8) or a classic group's (2)."""
    out = []
    for key, value in records:
        k = decode_key(key)
        if k is None:
            assert isinstance(classic_records.decode_key(key), classic_records.GroupMetadataKey)
        out.append((classic_records.GROUP_METADATA_KEY_VERSION if k is None else k.kind, value is None))
    return out


def classic_group_of(record) -> tuple[str, classic_records.GroupMetadataValue]:
    """The group id and value of a classic group metadata record."""
    key = classic_records.decode_key(record[0])
    assert isinstance(key, classic_records.GroupMetadataKey) and record[1] is not None
    return key.group, classic_records.decode_group_metadata_value(record[1])


def classic_group(assignments: dict[str, list[int]], generation: int = 5, **fields: object) -> ClassicGroupSnapshot:
    """A Stable classic group of eager range consumers of "t", as a classic coordinator holds it."""
    subscription = encode_subscription(Subscription(("t",)))
    members = tuple(
        ClassicMember(
            member_id,
            None,
            "classic-client",
            "/127.0.0.1",
            REBALANCE_MS,
            10_000,
            (("range", subscription),),
            encode_assignment(Assignment(tuple(TopicPartition("t", p) for p in partitions))),
        )
        for member_id, partitions in assignments.items()
    )
    return replace(ClassicGroupSnapshot(GROUP, "consumer", generation, "range", members), **fields)


def settle(consumers: list[Client], classics: list[ClassicClient], rounds: int = 10) -> None:
    """Consumer members heartbeat, classic members heartbeat and rejoin when told to, until
    the group is Stable."""
    for _ in range(rounds):
        for a in consumers:
            assert a.beat().error is ErrorCode.NONE, a.last
        for c in classics:
            error = c.heartbeat()
            assert error in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS), error
            if error is ErrorCode.REBALANCE_IN_PROGRESS:
                c.rejoin()
        if consumers[0].cluster.group().state.value == "Stable":
            return
    raise AssertionError(f"group did not settle: {consumers[0].cluster.group().state}")


def consumer_and_classic(cluster: Cluster) -> tuple[Client, ClassicClient]:
    """A consumer member and a classic member sharing "t", reconciled."""
    a, c = Client(cluster), ClassicClient(cluster)
    a.join()
    c.rejoin()
    settle([a], [c])
    return a, c


def test_a_classic_member_joins_a_consumer_group_and_takes_its_share() -> None:
    cluster = Cluster(t=4)
    a = Client(cluster)
    a.join()
    c = ClassicClient(cluster)
    written = len(cluster.records)
    required = c.join(require_known_member_id=True)
    assert required.error is ErrorCode.MEMBER_ID_REQUIRED and required.member_id
    assert len(cluster.records) == written

    joined = c.join()
    assert (joined.error, joined.generation_id, joined.protocol_type, joined.protocol_name) == (
        ErrorCode.NONE,
        2,
        "consumer",
        "range",
    )
    assert (joined.leader, joined.members, joined.member_id) == ("", (), required.member_id)
    member = cluster.group().members[c.member_id]
    assert member.classic == ClassicMemberMetadata(10_000, tuple((p, c.subscription) for p in c.protocols))
    assert member.subscribed_topic_names == ("t",) and member.state is MemberState.UNRELEASED_PARTITIONS
    # Its target is still held by the consumer member: nothing yet, no reason to rejoin.
    assert c.sync().error is ErrorCode.NONE and c.owned == set()
    assert c.heartbeat() is ErrorCode.NONE
    a.beat()  # told to revoke half
    a.beat()  # revoked
    assert c.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS
    c.rejoin()
    assert len(c.owned) == 2 and c.generation == 2
    assert_disjoint([a, c])
    assert c.heartbeat() is ErrorCode.NONE
    described = {m.member_id: m.uses_classic_protocol for m in cluster.groups.describe(GROUP, cluster.topics).members}
    assert described == {a.member_id: False, c.member_id: True}


def test_a_cooperative_classic_member_revokes_what_moves_and_keeps_the_rest() -> None:
    cluster = Cluster(t=6)
    a, c = Client(cluster), ClassicClient(cluster, cooperative=True)
    a.join()
    c.rejoin()
    settle([a], [c])
    assert len(c.owned) == 3
    b = Client(cluster)
    b.join()  # the group epoch moves: one of c's partitions is b's target
    assert c.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS
    before = set(c.owned)
    assert c.join().error is ErrorCode.NONE  # it reports the three it owns: it must revoke one
    member = cluster.group().members[c.member_id]
    assert member.state is MemberState.UNREVOKED_PARTITIONS and c.generation == member.member_epoch
    # Its sync answers what it keeps; its generation stays until it has revoked.
    assert c.sync().error is ErrorCode.NONE and len(c.owned) == 2 and c.owned < before
    assert c.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS  # revoked: it rejoins to move on
    c.rejoin()
    member = cluster.group().members[c.member_id]
    assert member.state is MemberState.STABLE and member.member_epoch == cluster.group().group_epoch
    assert c.owned < before  # it kept consuming those two throughout
    settle([a, b], [c])
    assert_disjoint([a, b, c])
    assert sorted(len(m.partitions()) for m in (a, b, c)) == [2, 2, 2]


def test_classic_requests_get_kafkas_errors_and_change_nothing() -> None:
    cluster = Cluster(replace(CONFIG, max_size=2), t=4)
    a, c = consumer_and_classic(cluster)
    before, written = group_view(cluster.group()), len(cluster.records)
    groups = cluster.groups
    stale = c.generation - 1
    assert groups.classic_heartbeat(GROUP, c.member_id, None, stale, 0) is ErrorCode.ILLEGAL_GENERATION
    assert groups.classic_heartbeat(GROUP, a.member_id, None, a.epoch, 0) is ErrorCode.UNKNOWN_MEMBER_ID
    assert groups.classic_heartbeat(GROUP, "nobody", None, 1, 0) is ErrorCode.UNKNOWN_MEMBER_ID
    assert groups.classic_heartbeat("other", c.member_id, None, 1, 0) is ErrorCode.UNKNOWN_MEMBER_ID
    assert c.sync(protocol_name="roundrobin").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    sync = groups.classic_sync(GROUP, c.member_id, None, stale, "consumer", "range", cluster.topics, 0)
    assert sync.error is ErrorCode.ILLEGAL_GENERATION
    assert c.join(protocol_type="connect").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    c.protocols = ("sticky",)  # not supported by every classic member (its own last join included)
    assert c.join().error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert ClassicClient(cluster).join().error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert group_view(cluster.group()) == before and len(cluster.records) == written


def test_static_classic_members_are_checked_by_instance_id() -> None:
    cluster = Cluster(t=2)
    Client(cluster).join()
    s = ClassicClient(cluster, instance_id="s1")
    s.rejoin()  # a static member joins without MEMBER_ID_REQUIRED
    groups = cluster.groups
    assert groups.classic_heartbeat(GROUP, "other", "s1", s.generation, 0) is ErrorCode.FENCED_INSTANCE_ID
    assert groups.classic_heartbeat(GROUP, s.member_id, "s2", s.generation, 0) is ErrorCode.UNKNOWN_MEMBER_ID
    # The instance restarts: it comes back with no member id and takes over its entry.
    old_id = s.member_id
    s.member_id = ""
    s.rejoin()
    assert s.member_id != old_id and old_id not in cluster.group().members
    assert cluster.group().static_member("s1").member_id == s.member_id
    # An administrator removes it by instance id alone.
    left, _ = groups.classic_leave(GROUP, [MemberIdentity("", "s1")], cluster.topics)
    assert [(m.member_id, m.error) for m in left.members] == [(s.member_id, ErrorCode.NONE)]
    assert cluster.group().static_member("s1") is None


def test_classic_leave_removes_only_classic_members() -> None:
    cluster = Cluster(t=4)
    a, c = consumer_and_classic(cluster)
    epoch = cluster.group().group_epoch
    left, records = cluster.groups.classic_leave(
        GROUP,
        [MemberIdentity(c.member_id, None), MemberIdentity(a.member_id, None)],
        cluster.topics,
    )
    assert left.error is ErrorCode.NONE
    assert [m.error for m in left.members] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert kinds(records) == [
        (CURRENT_MEMBER_ASSIGNMENT_KEY, True),
        (TARGET_ASSIGNMENT_MEMBER_KEY, True),
        (MEMBER_METADATA_KEY, True),
        (GROUP_METADATA_KEY, False),
    ]
    assert cluster.group().group_epoch == epoch + 1 and set(cluster.group().members) == {a.member_id}


def test_upgrade_makes_the_classic_members_members_of_the_consumer_group() -> None:
    cluster = Cluster(t=4)
    new = Client(cluster)
    joined = new.beat(classic=classic_group({"c1": [0, 1], "c2": [2, 3]}, generation=5))
    assert joined.error is ErrorCode.NONE and joined.member_epoch == 6
    assert kinds(joined.records)[:8] == [
        (MEMBER_METADATA_KEY, False),
        (MEMBER_METADATA_KEY, False),
        (GROUP_METADATA_KEY, False),
        (TARGET_ASSIGNMENT_MEMBER_KEY, False),
        (TARGET_ASSIGNMENT_MEMBER_KEY, False),
        (TARGET_ASSIGNMENT_METADATA_KEY, False),
        (CURRENT_MEMBER_ASSIGNMENT_KEY, False),
        (CURRENT_MEMBER_ASSIGNMENT_KEY, False),
    ]
    group = cluster.group()
    t = cluster.topics["t"][0]
    c1 = group.members["c1"]
    assert (c1.member_epoch, c1.previous_member_epoch, c1.state) == (5, 5, MemberState.STABLE)
    assert c1.assigned == {t: frozenset({0, 1})} and c1.classic is not None and c1.classic.session_timeout_ms == 10_000
    assert c1.subscribed_topic_names == ("t",) and c1.rebalance_timeout_ms == REBALANCE_MS
    # The new member's target is held by the classic members: they are told to rejoin.
    assert group.members[new.member_id].state is MemberState.UNRELEASED_PARTITIONS
    assert cluster.groups.classic_heartbeat(GROUP, "c1", None, 5, 0) is ErrorCode.REBALANCE_IN_PROGRESS
    assert group_view(replayed(cluster.records).groups[GROUP]) == group_view(group)


@pytest.mark.parametrize(
    ("classic", "epoch", "policy", "message"),
    [
        ({}, 0, MigrationPolicy.DISABLED, "because online upgrade is disabled"),
        ({}, 0, MigrationPolicy.DOWNGRADE, "because online upgrade is disabled"),
        ({"protocol_type": "connect"}, 0, MigrationPolicy.BIDIRECTIONAL, "does not use the consumer embedded protocol"),
        ({"protocol_name": "sticky"}, 0, MigrationPolicy.BIDIRECTIONAL, "the embedded consumer protocol is malformed"),
        ({}, 3, MigrationPolicy.BIDIRECTIONAL, "Group group-a is not a consumer group."),
    ],
)
def test_refused_upgrades_leave_the_classic_group_alone(
    classic: dict, epoch: int, policy: MigrationPolicy, message: str
) -> None:
    cluster = Cluster(replace(CONFIG, migration_policy=policy), t=4)
    client = Client(cluster)
    client.epoch, client.member_id = epoch, "m" if epoch else ""
    refused = client.beat(classic=classic_group({"c1": [0, 1, 2, 3]}, **classic))
    assert refused.error is ErrorCode.GROUP_ID_NOT_FOUND and message in (refused.error_message or "")
    assert refused.records == () and GROUP not in cluster.groups.groups


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    cluster = Cluster(t=4)
    a, c = consumer_and_classic(cluster)
    other = ClassicClient(cluster)
    other.rejoin()  # joins last: nothing released to it yet
    group = cluster.group()
    epoch, targets = group.group_epoch, dict(group.target)
    left = a.leave()
    assert left.error is ErrorCode.NONE
    # Kafka's order: the consumer group's tombstones, then the classic group's record.
    assert kinds(left.records) == (
        [(CURRENT_MEMBER_ASSIGNMENT_KEY, True)] * 3
        + [(TARGET_ASSIGNMENT_MEMBER_KEY, True)] * 3
        + [(TARGET_ASSIGNMENT_METADATA_KEY, True)]
        + [(MEMBER_METADATA_KEY, True)] * 3
        + [(PARTITION_METADATA_KEY, True), (GROUP_METADATA_KEY, True)]
        + [(classic_records.GROUP_METADATA_KEY_VERSION, False)]
    )
    assert left.downgraded == left.records[-1]
    group_id, value = classic_group_of(left.downgraded)
    assert (group_id, value.protocol_type, value.generation, value.protocol) == (GROUP, "consumer", epoch, "range")
    assert (value.leader, value.current_state_timestamp) == (c.member_id, cluster.wall_ms)
    assert [m.member_id for m in value.members] == [c.member_id, other.member_id]
    names = {cluster.topics["t"][0]: "t"}
    for m in value.members:
        # Each classic member is assigned its target, in its subscription's version.
        expected = [TopicPartition(names[t], p) for t, ps in targets[m.member_id].items() for p in sorted(ps)]
        assert m.assignment == encode_assignment(Assignment(tuple(expected)), version=1)
        assert (m.session_timeout, m.rebalance_timeout, m.subscription) == (10_000, REBALANCE_MS, c.subscription)
    assert GROUP not in cluster.groups.groups and GROUP not in replayed(cluster.records).groups
    assert cluster.groups.next_deadline_ms() is None


def test_without_downgrade_the_group_stays_a_consumer_group_of_classic_members() -> None:
    cluster = Cluster(replace(CONFIG, migration_policy=MigrationPolicy.UPGRADE), t=4)
    a, c = consumer_and_classic(cluster)
    left = a.leave()
    assert left.downgraded is None and set(cluster.group().members) == {c.member_id}
    assert c.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS
    c.rejoin()
    assert len(c.owned) == 4 and cluster.group().state.value == "Stable"


def test_a_classic_member_leaving_does_not_downgrade() -> None:
    cluster = Cluster(t=4)
    a, c = consumer_and_classic(cluster)
    assert c.leave() is ErrorCode.NONE
    assert set(cluster.group().members) == {a.member_id}


def test_classic_members_are_fenced_by_their_session_join_and_sync_timeouts() -> None:
    cluster = Cluster(t=4)
    a, c = consumer_and_classic(cluster)
    slow_sync = ClassicClient(cluster, session_ms=60_000)
    assert slow_sync.join().error is ErrorCode.NONE
    # The join timeout: told to rejoin (the group moved on), it keeps heartbeating instead.
    assert c.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS
    a.beat()
    cluster.now_ms += REBALANCE_MS - 1
    assert c.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS
    a.beat()
    assert cluster.expire() == []
    cluster.now_ms += 1
    fenced = cluster.expire()
    assert fenced and set(cluster.group().members) == {a.member_id}  # c, and slow_sync that never synced
    assert (CURRENT_MEMBER_ASSIGNMENT_KEY, True) in kinds(fenced)

    # The session timeout is the classic member's own (its JoinGroup's), not the group's.
    quiet = ClassicClient(cluster, session_ms=5_000)
    quiet.rejoin()
    cluster.now_ms += 4_999
    a.beat()
    assert cluster.expire() == []
    cluster.now_ms += 1
    assert cluster.expire() and quiet.member_id not in cluster.group().members


def test_fencing_the_last_consumer_member_downgrades_the_group() -> None:
    cluster = Cluster(t=4)
    a, c = consumer_and_classic(cluster)
    cluster.now_ms += CONFIG.session_timeout_ms
    assert c.heartbeat() is ErrorCode.NONE  # the classic member is alive; the consumer member is not
    expired = cluster.groups.expire(cluster.now_ms, cluster.topics)
    (record,) = expired.downgraded
    group_id, value = classic_group_of(record)
    assert group_id == GROUP and [m.member_id for m in value.members] == [c.member_id]
    assert expired.records[-1] == record and GROUP not in cluster.groups.groups


def test_a_consumer_member_replaces_a_static_classic_member_at_once() -> None:
    cluster = Cluster(t=2)
    Client(cluster).join()
    s = ClassicClient(cluster, instance_id="s1")
    s.rejoin()
    # The instance restarts with the consumer protocol: no need to wait for its release.
    restarted = Client(cluster, instance_id="s1")
    assert restarted.beat().error is ErrorCode.NONE
    member = cluster.group().static_member("s1")
    assert member.member_id == restarted.member_id and member.classic is None
    assert s.member_id not in cluster.group().members


def test_a_reloaded_coordinator_has_the_same_classic_members_and_timers() -> None:
    cluster = Cluster(t=6)
    a, c = consumer_and_classic(cluster)
    late = ClassicClient(cluster, session_ms=7_000)
    late.rejoin()
    a.beat()  # mid-reconciliation: a revokes for the newcomer
    fresh = replayed(cluster.records)
    assert group_view(fresh.groups[GROUP]) == group_view(cluster.group())
    fresh.on_loaded(now_ms=100_000)
    assert fresh.next_deadline_ms() == 107_000  # the classic member's own session timeout
    cluster.groups = fresh
    settle([a], [c, late])
    assert_disjoint([a, c, late])
    assert sorted(len(m.partitions()) for m in (a, c, late)) == [2, 2, 2]
