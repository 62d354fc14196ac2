"""Server-side assignors: uniform's balance and stickiness, range's layout as Kafka computes it."""

from __future__ import annotations

import random

from consumer_group_support import topic_id

from loglake.groups.server_assignors import SERVER_ASSIGNORS, AssignmentSpec

T, U = topic_id("t"), topic_id("u")
uniform = SERVER_ASSIGNORS["uniform"]
range_ = SERVER_ASSIGNORS["range"]


def _spec(*topics, instance_id=None) -> AssignmentSpec:
    return AssignmentSpec(instance_id, frozenset(topics))


def _loads(assignment) -> list[int]:
    return sorted(sum(len(ps) for ps in a.values()) for a in assignment.values())


def _all(assignment) -> list[tuple]:
    return sorted((t, p) for a in assignment.values() for t, ps in a.items() for p in ps)


def test_range_layout() -> None:
    members = {"b": _spec(T, U), "a": _spec(T, U), "c": _spec(T, U)}
    out = range_.assign(members, {T: 7, U: 3}, {})
    # Member order a, b, c; 7 = 3 + 2 + 2 and 3 = 1 + 1 + 1: same partition numbers of each topic.
    assert out == {
        "a": {T: frozenset({0, 1, 2}), U: frozenset({0})},
        "b": {T: frozenset({3, 4}), U: frozenset({1})},
        "c": {T: frozenset({5, 6}), U: frozenset({2})},
    }


def test_range_static_members_first_and_heterogeneous_subscriptions() -> None:
    members = {"a": _spec(T), "z": _spec(T, U, instance_id="i-1"), "m": _spec(U)}
    out = range_.assign(members, {T: 3, U: 2}, {})
    assert out == {
        "z": {T: frozenset({0, 1}), U: frozenset({0})},
        "a": {T: frozenset({2})},
        "m": {U: frozenset({1})},
    }
    # More members than partitions: the last ones get nothing.
    assert range_.assign({"a": _spec(T), "b": _spec(T)}, {T: 1}, {})["b"] == {}


def test_uniform_balance_homogeneous() -> None:
    rng = random.Random(7)
    for _ in range(50):
        n_members, counts = rng.randint(1, 9), {T: rng.randint(0, 20), U: rng.randint(0, 20)}
        members = {f"m{i}": _spec(T, U) for i in range(n_members)}
        out = uniform.assign(members, counts, {})
        loads = _loads(out)
        assert loads[-1] - loads[0] <= 1
        assert _all(out) == sorted((t, p) for t, n in counts.items() for p in range(n))


def test_uniform_is_sticky() -> None:
    members = {f"m{i}": _spec(T) for i in range(3)}
    first = uniform.assign(members, {T: 12}, {})
    # A fourth member: each old member gives up exactly one partition and keeps the rest.
    members["m3"] = _spec(T)
    second = uniform.assign(members, {T: 12}, first)
    assert _loads(second) == [3, 3, 3, 3]
    for m in ("m0", "m1", "m2"):
        assert second[m][T] <= first[m][T] and len(first[m][T] - second[m][T]) == 1
    # One leaves: its partitions are spread, nobody else's move.
    del members["m1"]
    previous = {m: a for m, a in second.items() if m != "m1"}
    third = uniform.assign(members, {T: 12}, previous)
    assert _loads(third) == [4, 4, 4]
    for m in members:
        assert previous[m][T] <= third[m][T]


def test_uniform_heterogeneous_respects_subscriptions() -> None:
    members = {"a": _spec(T), "b": _spec(T, U), "c": _spec(U)}
    out = uniform.assign(members, {T: 4, U: 4}, {})
    assert set(out["a"]) <= {T} and set(out["c"]) <= {U}
    assert _loads(out) == [2, 3, 3]
    assert _all(out) == sorted([(T, p) for p in range(4)] + [(U, p) for p in range(4)])


def test_uniform_drops_partitions_of_unsubscribed_or_shrunk_topics() -> None:
    previous = {"a": {T: frozenset({0, 1, 2, 3}), U: frozenset({0})}}
    out = uniform.assign({"a": _spec(T)}, {T: 2, U: 1}, previous)
    assert out == {"a": {T: frozenset({0, 1})}}
