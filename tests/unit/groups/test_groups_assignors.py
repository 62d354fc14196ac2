"""Consumer protocol bytes (cross-checked with kafka-python) and the range / roundrobin assignors
against the examples of Kafka's own Javadoc."""

from __future__ import annotations

import pytest

from loglake.groups import (
    Assignment,
    JoinGroupMember,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    TopicPartition,
    assign_group,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def tps(*names: str) -> list[TopicPartition]:
    """tps("t0p1", "t1p0") -> [TopicPartition("t0", 1), TopicPartition("t1", 0)]."""
    out = []
    for name in names:
        topic, partition = name.split("p")
        out.append(TopicPartition(topic, int(partition)))
    return out


def subs(**topics_by_member: tuple[str, ...]) -> dict[str, Subscription]:
    return {member: Subscription(topics) for member, topics in topics_by_member.items()}


# ------------------------------------------------------------------ consumer protocol bytes


def test_subscription_round_trip_all_versions() -> None:
    sub = Subscription(
        ("orders", "payments"),
        user_data=b"\x01\x02",
        owned_partitions=(TopicPartition("orders", 0), TopicPartition("orders", 3)),
        generation_id=7,
        rack_id="rack-1",
    )
    assert decode_subscription(encode_subscription(sub, 3)) == sub
    assert decode_subscription(encode_subscription(sub, 2)) == Subscription(
        sub.topics, sub.user_data, sub.owned_partitions, 7
    )
    assert decode_subscription(encode_subscription(sub, 0)) == Subscription(sub.topics, sub.user_data)


def test_assignment_round_trip() -> None:
    assignment = Assignment(tuple(tps("t0p0", "t0p2", "t1p1")), user_data=None)
    assert decode_assignment(encode_assignment(assignment)) == assignment


def test_bytes_match_kafka_python() -> None:
    legacy = pytest.importorskip("kafka.protocol.old.consumer_protocol")
    member_metadata = legacy.ConsumerProtocolMemberMetadata_v0
    member_assignment = legacy.ConsumerProtocolMemberAssignment_v0

    ours = encode_subscription(Subscription(("a", "b"), user_data=b"ud"))
    assert ours == member_metadata(0, ["a", "b"], b"ud").encode()
    theirs = member_metadata.decode(ours)
    assert (theirs.version, theirs.topics, theirs.user_data) == (0, ["a", "b"], b"ud")

    ours = encode_assignment(Assignment(tuple(tps("t0p0", "t0p1", "t1p2")), user_data=b""))
    assert ours == member_assignment(0, [("t0", [0, 1]), ("t1", [2])], b"").encode()
    assert decode_assignment(member_assignment(0, [("x", [5])], None).encode()) == Assignment(
        (TopicPartition("x", 5),), None
    )


def test_decoding_newer_version_reads_known_fields() -> None:
    # A future version 4 with a trailing field: the known fields still decode.
    data = encode_subscription(Subscription(("t",), rack_id="r"), 3)
    newer = b"\x00\x04" + data[2:] + b"\xff\xff\xff\xff"
    assert decode_subscription(newer).topics == ("t",)


def test_bad_bytes_raise_value_error() -> None:
    with pytest.raises(ValueError):
        decode_subscription(b"\x00\x00\x00\x00\x00\x05\x00")
    with pytest.raises(ValueError):
        encode_subscription(Subscription(("t",)), 4)


# ------------------------------------------------------------------ assignors


def test_range_javadoc_example() -> None:
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs(C0=("t0", "t1"), C1=("t0", "t1")))
    assert result == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tps("t0p2", "t1p2")}


def test_range_uneven_and_partial_subscriptions() -> None:
    result = RangeAssignor().assign({"t0": 5, "t1": 2}, subs(C2=("t0",), C0=("t0", "t1"), C1=("t0", "t1", "missing")))
    # t0: 5 partitions over C0, C1, C2 (sorted) -> 2, 2, 1; t1: 2 over C0, C1.
    assert result == {
        "C2": tps("t0p4"),
        "C0": tps("t0p0", "t0p1", "t1p0"),
        "C1": tps("t0p2", "t0p3", "t1p1"),
    }


def test_roundrobin_javadoc_examples() -> None:
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs(C0=("t0", "t1"), C1=("t0", "t1")))
    assert result == {"C0": tps("t0p0", "t0p2", "t1p1"), "C1": tps("t0p1", "t1p0", "t1p2")}

    result = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3}, subs(C0=("t0",), C1=("t0", "t1"), C2=("t0", "t1", "t2"))
    )
    assert result == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}


def test_static_members_sort_first_by_instance_id() -> None:
    subscriptions = {
        "a-member": Subscription(("t",)),
        "z-member": Subscription(("t",), group_instance_id="instance-1"),
    }
    result = RangeAssignor().assign({"t": 2}, subscriptions)
    assert result == {"a-member": [TopicPartition("t", 1)], "z-member": [TopicPartition("t", 0)]}


def test_assign_group_from_join_members() -> None:
    members = [
        JoinGroupMember("m-2", None, encode_subscription(Subscription(("t",)))),
        JoinGroupMember("m-1", None, encode_subscription(Subscription(("t",)), 3)),
    ]
    assignments = assign_group("roundrobin", members, {"t": 3})
    assert {m: decode_assignment(b).partitions for m, b in assignments.items()} == {
        "m-1": tuple(tps("tp0", "tp2")),
        "m-2": tuple(tps("tp1")),
    }
    with pytest.raises(ValueError):
        assign_group("sticky", members, {"t": 3})
