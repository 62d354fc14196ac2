"""One step of a consumer group member towards its target assignment: Kafka's
CurrentAssignmentBuilder (revoke first, assign only partitions no other member holds)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Mapping

from loglake.groups.consumer_group import ConsumerGroupMember, MemberState, TopicPartitions
from loglake.groups.consumer_records import Partitions


def _owns_any(owned: tuple[TopicPartitions, ...] | None, parts: Partitions) -> bool:
    """Whether the member still reports any of `parts`; not reporting at all counts as owning."""
    if owned is None:
        return True
    return any(set(tp.partitions) & parts.get(tp.topic_id, frozenset()) for tp in owned)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Partitions,
    partition_epochs: Mapping[tuple[uuid.UUID, int], int],
    owned: tuple[TopicPartitions, ...] | None,
) -> ConsumerGroupMember:
    """One step of Kafka's CurrentAssignmentBuilder: the member's next current assignment."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epochs, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # it has not acknowledged the revocation yet
        # Revocation acked: the member moves on (its epoch advances) towards the latest target.
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epochs, owned)
    return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epochs, owned)


def _next_assignment(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Partitions,
    partition_epochs: Mapping[tuple[uuid.UUID, int], int],
    owned: tuple[TopicPartitions, ...] | None,
) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, frozenset())
        have = member.assigned.get(t, frozenset())
        keep = have & want
        # Another member still holding a partition (any epoch) blocks handing it over.
        free = frozenset(p for p in want - keep if (t, p) not in partition_epochs)
        unreleased = unreleased or len(free) < len(want - keep)
        for parts, value in ((assigned, keep), (revoke, have - keep), (to_assign, free)):
            if value:
                parts[t] = value
    if revoke and _owns_any(owned, revoke):
        # Revoke first, staying in the current epoch: it keeps consuming what it keeps.
        return _with_epoch(member, member_epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoke)
    for t, ps in to_assign.items():
        assigned[t] = assigned.get(t, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state, assigned, {})


def _with_epoch(
    member: ConsumerGroupMember, epoch: int, state: MemberState, assigned: Partitions, pending: Partitions
) -> ConsumerGroupMember:
    # Kafka's updateMemberEpoch: the previous epoch only moves when the epoch does.
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_member_epoch
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        assigned=assigned,
        pending_revocation=pending,
    )
