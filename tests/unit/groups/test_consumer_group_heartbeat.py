"""ConsumerGroupHeartbeat: joining and leaving with epochs, Kafka's validation and fencing errors, static members."""

from __future__ import annotations

import pytest
from consumer_group_support import GROUP, Client, Cluster, converge, topic_id, two_members

from loglake.errors import ErrorCode
from loglake.groups.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroupState,
    MemberState,
    TopicPartitions,
)

T = topic_id("t")


def test_first_member_joins_with_epoch_zero_and_gets_everything() -> None:
    cluster = Cluster(t=4)
    a = Client(cluster)
    result = a.join()
    assert result.member_id and len(result.member_id) == 22  # Kafka's Uuid string
    assert result.member_epoch == 1
    assert result.heartbeat_interval_ms == 625  # the one a new member would take from: an eighth of 5 s
    assert result.assignment == (TopicPartitions(T, (0, 1, 2, 3)),)
    group = cluster.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)
    # A plain heartbeat with nothing changed: same epoch, no assignment, no records.
    again = a.beat()
    assert (again.member_epoch, again.assignment, again.records) == (1, None, ())


def test_client_chosen_member_id_is_accepted_and_a_lost_join_response_is_retried() -> None:
    cluster = Cluster(t=2)
    a = Client(cluster, member_id="my-own-id")
    assert a.join().member_id == "my-own-id"
    # The response was lost: the same join again (epoch 0, same id) is accepted, as the
    # previous epoch with owned partitions within the assignment.
    retry = cluster.heartbeat(
        a.request(member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned_partitions=())
    )
    assert retry.error is ErrorCode.NONE and retry.member_epoch == 1


def test_second_member_waits_for_revocation() -> None:
    cluster = Cluster(t=4)
    a, b = Client(cluster), Client(cluster)
    a.join()
    joined = b.join()
    assert joined.member_epoch == 2 and joined.assignment == ()  # its target is still held by a
    assert cluster.group().members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    revoke = a.beat()
    # a stays at epoch 1 and keeps consuming what it keeps while it revokes the rest.
    assert revoke.member_epoch == 1 and revoke.assignment == (TopicPartitions(T, (0, 1)),)
    acked = a.beat()  # owned partitions now without the revoked ones
    assert acked.member_epoch == 2 and acked.assignment is None
    assert b.beat().assignment == (TopicPartitions(T, (2, 3)),)
    assert cluster.group().state is ConsumerGroupState.STABLE


def test_leave_bumps_the_epoch_and_frees_the_partitions() -> None:
    cluster = Cluster(t=4)
    a, b = two_members(cluster)
    epoch = cluster.group().group_epoch
    left = b.leave()
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -1)
    assert b.member_id not in cluster.group().members
    assert cluster.group().group_epoch == epoch + 1
    assert cluster.group().state is ConsumerGroupState.ASSIGNING  # until the next heartbeat
    assert a.beat().assignment == (TopicPartitions(T, (0, 1, 2, 3)),)
    assert a.leave().error is ErrorCode.NONE
    assert cluster.group().state is ConsumerGroupState.EMPTY


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"group_id": ""}, "GroupId"),
        ({"instance_id": ""}, "InstanceId"),
        ({"rack_id": ""}, "RackId"),
        ({"rebalance_timeout_ms": -1}, "RebalanceTimeoutMs"),
        ({"owned_partitions": None}, "TopicPartitions"),
        ({"owned_partitions": (TopicPartitions(T, (0,)),)}, "TopicPartitions"),
        ({"subscribed_topic_names": None}, "SubscribedTopicNames"),
        ({"subscribed_topic_names": ()}, "SubscribedTopicNames"),
        ({"member_epoch": -3}, "MemberEpoch"),
        ({"member_epoch": -2, "member_id": "x"}, "InstanceId can't be null"),
        ({"member_epoch": 3, "member_id": ""}, "MemberId"),
    ],
)
def test_invalid_requests(overrides: dict, message: str) -> None:
    cluster = Cluster(t=1)
    result = cluster.heartbeat(Client(cluster).request(**overrides))
    assert result.error is ErrorCode.INVALID_REQUEST
    assert message in (result.error_message or "")
    assert result.records == () and cluster.groups.groups == {}


def test_unsupported_assignor_and_invalid_regex() -> None:
    cluster = Cluster(t=1)
    assert Client(cluster, assignor="sticky").beat().error is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert Client(cluster, topics=(), regex="t(").beat().error is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert cluster.groups.groups == {}


def test_fencing_wrong_epochs_and_unknown_members() -> None:
    cluster = Cluster(t=2)
    a, b = two_members(cluster)
    group = cluster.group()
    before = (group.group_epoch, dict(group.members))
    # Sent straight to the coordinator: a real client would abandon its partitions on these errors.
    for overrides, error in [
        ({"member_epoch": a.epoch + 1}, ErrorCode.FENCED_MEMBER_EPOCH),
        (
            {"member_epoch": a.epoch - 1, "owned_partitions": (TopicPartitions(T, (0, 1)),)},
            ErrorCode.FENCED_MEMBER_EPOCH,
        ),
        ({"member_id": "nobody"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"member_id": "nobody", "member_epoch": -1}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"group_id": "other"}, ErrorCode.GROUP_ID_NOT_FOUND),
    ]:
        result = cluster.heartbeat(a.request(**overrides))
        assert (result.error, result.records) == (error, ()), overrides
    assert (group.group_epoch, group.members) == before  # the group unharmed
    assert a.beat().error is ErrorCode.NONE


