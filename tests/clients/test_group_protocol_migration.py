"""Online migration of a consumer group between the classic and the consumer protocol (Kafka 4's
group.consumer.migration.policy) with real confluent-kafka consumers: group.protocol=classic
and group.protocol=consumer members in one group under steady produce."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench.rebalance import Member, SteadyProducer, wait_until
from client_helpers import (
    CONSUMER_GROUP_OVERRIDES,
    create_topic,
    make_broker,
    produce_values,
    raw_request,
    serve,
    unique_name,
)
from console_helpers import cli_describe_group
from consumer_helpers import consumer_config, heartbeat
from harness.process import BrokerProcess
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's MemberType


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **CONSUMER_GROUP_OVERRIDES))


def classic_config(bootstrap: str, group: str, strategy: str = "range") -> dict[str, object]:
    """A classic consumer that heartbeats often, so it learns of rebalances fast."""
    return consumer_config(
        bootstrap,
        group,
        **{
            "group.protocol": "classic",
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "max.poll.interval.ms": 20000,  # the rebalance timeout it joins with
        },
    )


def consumer_group(bootstrap: str, group: str) -> dict:
    """The group as ConsumerGroupDescribe v1 answers it."""
    body = {"group_ids": [group], "include_authorized_operations": False}
    (described,) = raw_request(bootstrap, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)["groups"]
    return described


def classic_group(bootstrap: str, group: str) -> dict:
    """The group as DescribeGroups answers it."""
    body = {"groups": [group], "include_authorized_operations": False}
    (described,) = raw_request(bootstrap, ApiKey.DESCRIBE_GROUPS, 5, body)["groups"]
    return described


def member_types(bootstrap: str, group: str) -> list[int]:
    described = consumer_group(bootstrap, group)
    return sorted(m["member_type"] for m in described["members"]) if described["error_code"] == 0 else []


def cli_member_protocols(http_url: str, group: str) -> dict[str, str]:
    """Member id -> the PROTOCOL column of `loglake groups describe --group`."""
    lines = cli_describe_group(http_url, group).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("CONSUMER-ID"))
    rows = [line.split() for line in lines[header + 1 :]]
    return {cols[0]: cols[1] for cols in rows[: next(i for i, cols in enumerate(rows) if not cols)]}


# Eager classic members give up everything when they rejoin; cooperative ones report what
# they own in their JoinGroup and give up only what moves.
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_upgrade_then_downgrade_consumes_every_record_once(broker: BrokerProcess, topic: str, strategy: str) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic, partitions=6)
    group = unique_name("migrating")
    producer = SteadyProducer(bootstrap, topic, 6)
    producer.start()
    classic = [Member(classic_config(bootstrap, group, strategy), topic) for _ in range(2)]
    for m in classic:
        m.start()
    wait_until(lambda: [len(m.partitions()) for m in classic] == [3, 3], what="a classic group of two")
    assert classic_group(bootstrap, group)["group_state"] == "Stable"

    # Upgrade: a consumer-protocol member joins the classic group.
    modern = Member(consumer_config(bootstrap, group), topic)
    modern.start()
    wait_until(
        lambda: member_types(bootstrap, group) == [CLASSIC_MEMBER, CLASSIC_MEMBER, CONSUMER_MEMBER],
        what="the group upgraded, its classic members kept",
    )
    members = (*classic, modern)
    wait_until(
        lambda: sorted(len(m.partitions()) for m in members) == [2, 2, 2],
        timeout=30,
        what="the server assignor shares the partitions among all three",
    )

    def reconciled() -> bool:
        described = consumer_group(bootstrap, group)
        converged = all(m["assignment"] == m["target_assignment"] for m in described["members"])
        return described["group_state"] == "Stable" and converged

    wait_until(reconciled, what="the consumer group reconciled")
    described = httpx.get(f"{broker.http_url}/groups/{group}").json()
    assert described["group_protocol"] == "consumer"
    types = {m["member_id"]: m["member_type"] for m in described["members"]}
    assert sorted(types.values()) == ["classic", "classic", "consumer"]
    assert cli_member_protocols(broker.http_url, group) == types
    mark = [len(m.received) for m in members]
    wait_until(lambda: all(len(m.received) > n for m, n in zip(members, mark)), what="all three consume")

    # Downgrade: the consumer-protocol member leaves; the classic members rebalance as a classic group.
    modern.stop()
    wait_until(
        lambda: consumer_group(bootstrap, group)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND,
        what="no consumer group any more",
    )
    wait_until(
        lambda: (
            [len(m.partitions()) for m in classic] == [3, 3]
            and classic_group(bootstrap, group)["group_state"] == "Stable"
        ),
        timeout=30,
        what="a Stable classic group of two again",
    )
    downgraded = classic_group(bootstrap, group)
    assert downgraded["protocol_type"] == "consumer" and len(downgraded["members"]) == 2
    mark = [len(m.received) for m in classic]
    wait_until(lambda: all(len(m.received) > n for m, n in zip(classic, mark)), what="the classic members consume")

    producer.stop()
    wait_until(lambda: sum(len(m.received) for m in members) >= producer.sent, timeout=30, what="every record consumed")
    for m in classic:
        m.stop()
    assert not [e for m in members for e in m.errors]
    values = [v for m in members for _, _, v in m.received]
    assert len(values) == len(set(values)) == producer.sent


@pytest.fixture(scope="module")
def no_migration_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {**CONSUMER_GROUP_OVERRIDES, "group.consumer.migration.policy": "disabled"}
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **overrides))


def test_without_migration_a_consumer_member_is_refused_and_the_classic_group_goes_on(
    no_migration_broker: BrokerProcess, topic: str
) -> None:
    bootstrap = no_migration_broker.bootstrap
    create_topic(bootstrap, topic, partitions=2)
    group = unique_name("classic-only")
    member = Member(classic_config(bootstrap, group), topic)
    member.start()
    try:
        wait_until(lambda: len(member.partitions()) == 2, what="a classic group")
        before = classic_group(bootstrap, group)
        refused = heartbeat(bootstrap, group, subscribed_topic_names=[topic])
        assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert "online upgrade is disabled" in refused["error_message"]
        assert classic_group(bootstrap, group) == before
        values = [b"still-%d" % i for i in range(20)]
        produce_values(bootstrap, topic, values)
        wait_until(lambda: len(member.received) >= len(values), what="the classic member goes on consuming")
        assert sorted(v for _, _, v in member.received) == sorted(values)
    finally:
        member.stop()
    assert not member.errors
