"""Server-side assignors of consumer-protocol (KIP-848) groups: `uniform` and `range`.

The coordinator calls one of `SERVER_ASSIGNORS[name].assign(members, topics, previous)`
whenever the group epoch moves past the assignment epoch:

    members:  member id -> AssignmentSpec (instance id, subscribed topic ids)
    topics:   topic id -> partition count, for the subscribed topics that exist
    previous: member id -> the current target assignment (what stickiness keeps)

and gets member id -> {topic id: partitions} for every member (empty dicts included).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from loglake.groups.consumer_records import Partitions


@dataclass(frozen=True)
class AssignmentSpec:
    instance_id: str | None
    topic_ids: frozenset[uuid.UUID]


class ServerAssignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, AssignmentSpec], topics: Mapping[uuid.UUID, int], previous: Mapping[str, Partitions]
    ) -> dict[str, Partitions]: ...


def _freeze(assignment: dict[uuid.UUID, set[int]]) -> Partitions:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


class RangeAssignor:
    """Kafka's server-side range: per topic, contiguous ranges handed out in member order
    (static members by instance id first, then the others by member id); the first
    `partitions % members` of each topic's subscribers get one partition more. Members
    subscribed to the same topics thus get the same partition numbers of each (co-partitioning)."""

    name = "range"

    def assign(
        self, members: Mapping[str, AssignmentSpec], topics: Mapping[uuid.UUID, int], previous: Mapping[str, Partitions]
    ) -> dict[str, Partitions]:
        order = sorted(members, key=lambda m: (0, members[m].instance_id, "") if members[m].instance_id else (1, "", m))
        subscribers: dict[uuid.UUID, int] = {}
        for m in order:
            for t in members[m].topic_ids & topics.keys():
                subscribers[t] = subscribers.get(t, 0) + 1
        next_start = dict.fromkeys(subscribers, 0)
        served = dict.fromkeys(subscribers, 0)  # subscribers of the topic already given a range
        out: dict[str, Partitions] = {}
        for m in order:
            assignment: dict[uuid.UUID, set[int]] = {}
            for t in members[m].topic_ids & topics.keys():
                quota, extra = divmod(topics[t], subscribers[t])
                size = quota + (1 if served[t] < extra else 0)
                served[t] += 1
                start = next_start[t]
                next_start[t] = start + size
                assignment[t] = set(range(start, start + size))
            out[m] = _freeze(assignment)
        return out


class UniformAssignor:
    """Balanced and sticky (what Kafka's uniform assignor promises, our own algorithm):

    1. every member keeps the partitions of its previous target it is still subscribed to;
    2. unowned partitions go, the ones with the fewest possible owners first, to the least
       loaded subscribed member;
    3. while a member has at least two more partitions than some other member subscribed
       to one of its topics, one such partition moves, always from the most loaded member.

    With identical subscriptions this ends with member loads differing by at most one and
    moves only what the balance needs; with different subscriptions it balances as far as
    the subscriptions allow.
    """

    name = "uniform"

    def assign(
        self, members: Mapping[str, AssignmentSpec], topics: Mapping[uuid.UUID, int], previous: Mapping[str, Partitions]
    ) -> dict[str, Partitions]:
        assignment: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        owner: dict[tuple[uuid.UUID, int], str] = {}
        for m in sorted(members):
            for t, ps in previous.get(m, {}).items():
                if t not in members[m].topic_ids or t not in topics:
                    continue
                for p in ps:
                    if p < topics[t] and (t, p) not in owner:
                        owner[(t, p)] = m
                        assignment[m].setdefault(t, set()).add(p)
        load = {m: sum(len(ps) for ps in assignment[m].values()) for m in members}
        candidates = {t: sorted(m for m in members if t in members[m].topic_ids) for t in topics}

        unowned = [(t, p) for t in sorted(topics) for p in range(topics[t]) if (t, p) not in owner and candidates[t]]
        unowned.sort(key=lambda tp: len(candidates[tp[0]]))
        for t, p in unowned:
            m = min(candidates[t], key=lambda c: (load[c], c))
            owner[(t, p)] = m
            assignment[m].setdefault(t, set()).add(p)
            load[m] += 1

        # One partition at a time from the most loaded member that can give one away, so
        # that every member above the average gives, not just the first one looked at.
        while (move := self._next_move(members, assignment, candidates, load)) is not None:
            giver, t, taker = move
            p = max(assignment[giver][t])
            assignment[giver][t].discard(p)
            assignment[taker].setdefault(t, set()).add(p)
            load[giver] -= 1
            load[taker] += 1
        return {m: _freeze(a) for m, a in assignment.items()}

    @staticmethod
    def _next_move(
        members: Mapping[str, AssignmentSpec],
        assignment: dict[str, dict[uuid.UUID, set[int]]],
        candidates: dict[uuid.UUID, list[str]],
        load: dict[str, int],
    ) -> tuple[str, uuid.UUID, str] | None:
        for m in sorted(members, key=lambda c: (-load[c], c)):
            for t in sorted(assignment[m]):
                if assignment[m][t]:
                    taker = min(candidates[t], key=lambda c: (load[c], c))
                    if load[m] - load[taker] >= 2:
                        return m, t, taker
        return None


SERVER_ASSIGNORS: dict[str, ServerAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
