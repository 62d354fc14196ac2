"""One group's state: members, generation, chosen protocol and committed offsets.

Mirrors Kafka's `GroupMetadata` / `MemberMetadata`: pure bookkeeping and the state
machine's legal transitions. Timers and responses to waiting requests are the
coordinator's business; a member only holds the futures its pending JoinGroup and
SyncGroup requests wait on.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Sequence

from loglake.errors import ErrorCode
from loglake.groups.api import GroupState, JoinResult, OffsetAndMetadata, SyncResult, TopicPartition
from loglake.groups.assignors import CONSUMER_PROTOCOL_TYPE, decode_subscription

# Kafka's GroupState.validPreviousStates.
_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


def vote_protocol(preferences: Sequence[Sequence[str]]) -> str:
    """Kafka's vote over the members' protocol names (each in preference order): each member
    votes for its preferred protocol among those every member supports.

    Kafka breaks a tie arbitrarily; here the protocol voted for first (in member order) wins.
    Raises ValueError when no protocol is common to all.
    """
    candidates = set(preferences[0]).intersection(*preferences[1:]) if preferences else set()
    if not candidates:
        raise ValueError("no protocol is supported by every member")
    votes = Counter(next(name for name in names if name in candidates) for names in preferences)
    return max(votes, key=votes.__getitem__)


@dataclass(eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Joined during the current rebalance: expires after new.member.join.timeout even
    # while its JoinGroup waits (KIP-394), unlike members that were already in the group.
    is_new: bool = False
    awaiting_join: asyncio.Future[JoinResult] | None = None
    awaiting_sync: asyncio.Future[SyncResult] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols with the same metadata, in the same order."""
        return list(protocols) == self.supported_protocols


