"""The plain data the group coordinator takes and answers, one field per protocol field.

Each result carries `error` as an `ErrorCode`, as the matching Kafka response does; the
Kafka protocol handlers copy fields across, the HTTP consumer API reads them directly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from loglake.errors import ErrorCode

# ListGroups v5's group types: a group runs the classic protocol or KIP-848's consumer protocol.
CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


class GroupState(str, enum.Enum):
    """Kafka's classic group states; the value is the name DescribeGroups/ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class JoinGroupMember:
    """One member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """JoinGroup response. `members` is filled for the leader only."""

    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    # JoinGroup v9: a static leader rejoining a Stable group keeps the current assignment.
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class MemberIdentity:
    """A member named in a LeaveGroup request (v0-v2 send exactly one)."""

    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class MemberLeaveResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True)
class LeaveGroupResult:
    """LeaveGroup response. A v0-v2 handler answers `error`, or else its one member's error."""

    error: ErrorCode
    members: tuple[MemberLeaveResult, ...] = ()


@dataclass(frozen=True)
class OffsetCommitData:
    """One partition of an OffsetCommit request (a null metadata is stored as "").

    `commit_timestamp` is v1's explicit one (-1: now); `expire_timestamp` comes from the
    retention time of v2-v4 (None: the broker's offsets.retention.ms applies).
    """

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset as the coordinator keeps it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None  # only from old (version 1) records


@dataclass(frozen=True)
class PartitionOffset:
    """One partition of an OffsetFetch response; offset -1 when nothing is committed."""

    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: dict[TopicPartition, PartitionOffset] = field(default_factory=dict)


@dataclass(frozen=True)
class OffsetDeleteResult:
    """OffsetDelete: a group-level error (then no partitions), or one error per partition."""

    error: ErrorCode
    partitions: dict[TopicPartition, ErrorCode] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupOverview:
    """`state` is a classic group's GroupState or a consumer group's ConsumerGroupState."""

    group_id: str
    protocol_type: str
    state: enum.Enum
    group_type: str = CLASSIC_GROUP_TYPE


@dataclass(frozen=True)
class ListGroupsResult:
    error: ErrorCode
    groups: tuple[GroupOverview, ...] = ()


@dataclass(frozen=True)
class MemberDescription:
    """Metadata and assignment are only filled while the group is Stable, as in Kafka."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups for one group: an unknown group is reported "Dead" with no error, and
    a failed lookup (e.g. NOT_COORDINATOR) has an empty state, as Kafka answers."""

    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberDescription, ...] = ()