def test_previous_epoch_accepted_only_with_owned_partitions_within_the_assignment() -> None:
    cluster = Cluster(t=4)
    a = Client(cluster)
    a.join()
    b = Client(cluster)
    b.join()
    a.beat()
    a.beat()  # a moved from epoch 1 to epoch 2 owning partitions 0 and 1
    member = cluster.group().members[a.member_id]
    assert (member.member_epoch, member.previous_member_epoch) == (2, 1)
    # The response with epoch 2 was lost: epoch 1 with a subset of the assignment is fine...
    assert a.beat(member_epoch=1, owned_partitions=(TopicPartitions(T, (0,)),)).error is ErrorCode.NONE
    # ...but not while claiming partitions it no longer has, nor without saying what it owns.
    assert a.beat(member_epoch=1, owned_partitions=(TopicPartitions(T, (3,)),)).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert a.beat(member_epoch=1, owned_partitions=None).error is ErrorCode.FENCED_MEMBER_EPOCH


def test_static_member_leaves_with_minus_two_and_its_instance_rejoins() -> None:
    cluster = Cluster(t=4)
    a, b = Client(cluster, instance_id="i-a"), Client(cluster, instance_id="i-b")
    a.join()
    b.join()
    converge([a, b])
    owned, group_epoch = a.partitions(), cluster.group().group_epoch
    left = a.leave(epoch=-2)
    assert (left.error, left.member_epoch) == (ErrorCode.NONE, -2)
    assert cluster.group().members[a.member_id].member_epoch == -2  # still in the group, partitions kept
    assert cluster.group().group_epoch == group_epoch
    # Another process with the same instance id while the first is still active is refused...
    assert Client(cluster, instance_id="i-b").beat().error is ErrorCode.UNRELEASED_INSTANCE_ID
    # ...but the restarted instance takes its place under a new member id, with the same partitions.
    restarted = Client(cluster, instance_id="i-a")
    result = restarted.join()
    assert result.member_id != a.member_id and a.member_id not in cluster.group().members
    assert restarted.partitions() == owned
    assert result.member_epoch == group_epoch  # no rebalance
    assert cluster.group().state is ConsumerGroupState.STABLE


def test_static_member_errors() -> None:
    cluster = Cluster(t=2)
    a = Client(cluster, instance_id="i-a")
    a.join()
    assert a.beat(instance_id="i-x").error is ErrorCode.UNKNOWN_MEMBER_ID
    assert a.beat(member_id="impostor").error is ErrorCode.FENCED_INSTANCE_ID
    assert a.beat(member_id="impostor", member_epoch=-2).error is ErrorCode.FENCED_INSTANCE_ID
    # A static member leaving with -1 leaves for good.
    assert a.leave(epoch=-1).error is ErrorCode.NONE
    assert cluster.group().members == {}


def test_group_max_size() -> None:
    cluster = Cluster(ConsumerGroupConfig(max_size=1), t=2)
    Client(cluster).join()
    assert Client(cluster).beat().error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_subscription_change_bumps_the_epoch_and_moves_partitions() -> None:
    cluster = Cluster(t=2, u=2)
    a = Client(cluster, topics=("t",))
    a.join()
    epoch = cluster.group().group_epoch
    result = a.beat(subscribed_topic_names=("u",))
    assert cluster.group().group_epoch == epoch + 1
    assert result.assignment == ()  # t revoked first
    assert a.beat().assignment == (TopicPartitions(topic_id("u"), (0, 1)),)


def test_server_assignor_choice() -> None:
    cluster = Cluster(t=4)
    a = Client(cluster, assignor="range")
    a.join()
    assert cluster.groups.describe(GROUP, cluster.topics).assignor_name == "range"
    cluster2 = Cluster(t=4)
    Client(cluster2).join()
    assert cluster2.groups.describe(GROUP, cluster2.topics).assignor_name == "uniform"  # the default


def test_a_member_waiting_for_partitions_and_the_first_giver_heartbeat_sooner() -> None:
    cluster = Cluster(t=5)  # heartbeats every 5 s; 50 ms while waiting, 625 ms for the first giver
    a, b, c = Client(cluster), Client(cluster), Client(cluster)
    # Alone, a holds everything: a new member would take from it.
    assert a.join().heartbeat_interval_ms == 625
    assert b.join().heartbeat_interval_ms == 50  # its partitions are a's until a heartbeats
    assert b.beat().heartbeat_interval_ms == 50
    a.beat()  # told to revoke two
    a.beat()  # the acknowledgement
    assert b.beat().assignment is not None and b.last.heartbeat_interval_ms in (625, 5_000)
    # Of a (3 partitions) and b (2), a is the one a third member would take from.
    first, other = (a, b) if len(a.partitions()) == 3 else (b, a)
    assert cluster.group().first_giver() == first.member_id
    assert first.beat().heartbeat_interval_ms == 625 and other.beat().heartbeat_interval_ms == 5_000
    c.join()
    assert cluster.group().target[first.member_id] != {T: frozenset(p for _, p in first.partitions())}
    assert cluster.group().target[other.member_id] == {T: frozenset(p for _, p in other.partitions())}