@dataclass(eq=False)
class GroupMetadata:
    group_id: str
    state: GroupState
    current_state_timestamp: int | None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)  # insertion (join) order
    # group.instance.id -> member id of the static members (KIP-345).
    static_members: dict[str, str] = field(default_factory=dict)
    # Ids handed out with MEMBER_ID_REQUIRED, not yet used to rejoin.
    pending_members: set[str] = field(default_factory=set)
    # Members of this generation that have not sent SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    supported_protocols: Counter[str] = field(default_factory=Counter)
    # Set when a member joins during the initial delayed join, which then waits longer.
    new_member_added: bool = False
    # Topics the consumer members subscribe to, when their metadata could be read.
    subscribed_topics: frozenset[str] | None = None
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # Plain offset commits being appended: write id -> their partitions. It keeps their
    # offsets from expiring and the group from retiring, and a stable OffsetFetch waits on it.
    commits_in_flight: dict[int, frozenset[TopicPartition]] = field(default_factory=dict)
    # Timers, owned by the coordinator.
    join_timer: asyncio.TimerHandle | None = None
    join_is_initial: bool = False
    sync_timer: asyncio.TimerHandle | None = None
    pending_member_timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.current_state_timestamp = now_ms

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocol_names: Sequence[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[name] == len(self.members) for name in protocol_names
        )

    def add(self, member: MemberMetadata, awaiting_join: asyncio.Future[JoinResult] | None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"group {self.group_id}: instance {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.awaiting_join = awaiting_join
        self.pending_members.discard(member.member_id)

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        awaiting_join: asyncio.Future[JoinResult] | None,
    ) -> asyncio.Future[JoinResult] | None:
        """Rejoin with (maybe) new protocols; returns a superseded pending JoinGroup, if any."""
        self.supported_protocols.subtract(member.protocol_names())
        member.supported_protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        superseded, member.awaiting_join = member.awaiting_join, awaiting_join
        return superseded

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def replace_static_member(self, member: MemberMetadata, new_member_id: str) -> str:
        """Give a static member a new member id (its instance restarted), keeping everything
        else; returns the old id. Leadership follows the member."""
        old_member_id = member.member_id
        del self.members[old_member_id]
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_member_id
        # The old id can no longer sync; leaving it pending would rebalance at the sync timeout.
        self.pending_sync_members.discard(old_member_id)
        return old_member_id

    def elect_joined_leader(self) -> bool:
        """Kafka's maybeElectNewJoinedLeader: if the leader has not rejoined, hand leadership
        to a member that has. False when there is no leader or nobody rejoined."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None:
            return False
        if leader.awaiting_join is not None:
            return True
        joined = next((m.member_id for m in self.members.values() if m.awaiting_join is not None), None)
        if joined is None:
            return False
        self.leader_id = joined
        return True

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a member subscribes to `topic`; True when that cannot be known, to be safe."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def member_error(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateCurrentMember: with an instance id, it must map to `member_id`
        (FENCED_INSTANCE_ID when another member now holds it); without, the member must exist."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            return ErrorCode.FENCED_INSTANCE_ID if current != member_id else None
        return None if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def validate_offset_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit: who may commit to this group now."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return None  # an admin client or a consumer without group management
        if generation_id >= 0 or member_id or group_instance_id is not None:
            member_error = self.member_error(member_id, group_instance_id)
            if member_error is not None:
                return member_error
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            if self.state is GroupState.COMPLETING_REBALANCE:
                # The member has its JoinGroup answer but not its assignment yet.
                return ErrorCode.REBALANCE_IN_PROGRESS
            return None
        return ErrorCode.UNKNOWN_MEMBER_ID  # once a group has members, only they commit

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def select_protocol(self) -> str:
        return vote_protocol([m.protocol_names() for m in self.members.values()])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.subscribed_topics = self.compute_subscribed_topics()
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        try:
            return frozenset(
                t for m in self.members.values() for t in decode_subscription(m.metadata(self.protocol_name)).topics
            )
        except ValueError:
            return None  # a member's metadata is not a consumer subscription: don't guess

    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.commits_in_flight)

    def has_commit_in_flight(self, tp: TopicPartition) -> bool:
        return any(tp in written for written in self.commits_in_flight.values())

    def take_offsets_of(self, previous: GroupMetadata) -> None:
        """This group replaces `previous` (a conversion): the very same offsets and commits
        in flight, so that a commit being written lands here too."""
        self.offsets, self.commits_in_flight = previous.offsets, previous.commits_in_flight

    def remove_expired_offsets(
        self, now_ms: int, retention_ms: int, consumer_group_topics: Collection[str] | None = None
    ) -> list[TopicPartition]:
        """Drop and return the offsets past retention, by Kafka's rules (KIP-211).

        Empty group: retention counts from when the group became Empty. Stable consumer
        group: offsets of topics no member subscribes to expire by their commit time.
        Group used only for commits (no protocol type): by commit time. An offset with a
        commit still in flight never expires; one from a v1 record with an explicit
        expire timestamp expires then.

        The offsets of a consumer-protocol (KIP-848) group, which this group only holds
        (`consumer_group_topics`: the topics its members subscribe to, none when it is
        Empty): those of the other topics expire by their commit time, as Kafka's
        ConsumerGroup has them expire.
        """
        kept_topics: frozenset[str] = frozenset()
        emptied_at: int | None = None  # counts from here instead of the commit time
        if consumer_group_topics is not None:
            kept_topics = frozenset(consumer_group_topics)
        elif self.protocol_type is not None and self.state is GroupState.EMPTY:
            emptied_at = self.current_state_timestamp
        elif (
            self.protocol_type == CONSUMER_PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.state is GroupState.STABLE
        ):
            kept_topics = self.subscribed_topics
        elif self.protocol_type is not None:
            return []  # rebalancing, or members whose subscriptions we cannot read

        def is_expired(tp: TopicPartition, o: OffsetAndMetadata) -> bool:
            if tp.topic in kept_topics or self.has_commit_in_flight(tp):
                return False
            if o.expire_timestamp is not None:
                return now_ms >= o.expire_timestamp
            return now_ms - (o.commit_timestamp if emptied_at is None else emptied_at) >= retention_ms

        expired = [tp for tp, o in self.offsets.items() if is_expired(tp, o)]
        for tp in expired:
            del self.offsets[tp]
        return expired

    def remove_all_offsets(self) -> list[TopicPartition]:
        return self.remove_offsets(list(self.offsets))

    def remove_offsets(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """Drop the offsets of `partitions`; returns those that were committed."""
        return [tp for tp in partitions if self.offsets.pop(tp, None) is not None]
