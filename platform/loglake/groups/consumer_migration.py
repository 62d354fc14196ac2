"""Online migration between the group protocols (Kafka 4's, group.consumer.migration.policy),
as conversions between a classic group and a consumer group, and between the classic
protocol's named partitions and a consumer group's partitions by topic id.

`upgrade_records` is Kafka's ConsumerGroup.fromClassicGroup with its records; the downgrade
(`downgrade_protocol`, `downgraded_group_record`) is ClassicGroup.fromConsumerGroup with its
group metadata record. `ConsumerGroups` writes them around its own tombstones.
"""

from __future__ import annotations

import uuid
from typing import Iterable

from loglake.groups import records as classic_records
from loglake.groups.api import TopicPartition
from loglake.groups.assignors import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from loglake.groups.consumer_group import (
    ClassicGroupSnapshot,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupMember,
    MigrationPolicy,
    Record,
    TopicSnapshot,
    consumer_record,
    current_assignment_value,
    member_metadata_value,
)
from loglake.groups.consumer_records import (
    ClassicMemberMetadata,
    GroupMetadataValue,
    Partitions,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
)
from loglake.groups.group import vote_protocol


class UpgradeRefused(Exception):
    """The classic group may not become a consumer group (Kafka answers GROUP_ID_NOT_FOUND)."""


def partitions_by_id(partitions: Iterable[TopicPartition], topics: TopicSnapshot) -> Partitions:
    """Named partitions (a classic Subscription or Assignment) by topic id; unknown topics are dropped."""
    out: dict[uuid.UUID, set[int]] = {}
    for tp in partitions:
        if tp.topic in topics:
            out.setdefault(topics[tp.topic][0], set()).add(tp.partition)
    return {t: frozenset(ps) for t, ps in out.items()}


def classic_assignment(parts: Partitions, topics: TopicSnapshot, metadata: bytes) -> bytes:
    """`parts` as the ConsumerProtocol Assignment a classic member gets, in the version of its
    subscription (`metadata`), as Kafka answers; topics not in `topics` are left out."""
    names = {topic_id: name for name, (topic_id, _) in topics.items()}
    version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
    named = tuple(TopicPartition(names[t], p) for t in sorted(parts) if t in names for p in sorted(parts[t]))
    return encode_assignment(Assignment(named), version=min(max(version, 0), 3))


def upgrade_records(classic: ClassicGroupSnapshot, topics: TopicSnapshot, config: ConsumerGroupConfig) -> list[Record]:
    """Kafka's convertToConsumerGroup: the records of a consumer group holding `classic`'s
    members, each a classic member, Stable at the classic generation (the group epoch and
    assignment epoch too), owning and targeted its last classic assignment. Raises
    UpgradeRefused when the policy or the group does not allow the upgrade."""
    gid = classic.group_id

    def refused(why: str) -> UpgradeRefused:
        return UpgradeRefused(f"Cannot upgrade classic group {gid} to consumer group {why}.")

    if not config.migration_policy.upgrades:
        raise refused("because online upgrade is disabled")
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise refused("because the group does not use the consumer embedded protocol")
    if len(classic.members) > config.max_size:
        raise refused("because the group size exceeds the consumer group maximum size")
    if classic.protocol_name is None:
        raise refused("before its first rebalance completed")
    epoch = classic.generation
    members = []
    try:
        for m in classic.members:
            subscription = decode_subscription(dict(m.protocols)[classic.protocol_name])
            assigned = partitions_by_id(decode_assignment(m.assignment).partitions, topics) if m.assignment else {}
            members.append(
                ConsumerGroupMember(
                    m.member_id,
                    instance_id=m.instance_id,
                    rack_id=subscription.rack_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=subscription.topics,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    member_epoch=epoch,
                    previous_member_epoch=epoch,
                    assigned=assigned,
                    classic=ClassicMemberMetadata(m.session_timeout_ms, m.protocols),
                )
            )
    except (KeyError, ValueError):
        raise refused("because the embedded consumer protocol is malformed") from None
    # Kafka's createConsumerGroupRecords order.
    records = [consumer_record(gid, member_metadata_value(m), m.member_id) for m in members]
    records.append(consumer_record(gid, GroupMetadataValue(epoch)))
    records += [consumer_record(gid, TargetAssignmentMemberValue(m.assigned), m.member_id) for m in members]
    records.append(consumer_record(gid, TargetAssignmentMetadataValue(epoch)))
    records += [consumer_record(gid, current_assignment_value(m), m.member_id) for m in members]
    return records


def downgrade_protocol(group: ConsumerGroup, leaving_id: str, policy: MigrationPolicy) -> str | None:
    """The protocol of the classic group `group` becomes when `leaving_id` leaves, or None
    when it stays a consumer group. Kafka downgrades when a consumer-protocol member leaves
    (or is fenced) and only classic members remain, if the policy allows it."""
    if not policy.downgrades or group.members[leaving_id].classic is not None:
        return None
    rest = [m.classic for mid, m in group.members.items() if mid != leaving_id]
    if not rest or any(c is None for c in rest):
        return None
    try:
        return vote_protocol([[name for name, _ in c.protocols] for c in rest if c is not None])
    except ValueError:
        return None  # no protocol common to all (they joined with changing protocols)


def downgraded_group_record(
    group: ConsumerGroup, leaving_id: str, protocol: str, topics: TopicSnapshot, now_ms: int
) -> Record:
    """Kafka's convertToClassicGroup, its record: the group metadata record of the classic
    group of the members but `leaving_id` (all classic members), Stable at the group epoch,
    each assigned its target assignment."""
    members = []
    for m in group.members.values():
        if m.member_id != leaving_id and m.classic is not None:
            metadata = dict(m.classic.protocols)[protocol]
            assignment = classic_assignment(group.target.get(m.member_id, {}), topics, metadata)
            members.append(
                classic_records.MemberMetadataValue(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.classic.session_timeout_ms,
                    metadata,
                    assignment,
                )
            )
    value = classic_records.GroupMetadataValue(
        CONSUMER_PROTOCOL_TYPE, group.group_epoch, protocol, members[0].member_id, now_ms, tuple(members)
    )
    return (
        classic_records.encode_key(classic_records.GroupMetadataKey(group.group_id)),
        classic_records.encode_group_metadata_value(value),
    )
