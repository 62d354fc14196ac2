"""The group APIs at Kafka 3.9.0's versions: raw requests at every version, static membership
(KIP-345) with confluent-kafka and kafka-python, OffsetDelete (KIP-496), the admin calls."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

from client_helpers import create_topic, produce_values, raw_request, unique_name
from loglake.groups import Subscription, encode_subscription
from loglake.protocol import ApiKey
from kafka_release import release_versions

NONE = 0
INVALID_REQUEST = 42
INCONSISTENT_GROUP_PROTOCOL = 23
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_ID_NOT_FOUND = 69
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNKNOWN_MEMBER_ID = 25
# DescribeGroups authorized operations without an authorizer: READ, DELETE, DESCRIBE.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

# OffsetCommit (8) to ListGroups (16), DeleteGroups (42), OffsetDelete (47).
GROUP_API_KEYS = (*range(8, 17), 42, 47)


@pytest.fixture(scope="module")
def shared_topic(broker) -> str:
    """A 4-partition topic, once every __consumer_offsets partition is served."""
    name = unique_name("groups-shared")
    create_topic(broker.bootstrap, name, partitions=4)
    raw_request(broker.bootstrap, ApiKey.FIND_COORDINATOR, 0, {"key": name})  # creates __consumer_offsets
    # Enough group ids to land on every partition of __consumer_offsets (4 in these tests).
    probes = [f"probe-{i}" for i in range(200)]

    def all_served() -> bool:
        body = raw_request(broker.bootstrap, ApiKey.DESCRIBE_GROUPS, 0, {"groups": probes})
        return all(g["error_code"] == NONE for g in body["groups"])

    wait_until(all_served, 60, "the group coordinator")
    return name


def wait_until(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def capped(api: ApiKey, version: int) -> int:
    return min(version, release_versions(api)[1])


def join_request(group: str, topic: str, instance: str | None) -> dict:
    """A JoinGroup body (any version) for a new consumer subscribed to `topic`."""
    return {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": encode_subscription(Subscription((topic,)))}],
        "reason": "test",
    }


# ---------------------------------------------------------------- versions


def test_group_apis_advertise_kafka_3_9_ranges(broker):
    body = raw_request(broker.bootstrap, ApiKey.API_VERSIONS, 3, {"client_software_name": "t"})
    advertised = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    for api in GROUP_API_KEYS:
        assert advertised[api] == release_versions(api), ApiKey(api).name


@pytest.mark.parametrize("version", range(10))
def test_member_lifecycle_at_each_version(broker, shared_topic, version):
    """JoinGroup vN, then SyncGroup, Heartbeat, OffsetCommit, OffsetFetch and LeaveGroup at
    vN or their newest version: every version of each is exercised once."""
    group = unique_name(f"lifecycle-v{version}")
    static = version >= 5
    instance = f"instance-{version}" if static else None
    join_body = join_request(group, shared_topic, instance)
    joined = raw_request(broker.bootstrap, ApiKey.JOIN_GROUP, version, join_body)
    if 4 <= version and not static:
        # KIP-394: a dynamic member first gets its id, then joins with it.
        assert joined["error_code"] == MEMBER_ID_REQUIRED and joined["member_id"]
        join_body["member_id"] = joined["member_id"]
        joined = raw_request(broker.bootstrap, ApiKey.JOIN_GROUP, version, join_body)
    assert joined["error_code"] == NONE, joined
    member_id = joined["member_id"]
    assert joined["leader"] == member_id and joined["generation_id"] == 1
    assert joined["protocol_name"] == "range"
    assert [m["member_id"] for m in joined["members"]] == [member_id]
    if version >= 5:
        assert joined["members"][0]["group_instance_id"] == instance
    if version >= 7:
        assert joined["protocol_type"] == "consumer"

    sync_version = capped(ApiKey.SYNC_GROUP, version)
    synced = raw_request(
        broker.bootstrap,
        ApiKey.SYNC_GROUP,
        sync_version,
        {
            "group_id": group,
            "generation_id": 1,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member_id, "assignment": b"\x00\x00assigned"}],
        },
    )
    assert synced["error_code"] == NONE and synced["assignment"] == b"\x00\x00assigned"
    if sync_version >= 5:
        assert (synced["protocol_type"], synced["protocol_name"]) == ("consumer", "range")

    beat = raw_request(
        broker.bootstrap,
        ApiKey.HEARTBEAT,
        capped(ApiKey.HEARTBEAT, version),
        {"group_id": group, "generation_id": 1, "member_id": member_id, "group_instance_id": instance},
    )
    assert beat["error_code"] == NONE

    committed = raw_request(
        broker.bootstrap,
        ApiKey.OFFSET_COMMIT,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": 1,
            "member_id": member_id,
            "group_instance_id": instance,
            "topics": [
                {
                    "name": shared_topic,
                    "partitions": [{"partition_index": 0, "committed_offset": 40 + version, "committed_metadata": "m"}],
                }
            ],
        },
    )
    # v0 carries no member id: once a group has members, only they commit.
    expected = (NONE, 40 + version) if version >= 1 else (UNKNOWN_MEMBER_ID, -1)
    assert committed["topics"][0]["partitions"][0]["error_code"] == expected[0]

    wanted = [{"name": shared_topic, "partition_indexes": [0]}]
    fetch_body = {"group_id": group, "topics": wanted, "groups": [{"group_id": group, "topics": wanted}]}
    fetched = raw_request(broker.bootstrap, ApiKey.OFFSET_FETCH, version, fetch_body)
    topics = fetched["groups"][0]["topics"] if version >= 8 else fetched["topics"]
    assert topics[0]["partitions"][0]["committed_offset"] == expected[1]

    leave_version = capped(ApiKey.LEAVE_GROUP, version)
    left = raw_request(
        broker.bootstrap,
        ApiKey.LEAVE_GROUP,
        leave_version,
        {
            "group_id": group,
            "member_id": member_id,
            "members": [{"member_id": member_id, "group_instance_id": instance}],
        },
    )
    assert left["error_code"] == NONE
    if leave_version >= 3:
        assert [m["error_code"] for m in left["members"]] == [NONE]
    describe_version = capped(ApiKey.DESCRIBE_GROUPS, version)
    described = raw_request(broker.bootstrap, ApiKey.DESCRIBE_GROUPS, describe_version, {"groups": [group]})
    assert described["groups"][0]["group_state"] == "Empty"


def test_sync_group_v5_checks_the_protocol(broker, shared_topic):
    group = unique_name("sync-v5")
    joined = raw_request(broker.bootstrap, ApiKey.JOIN_GROUP, 9, join_request(group, shared_topic, "i"))
    base = {"group_id": group, "generation_id": 1, "member_id": joined["member_id"], "group_instance_id": "i"}
    wrong_type, wrong_name, name_missing = (
        {"protocol_type": "connect", "protocol_name": "range"},
        {"protocol_type": "consumer", "protocol_name": "roundrobin"},
        {"protocol_type": "consumer"},  # from v5 both are mandatory
    )
    for protocol in (wrong_type, wrong_name, name_missing):
        wrong = raw_request(broker.bootstrap, ApiKey.SYNC_GROUP, 5, {**base, **protocol})
        assert wrong["error_code"] == INCONSISTENT_GROUP_PROTOCOL, protocol
    base |= {"protocol_type": "consumer", "protocol_name": "range"}
    fenced = raw_request(broker.bootstrap, ApiKey.SYNC_GROUP, 5, {**base, "member_id": "someone-else"})
    assert fenced["error_code"] == FENCED_INSTANCE_ID
    by_instance = {"group_id": group, "members": [{"member_id": "", "group_instance_id": "i"}]}
    left = raw_request(broker.bootstrap, ApiKey.LEAVE_GROUP, 5, by_instance)
    assert left["members"][0]["error_code"] == NONE


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_key_types(broker, version):
    def ask(key_type: int) -> dict:
        body = raw_request(
            broker.bootstrap,
            ApiKey.FIND_COORDINATOR,
            version,
            {"key": "some-group", "key_type": key_type, "coordinator_keys": ["some-group", "other-group"]},
        )
        return body["coordinators"][0] if version >= 4 else body

    group = ask(0)
    assert group["error_code"] == NONE and group["node_id"] >= 0 and group["port"] > 0
    if version >= 1:
        txn = ask(1)
        assert txn["error_code"] == NONE and txn["node_id"] >= 0 and txn["port"] > 0
        assert ask(2)["error_code"] == INVALID_REQUEST  # share groups (KIP-932)
    if version >= 4:
        batch = raw_request(
            broker.bootstrap, ApiKey.FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": ["a", "b", "c"]}
        )
        assert [c["key"] for c in batch["coordinators"]] == ["a", "b", "c"]


def test_list_groups_filters_and_describe_operations(broker, shared_topic):
    group = unique_name("filters")
    committed = raw_request(
        broker.bootstrap,
        ApiKey.OFFSET_COMMIT,
        2,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": 3_600_000,
            "topics": [{"name": shared_topic, "partitions": [{"partition_index": 1, "committed_offset": 5}]}],
        },
    )
    assert committed["topics"][0]["partitions"][0]["error_code"] == NONE

    def listed(version: int, **filters) -> dict[str, dict]:
        body = raw_request(broker.bootstrap, ApiKey.LIST_GROUPS, version, filters)
        return {g["group_id"]: g for g in body["groups"]}

    assert listed(5)[group]["group_type"] == "classic"
    assert group in listed(4, states_filter=["empty"])  # case-insensitive, as Kafka
    assert group not in listed(4, states_filter=["Stable"])
    assert group in listed(5, types_filter=["Classic"])
    assert group not in listed(5, types_filter=["consumer"])

    for version, include, expected in ((3, True, GROUP_OPERATIONS), (5, False, -(1 << 31)), (2, True, None)):
        body = raw_request(
            broker.bootstrap,
            ApiKey.DESCRIBE_GROUPS,
            version,
            {"groups": [group], "include_authorized_operations": include},
        )
        if expected is not None:
            assert body["groups"][0]["authorized_operations"] == expected

    # OffsetFetch v8 answers several groups; v7 require_stable with nothing in flight.
    fetched = raw_request(
        broker.bootstrap,
        ApiKey.OFFSET_FETCH,
        8,
        {"groups": [{"group_id": group, "topics": None}, {"group_id": unique_name("none"), "topics": None}]},
    )
    assert [g["error_code"] for g in fetched["groups"]] == [NONE, NONE]
    assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 5
    assert fetched["groups"][1]["topics"] == []
    stable = raw_request(
        broker.bootstrap,
        ApiKey.OFFSET_FETCH,
        7,
        {"group_id": group, "topics": [{"name": shared_topic, "partition_indexes": [1]}], "require_stable": True},
    )
    assert stable["topics"][0]["partitions"][0]["committed_offset"] == 5


def test_offset_delete_raw(broker, shared_topic):
    unknown = raw_request(
        broker.bootstrap,
        ApiKey.OFFSET_DELETE,
        0,
        {"group_id": unique_name("nobody"), "topics": [{"name": shared_topic, "partitions": [{"partition_index": 0}]}]},
    )
    assert unknown["error_code"] == GROUP_ID_NOT_FOUND and unknown["topics"] == []


# ---------------------------------------------------------------- real clients


def _consumer(broker, group: str, instance: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "group.instance.id": instance,
            "session.timeout.ms": 30_000,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _assignment_of(consumer: Consumer, calls: list, timeout: float = 30.0) -> set[int]:
    def assigned():
        consumer.poll(0.1)
        return calls and consumer.assignment()

    wait_until(assigned, timeout, "an assignment")
    return {tp.partition for tp in consumer.assignment()}


def test_confluent_static_member_restarts_without_rebalance(broker, shared_topic):
    group = unique_name("static-ck")
    calls_a: list[set[int]] = []
    a = _consumer(broker, group, "inst-a")
    b = _consumer(broker, group, "inst-b")
    a.subscribe([shared_topic], on_assign=lambda c, ps: calls_a.append({p.partition for p in ps}))
    b.subscribe([shared_topic])

    def settled():
        a.poll(0.1)
        b.poll(0.1)
        parts_a, parts_b = {p.partition for p in a.assignment()}, {p.partition for p in b.assignment()}
        return parts_a and parts_b and parts_a | parts_b == {0, 1, 2, 3} and not parts_a & parts_b

    wait_until(settled, 60, "both static members assigned")
    before_b = {p.partition for p in b.assignment()}
    assignments_of_a = len(calls_a)
    b.close()  # a static member does not leave the group on close

    restarted_calls: list[set[int]] = []
    b2 = _consumer(broker, group, "inst-b")
    b2.subscribe([shared_topic], on_assign=lambda c, ps: restarted_calls.append({p.partition for p in ps}))
    assert _assignment_of(b2, restarted_calls) == before_b
    # The other member saw no rebalance: no new assignment, and its heartbeats keep passing.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        a.poll(0.1)
        b2.poll(0.1)
    assert len(calls_a) == assignments_of_a
    a.close()
    b2.close()


def test_confluent_admin_groups_and_offset_delete(broker, shared_topic):
    group = unique_name("admin-ck")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    calls: list = []
    consumer = _consumer(broker, group, "inst-admin")
    consumer.subscribe([shared_topic], on_assign=lambda c, ps: calls.append(ps))
    _assignment_of(consumer, calls)
    consumer.commit(offsets=[CkTopicPartition(shared_topic, p, 10 + p) for p in range(4)], asynchronous=False)

    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(timeout=30)
    assert group in {g.group_id for g in stable.valid}
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=30)
    assert group not in {g.group_id for g in empty.valid}

    description = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(timeout=30)
    assert description.state == ConsumerGroupState.STABLE
    [member] = description.members
    assert member.group_instance_id == "inst-admin"
    assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1, 2, 3}
    assert description.authorized_operations is not None and len(description.authorized_operations) == 3

    # OffsetDelete as `kafka-consumer-groups --delete-offsets` sends it (confluent-kafka's
    # Python AdminClient has no call for it): kafka-python's admin at 3.9.
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient, MemberToRemove
    from kafka.errors import GroupSubscribedToTopicError, NoError

    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(3, 9))
    partition0 = KpTopicPartition(shared_topic, 0)
    assert kp_admin.delete_group_offsets(group, [partition0]) == {partition0: GroupSubscribedToTopicError}

    consumer.close()
    # A static member stays until its session times out; remove it by instance id (LeaveGroup v5).
    kp_admin.remove_group_members(group, [MemberToRemove(group_instance_id="inst-admin")])
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=30)
    assert group in {g.group_id for g in empty.valid}
    assert kp_admin.delete_group_offsets(group, [partition0]) == {partition0: NoError}
    remaining = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    assert {tp.partition: tp.offset for tp in remaining.topic_partitions} == {1: 11, 2: 12, 3: 13}
    kp_admin.close()


def test_kafka_python_static_member_at_3_9(broker, shared_topic):
    from kafka import KafkaConsumer

    group = unique_name("static-kp")
    produce_values(broker.bootstrap, shared_topic, [b"kp-%d" % i for i in range(8)])

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            shared_topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            group_instance_id="kp-instance",
            api_version=(3, 9),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=30_000,
        )

    first = consumer()
    records = wait_until(lambda: first.poll(timeout_ms=200), 60, "records for kafka-python")
    assert records
    generation_before = first._coordinator._generation
    first.commit()
    assignment = first.assignment()
    first.close(autocommit=False)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert [m.group_instance_id for m in description.members] == ["kp-instance"]

    second = consumer()
    wait_until(lambda: second.poll(timeout_ms=200) is not None and second.assignment(), 60, "reassignment")
    assert second.assignment() == assignment
    # A new member id in the same generation: the group did not rebalance.
    generation = second._coordinator._generation
    assert generation.member_id != generation_before.member_id
    assert generation.generation_id == generation_before.generation_id
    second.close(autocommit=False)


def test_kafka_python_dynamic_members_at_3_9(broker, shared_topic):
    """JoinGroup v9 (MEMBER_ID_REQUIRED first), SyncGroup v5, Heartbeat v4, OffsetCommit and
    OffsetFetch v9, LeaveGroup v5 on close: the versions kafka-python pins for Kafka 3.9."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    group = unique_name("dynamic-kp")

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            shared_topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            api_version=(3, 9),
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )

    first, second = consumer(), consumer()

    def both_assigned() -> bool:
        first.poll(timeout_ms=100)
        second.poll(timeout_ms=100)
        parts = [{tp.partition for tp in c.assignment()} for c in (first, second)]
        return all(parts) and parts[0] | parts[1] == {0, 1, 2, 3} and not parts[0] & parts[1]

    wait_until(both_assigned, 60, "both kafka-python members assigned")
    mine = sorted(first.assignment())
    first.commit({tp: OffsetAndMetadata(3, "", -1) for tp in mine})
    assert {tp: first.committed(tp) for tp in mine} == {tp: 3 for tp in mine}

    first.close(autocommit=False)  # LeaveGroup: the other member takes every partition
    wait_until(
        lambda: second.poll(timeout_ms=100) is not None and len(second.assignment()) == 4, 60, "the reassignment"
    )
    assert second.committed(KpTopicPartition(shared_topic, mine[0].partition)) == 3
    second.close(autocommit=False)
