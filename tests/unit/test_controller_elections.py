"""ElectLeaders and manual replica assignments in the controller (embedded store)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from loglake.cluster.assignment import numbered_assignment
from loglake.coordination.controller import ElectionType
from loglake.coordination.model import PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from protocol_helpers import request_context
from test_controller import make_controller

from ingest_gateway.apis.admin_apis import AdminApis


def _code(action) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        action()
    return e.value.code


def test_manual_assignments(tmp_path: Path) -> None:
    controller, store, _ = make_controller(tmp_path, brokers=(1, 2, 3))
    topic = controller.create_topic("t", -1, -1, assignment={0: (3, 1), 1: (2, 3)})
    assert topic.assignment == {0: (3, 1), 1: (2, 3)} and store.partition_states("t")[0].leader == 3
    invalid = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert _code(lambda: controller.create_topic("u", -1, -1, assignment={0: (1, 2), 1: (3,)})) == invalid
    assert _code(lambda: controller.create_topic("u", -1, -1, assignment={0: (1, 1)})) == invalid
    assert _code(lambda: controller.create_topic("u", -1, -1, assignment={0: (1, 4)})) == invalid
    assert _code(lambda: controller.create_topic("u", -1, -1, assignment={0: ()})) == invalid
    assert _code(lambda: numbered_assignment([(0, [1]), (2, [1])])) == invalid
    assert _code(lambda: numbered_assignment([(0, [1]), (0, [2])])) == invalid
    assert numbered_assignment([(1, [2]), (0, [1])]) == {0: (1,), 1: (2,)}

    grown = controller.create_partitions("t", 4, assignment=[(1, 2), (2, 1)])
    assert grown.assignment[2] == (1, 2) and grown.assignment[3] == (2, 1)
    assert store.partition_states("t")[3].leader == 2
    assert _code(lambda: controller.create_partitions("t", 6, assignment=[(1, 2)])) == invalid
    assert _code(lambda: controller.create_partitions("t", 5, assignment=[(1,)])) == invalid, "replication factor 2"
    assert store.topics()["t"].num_partitions == 4


def test_preferred_election(tmp_path: Path) -> None:
    controller, store, channel = make_controller(tmp_path, brokers=(1, 2, 3))
    controller.create_topic("t", -1, -1, assignment={0: (1, 2), 1: (2, 3), 2: (3, 1)})
    moved = store.partition_states("t")[0]
    store.update_partition_state("t", 0, PartitionState(2, 3, (1, 2), controller.epoch), moved.version)
    out_of_sync = store.partition_states("t")[2]
    store.update_partition_state("t", 2, PartitionState(1, 1, (1,), controller.epoch), out_of_sync.version)
    # As the leaders that changed them do: the controller reads the changed states.
    store.notify_isr_change([("t", 0), ("t", 2)])
    controller.on_isr_changes()
    channel.leader_and_isr.clear()

    results = controller.elect_leaders([("t", 0), ("t", 1), ("t", 2), ("t", 9), ("x", 0)], ElectionType.PREFERRED)
    codes = {tp: None if e is None else e.code for tp, e in results.items()}
    assert codes == {
        ("t", 0): None,
        ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("t", 2): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    state = store.partition_states("t")[0]
    assert (state.leader, state.leader_epoch, state.isr) == (1, 4, (1, 2))
    told = sorted((b, e.partition, e.state.leader) for b, _, entries in channel.leader_and_isr for e in entries)
    assert told == [(1, 0, 1), (2, 0, 1)], "only the moved partition's replicas hear of it"
    assert controller.elect_preferred_leaders() == 0, "nothing left that can move"


def test_unclean_election(tmp_path: Path) -> None:
    controller, store, _ = make_controller(tmp_path, brokers=(1, 2, 3))
    controller.create_topic("t", -1, -1, assignment={0: (1, 2), 1: (1, 3), 2: (2, 1)})
    controller.create_topic("solo", -1, -1, assignment={0: (1,)})
    for topic, p in (("t", 0), ("t", 1), ("solo", 0)):  # broker 1 led alone, then died
        state = store.partition_states(topic)[p]
        store.update_partition_state(topic, p, PartitionState(-1, 1, (1,), controller.epoch), state.version)
    controller.on_brokers_changed({2: -1, 3: -1})  # the controller hears that broker 1 is gone

    results = controller.elect_leaders(None, ElectionType.UNCLEAN)
    codes = {tp: None if e is None else e.code for tp, e in results.items()}
    assert codes == {
        ("t", 0): None,
        ("t", 1): None,
        ("t", 2): ErrorCode.ELECTION_NOT_NEEDED,
        ("solo", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    }
    states = store.partition_states("t")
    assert [(states[p].leader, states[p].isr, states[p].leader_epoch) for p in (0, 1)] == [(2, (2,), 2), (3, (3,), 2)]
    assert store.partition_states("solo")[0].leader == -1


def test_an_election_request_that_fails_whole_answers_every_partition() -> None:
    """No controller to forward to: Kafka's answer is the error for each partition."""

    class NoController:
        async def elect_leaders(self, partitions, election_type, timeout_ms):
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no controller is elected right now; retry")

    body = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0, 1]}], "timeout_ms": 1000}
    context = request_context(ApiKey.ELECT_LEADERS, 2)
    answer = asyncio.run(AdminApis(NoController(), None, None).elect_leaders(context, body))  # type: ignore[arg-type]
    assert answer["error_code"] == ErrorCode.NOT_CONTROLLER
    parts = answer["replica_election_results"][0]["partition_result"]
    assert [(p["partition_id"], p["error_code"]) for p in parts] == [
        (0, ErrorCode.NOT_CONTROLLER),
        (1, ErrorCode.NOT_CONTROLLER),
    ]
