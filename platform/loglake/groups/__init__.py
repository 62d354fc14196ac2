"""Kafka's group coordinator (classic and KIP-848 consumer protocols), independent of any transport.

The broker's Kafka protocol handlers (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups,
ConsumerGroupHeartbeat, ConsumerGroupDescribe) and its REST-Proxy
style HTTP consumers call the same `GroupCoordinator`, whose async methods answer plain
dataclasses carrying an `ErrorCode`:

    coordinator = GroupCoordinator(GroupConfig.from_properties(props), offsets_log)
    await coordinator.start()                    # periodic offset expiry
    await coordinator.load_partition(p)          # for each __consumer_offsets partition led here

A member driven server-side (an HTTP consumer instance) joins, assigns if it leads, syncs,
then heartbeats every few seconds and rejoins when told REBALANCE_IN_PROGRESS:

    sub = encode_subscription(Subscription(("orders",)))
    join = await coordinator.join_group(group_id, "", client_id, host, 10_000, 30_000,
                                        CONSUMER_PROTOCOL_TYPE, [("range", sub)],
                                        require_known_member_id=False)
    assignments = {}
    if join.member_id == join.leader:
        assignments = assign_group(join.protocol_name, join.members, {"orders": 12})
    synced = await coordinator.sync_group(group_id, join.generation_id, join.member_id, assignments)
    partitions = decode_assignment(synced.assignment).partitions
    error = await coordinator.heartbeat(group_id, join.member_id, join.generation_id)

Modules:
    coordinator       GroupCoordinator, the façade the broker calls (loading, routing, admin)
    classic_manager   classic membership: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, rebalances
    offset_manager    OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, offset expiry
    consumer_manager  the KIP-848 groups of the loaded partitions: their log writes and timers
    config            GroupConfig
    runtime           the OffsetsLog seam as the components write it, background tasks
    api               request parts and results (JoinResult, SyncResult, OffsetFetchResult, ...)
    group             one classic group's state (GroupMetadata / MemberMetadata)
    records           __consumer_offsets key/value formats
    assignors         consumer protocol bytes, range and roundrobin assignors
    consumer_group    consumer-protocol (KIP-848) groups: the model, offset commit checks
    consumer_groups   their ConsumerGroupHeartbeat state machine, classic members, timers
    consumer_reconciliation  one member's step towards its target (CurrentAssignmentBuilder)
    consumer_migration       classic <-> consumer group conversions
    consumer_records  their __consumer_offsets records (key versions 3-8)
    server_assignors  the server-side uniform and range assignors
"""

from loglake.groups.api import (
    GroupDescription,
    GroupOverview,
    GroupState,
    JoinGroupMember,
    JoinResult,
    LeaveGroupResult,
    ListGroupsResult,
    MemberDescription,
    MemberIdentity,
    MemberLeaveResult,
    OffsetAndMetadata,
    OffsetCommitData,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionOffset,
    SyncResult,
    TopicPartition,
)
from loglake.groups.assignors import (
    ASSIGNORS,
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    assign_group,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from loglake.groups.config import GroupConfig
from loglake.groups.coordinator import GroupCoordinator
from loglake.groups.runtime import OffsetsLog
from loglake.internal_topics import OFFSETS_TOPIC, java_string_hash

__all__ = [
    "ASSIGNORS",
    "CONSUMER_PROTOCOL_TYPE",
    "OFFSETS_TOPIC",
    "Assignment",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupOverview",
    "GroupState",
    "JoinGroupMember",
    "JoinResult",
    "LeaveGroupResult",
    "ListGroupsResult",
    "MemberDescription",
    "MemberIdentity",
    "MemberLeaveResult",
    "OffsetAndMetadata",
    "OffsetCommitData",
    "OffsetDeleteResult",
    "OffsetFetchResult",
    "OffsetsLog",
    "PartitionAssignor",
    "PartitionOffset",
    "RangeAssignor",
    "RoundRobinAssignor",
    "Subscription",
    "SyncResult",
    "TopicPartition",
    "assign_group",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "java_string_hash",
]
