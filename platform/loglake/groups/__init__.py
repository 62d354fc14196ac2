"""Kafka's group coordinator (classic protocol), independent of any transport.

The broker's Kafka protocol handlers (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups) and its REST-Proxy
style HTTP consumers call the same `GroupCoordinator`, whose async methods answer plain
dataclasses carrying an `ErrorCode`:

    coordinator = GroupCoordinator(GroupConfig.from_properties(props), offsets_log)
    await coordinator.load_partition(p)          # for each __consumer_offsets partition led here
    join = await coordinator.join_group(group_id, "", client_id, host, 10000, 30000,
                                        "consumer", [("range", subscription_bytes)])
    ...

Modules:
    api         request parts and results (JoinResult, SyncResult, OffsetFetchResult, ...)
    coordinator GroupCoordinator, GroupConfig, the OffsetsLog persistence seam
    group       one group's state machine (GroupMetadata / MemberMetadata)
    records     __consumer_offsets key/value formats
    assignors   consumer protocol bytes, range and roundrobin assignors
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
from loglake.groups.coordinator import GroupConfig, GroupCoordinator, OffsetsLog, java_string_hash
from loglake.groups.records import OFFSETS_TOPIC

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
