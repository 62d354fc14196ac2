"""ConsumerGroupDescribe data and the OffsetCommit / OffsetFetch member epoch checks."""

from __future__ import annotations

from consumer_group_support import GROUP, Client, Cluster, converge, topic_id

from loglake.errors import ErrorCode
from loglake.groups.consumer_group import TopicPartitions, validate_offset_commit, validate_offset_fetch

T = topic_id("t")


def test_describe_shows_epochs_assignor_and_current_vs_target() -> None:
    cluster = Cluster(t=4)
    a, b = Client(cluster, instance_id="i-a"), Client(cluster, topics=(), regex="t.*")
    a.join()
    b.join()
    d = cluster.groups.describe(GROUP, cluster.topics)
    assert (d.error, d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        ErrorCode.NONE,
        "Reconciling",
        2,
        2,
        "uniform",
    )
    by_id = {m.member_id: m for m in d.members}
    ma, mb = by_id[a.member_id], by_id[b.member_id]
    assert (ma.instance_id, ma.member_epoch, ma.client_id, ma.subscribed_topic_names) == ("i-a", 1, "client", ("t",))
    assert ma.assignment == (TopicPartitions(T, (0, 1, 2, 3)),)  # not yet revoked
    assert ma.target_assignment == (TopicPartitions(T, (0, 1)),)
    assert (mb.subscribed_topic_regex, mb.assignment, mb.target_assignment) == (
        "t.*",
        (),
        (TopicPartitions(T, (2, 3)),),
    )
    assert ma.topic_names == {T: "t"}
    converge([a, b])
    assert cluster.groups.describe(GROUP, cluster.topics).state == "Stable"
    assert cluster.groups.describe("nope", cluster.topics).error is ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_commit_checks_the_member_epoch() -> None:
    cluster = Cluster(t=2)
    a = Client(cluster)
    a.join()
    group = cluster.group()
    assert validate_offset_commit(group, a.member_id, a.epoch, False, 9) is ErrorCode.NONE
    assert validate_offset_commit(group, a.member_id, a.epoch - 1, False, 9) is ErrorCode.STALE_MEMBER_EPOCH
    assert validate_offset_commit(group, a.member_id, a.epoch + 1, False, 9) is ErrorCode.STALE_MEMBER_EPOCH
    assert validate_offset_commit(group, "nobody", a.epoch, False, 9) is ErrorCode.UNKNOWN_MEMBER_ID
    # A consumer-protocol member must use OffsetCommit v9+; TxnOffsetCommit carries the epoch at any version.
    assert validate_offset_commit(group, a.member_id, a.epoch, False, 8) is ErrorCode.UNSUPPORTED_VERSION
    assert validate_offset_commit(group, a.member_id, a.epoch, True, 3) is ErrorCode.NONE
    # The admin client (epoch -1) may commit only while the group is empty.
    assert validate_offset_commit(group, "", -1, False, 9) is ErrorCode.UNKNOWN_MEMBER_ID
    a.leave()
    assert validate_offset_commit(group, "", -1, False, 9) is ErrorCode.NONE
    # No such group: -1 creates a simple group; an epoch cannot exist there.
    assert validate_offset_commit(None, "", -1, False, 9) is ErrorCode.NONE
    assert validate_offset_commit(None, "m", 3, False, 9) is ErrorCode.GROUP_ID_NOT_FOUND
    assert validate_offset_commit(None, "m", 3, False, 8) is ErrorCode.ILLEGAL_GENERATION
    assert cluster.groups.validate_offset_commit(GROUP, "m", 3, False, 9) is ErrorCode.UNKNOWN_MEMBER_ID


def test_offset_fetch_checks_the_member_epoch() -> None:
    cluster = Cluster(t=2)
    a = Client(cluster)
    a.join()
    group = cluster.group()
    assert validate_offset_fetch(group, None, -1) is ErrorCode.NONE
    assert validate_offset_fetch(group, a.member_id, a.epoch) is ErrorCode.NONE
    assert validate_offset_fetch(group, a.member_id, a.epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert validate_offset_fetch(group, "nobody", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert validate_offset_fetch(None, "nobody", 1) is ErrorCode.NONE  # no offsets, no error
