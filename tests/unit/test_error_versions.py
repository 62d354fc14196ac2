"""Old request versions never get error codes they predate (issue 35, item 5).

Every row of `error_responses.ERROR_DOWNGRADES` is checked against the handlers' real
answers, through the router as a client reads them: the condition made to happen, asked at
the last version below the row's `since` (the older code) and at `since` (the newer one);
a row whose API never carries the newer code is asked at every version that can express the
condition. KIP-588's rule is the main one: EndTxn v1 from a fenced producer gets
INVALID_PRODUCER_EPOCH (47), v2 PRODUCER_FENCED (90)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from loglake.config import BrokerConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.groups.consumer_group import HeartbeatRequest
from loglake.protocol import ApiKey
from loglake.security.client import PLAINTEXT
from loglake.security.quotas import CONSUMER_BYTE_RATE, ClientQuotaManager
from txn_helpers import (
    GROUP,
    TOPIC,
    TXN_ID,
    TxnBroker,
    add_offsets_body,
    add_partitions_body,
    cluster_image,
    init_producer,
    txn_offset_commit_body,
    txn_offset_commit_error,
)

from ingest_gateway.apis.error_responses import ERROR_DOWNGRADES, NEVER, ErrorDowngrade, downgrade_errors
from ingest_gateway.apis.fetch_apis import FetchApis
from ingest_gateway.apis.kafka_apis import KafkaApis
from ingest_gateway.metadata.admin_manager import AdminManager

_E = ErrorCode
Body = dict[str, Any]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class World:
    """Broker 0: the transaction and group coordinator, with the real KafkaApis (DeleteTopics,
    InitProducerId's hand-over to TxnApis) and FetchApis (over a replica manager whose log
    dir is offline) registered too."""

    def __init__(self, tmp_path: Path) -> None:
        self.cache = SimpleNamespace(image=cluster_image(0, {0: 9092, 1: _free_port()}))
        self.broker = TxnBroker(0, self.cache)
        config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "delete.topic.enable": "false"})
        admin = AdminManager(config, None, None, self.cache, PLAINTEXT, None)  # type: ignore[arg-type]
        apis = self.broker.apis
        self.broker.router.register_module(
            KafkaApis(
                config=config,
                cache=self.cache,  # type: ignore[arg-type]
                admin=admin,
                coordinators=None,  # type: ignore[arg-type]
                replica_manager=None,  # type: ignore[arg-type]
                log_manager=None,  # type: ignore[arg-type]
                producer_ids=None,  # type: ignore[arg-type]
                authorization=apis._auth,
                produce_quotas=None,  # type: ignore[arg-type]
                dynamic_config=None,  # type: ignore[arg-type]
                init_transactional_producer=apis.init_producer_id,
            )
        )

        def offline(topic: str, partition: int) -> Any:
            raise KafkaError(_E.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is in an offline log dir")

        replica_manager = SimpleNamespace(partitions={}, leader_partition=offline, hosted_partition=offline)
        fetch = FetchApis(config, self.cache, replica_manager, apis._auth, ClientQuotaManager(CONSUMER_BYTE_RATE), None)  # type: ignore[arg-type]
        self.broker.router.register_module(fetch)

    async def call(self, key: ApiKey, version: int, body: Body) -> Body:
        return await self.broker.call(key, version, body)


# A scenario makes the row's condition happen on a fresh world and answers the error code a
# request of the given version gets.
Scenario = Callable[[World, int], Awaitable[int]]


async def _fenced_producer(world: World) -> tuple[int, int]:
    """A producer in a transaction (partition 0 of "t") whose epoch then moved on: (id, old epoch)."""
    producer = await init_producer(world.broker)
    added = await world.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions_body(producer, 0))
    assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
    await init_producer(world.broker)  # fences it: the epoch is bumped (and its transaction aborted)
    return producer


async def init_producer_id_fenced(world: World, version: int) -> int:
    # KIP-360 (v3+): the producer says the id and epoch it had; an epoch two behind is fenced.
    producer_id, epoch = await init_producer(world.broker)
    await init_producer(world.broker)
    await init_producer(world.broker)
    body = {
        "transactional_id": TXN_ID,
        "transaction_timeout_ms": 60_000,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
    return (await world.call(ApiKey.INIT_PRODUCER_ID, version, body))["error_code"]


async def add_partitions_fenced(world: World, version: int) -> int:
    producer = await _fenced_producer(world)
    answer = await world.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, add_partitions_body(producer, 1))
    return answer["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]


async def add_offsets_fenced(world: World, version: int) -> int:
    producer = await _fenced_producer(world)
    return (await world.call(ApiKey.ADD_OFFSETS_TO_TXN, version, add_offsets_body(producer)))["error_code"]


async def end_txn_fenced(world: World, version: int) -> int:
    producer_id, epoch = await _fenced_producer(world)
    body = {"transactional_id": TXN_ID, "producer_id": producer_id, "producer_epoch": epoch, "committed": True}
    return (await world.call(ApiKey.END_TXN, version, body))["error_code"]


async def verify_partition_not_in_transaction(world: World, version: int) -> int:
    """The brokers' form (v4+): is partition 1 in the transaction? (Only 0 was added.)"""
    producer_id, epoch = await init_producer(world.broker)
    await world.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions_body((producer_id, epoch), 0))
    transaction = {
        "transactional_id": TXN_ID,
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "verify_only": True,
        "topics": [{"name": TOPIC, "partitions": [1]}],
    }
    answer = await world.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [transaction]})
    return answer["results_by_transaction"][0]["topic_results"][0]["results_by_partition"][0]["partition_error_code"]


async def txn_offset_commit_without_add_offsets(world: World, version: int) -> int:
    producer = await init_producer(world.broker)
    await world.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions_body(producer, 0))
    return txn_offset_commit_error(
        await world.call(ApiKey.TXN_OFFSET_COMMIT, version, txn_offset_commit_body(producer))
    )


async def txn_offset_commit_fenced(world: World, version: int) -> int:
    producer = await _fenced_producer(world)
    return txn_offset_commit_error(
        await world.call(ApiKey.TXN_OFFSET_COMMIT, version, txn_offset_commit_body(producer))
    )


async def txn_offset_commit_stale_member_epoch(world: World, version: int) -> int:
    """A consumer-protocol (KIP-848) member commits in a transaction with an old member epoch."""
    joined = await world.broker.groups.consumer_group_heartbeat(
        HeartbeatRequest(
            GROUP, "", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(TOPIC,), owned_partitions=()
        )
    )
    assert joined.error is _E.NONE and joined.member_id, joined
    producer = await init_producer(world.broker)
    assert (await world.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, add_offsets_body(producer)))["error_code"] == 0
    body = txn_offset_commit_body(producer, member_id=joined.member_id, generation_id=joined.member_epoch + 5)
    return txn_offset_commit_error(await world.call(ApiKey.TXN_OFFSET_COMMIT, version, body))


async def txn_offset_commit_coordinator_unreachable(world: World, version: int) -> int:
    """The transactional id's coordinator (broker 1, by the metadata) does not answer: Kafka
    hands the group's client COORDINATOR_LOAD_IN_PROGRESS to retry."""
    producer = await init_producer(world.broker)
    world.cache.image = cluster_image(1, {0: 9092, 1: world.cache.image.brokers[1].port})
    return txn_offset_commit_error(
        await world.call(ApiKey.TXN_OFFSET_COMMIT, version, txn_offset_commit_body(producer))
    )


async def fetch_from_an_offline_log_dir(world: World, version: int) -> int:
    partition = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 0,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    answer = await world.call(ApiKey.FETCH, version, body)
    return answer["responses"][0]["partitions"][0]["error_code"]


async def delete_topics_disabled(world: World, version: int) -> int:
    answer = await world.call(ApiKey.DELETE_TOPICS, version, {"topic_names": [TOPIC], "timeout_ms": 1000})
    return answer["responses"][0]["error_code"]


@dataclass(frozen=True)
class Case:
    row: ErrorDowngrade
    scenario: Scenario
    # For a NEVER row: the versions that can express the condition.
    versions: tuple[int, ...] = ()


def _row(api: ApiKey, since: int, newer: ErrorCode) -> ErrorDowngrade:
    (row,) = [r for r in ERROR_DOWNGRADES if (r.api_key, r.since, r.newer) == (api, since, newer)]
    return row


CASES = [
    Case(_row(ApiKey.INIT_PRODUCER_ID, 4, _E.PRODUCER_FENCED), init_producer_id_fenced),
    Case(_row(ApiKey.ADD_PARTITIONS_TO_TXN, 2, _E.PRODUCER_FENCED), add_partitions_fenced),
    Case(_row(ApiKey.ADD_OFFSETS_TO_TXN, 2, _E.PRODUCER_FENCED), add_offsets_fenced),
    Case(_row(ApiKey.END_TXN, 2, _E.PRODUCER_FENCED), end_txn_fenced),
    Case(_row(ApiKey.ADD_PARTITIONS_TO_TXN, 5, _E.TRANSACTION_ABORTABLE), verify_partition_not_in_transaction),
    Case(_row(ApiKey.TXN_OFFSET_COMMIT, 4, _E.TRANSACTION_ABORTABLE), txn_offset_commit_without_add_offsets),
    Case(_row(ApiKey.TXN_OFFSET_COMMIT, NEVER, _E.PRODUCER_FENCED), txn_offset_commit_fenced, (0, 1, 2, 3, 4)),
    # The member id and generation travel from v3.
    Case(_row(ApiKey.TXN_OFFSET_COMMIT, NEVER, _E.STALE_MEMBER_EPOCH), txn_offset_commit_stale_member_epoch, (3, 4)),
    Case(_row(ApiKey.TXN_OFFSET_COMMIT, 2, _E.COORDINATOR_LOAD_IN_PROGRESS), txn_offset_commit_coordinator_unreachable),
    Case(_row(ApiKey.FETCH, 6, _E.KAFKA_STORAGE_ERROR), fetch_from_an_offline_log_dir),
    Case(_row(ApiKey.DELETE_TOPICS, 3, _E.TOPIC_DELETION_DISABLED), delete_topics_disabled),
]


def test_every_row_has_a_case() -> None:
    assert sorted(map(repr, (c.row for c in CASES))) == sorted(map(repr, ERROR_DOWNGRADES))


def _asked(case: Case) -> list[tuple[int, ErrorCode]]:
    """(version, the code it must get) for one case."""
    row = case.row
    if row.since == NEVER:
        return [(v, row.older) for v in case.versions]
    return [(row.since - 1, row.older), (row.since, row.newer)]


@pytest.mark.parametrize(
    ("case", "version", "expected"),
    [(c, v, e) for c in CASES for v, e in _asked(c)],
    ids=[f"{c.row.api_key.name}-v{v}-{e.name}" for c in CASES for v, e in _asked(c)],
)
def test_a_version_gets_only_the_codes_it_knows(case: Case, version: int, expected: ErrorCode, tmp_path: Path) -> None:
    async def main() -> int:
        world = World(tmp_path)
        await world.broker.start(txn_coordinator=True, group_coordinator=True)
        try:
            return await case.scenario(world, version)
        finally:
            await world.broker.stop()

    assert ErrorCode(asyncio.run(asyncio.wait_for(main(), 20))) is expected


def test_end_txn_v1_gets_invalid_producer_epoch_and_v3_producer_fenced(tmp_path: Path) -> None:
    """The issue's example: a Node.js client read "unknown error code 90" from EndTxn v1."""

    async def main() -> dict[int, int]:
        answers = {}
        for version in (0, 1, 2, 3, 4):
            world = World(tmp_path)
            await world.broker.start(txn_coordinator=True, group_coordinator=True)
            try:
                answers[version] = await end_txn_fenced(world, version)
            finally:
                await world.broker.stop()
        return answers

    assert asyncio.run(main()) == {0: 47, 1: 47, 2: 90, 3: 90, 4: 90}


def test_downgrade_leaves_other_versions_and_the_given_response_alone() -> None:
    response = {
        "error_code": _E.NONE,
        "responses": [
            {
                "topic": "a",
                "partitions": [{"partition_index": 0, "error_code": _E.KAFKA_STORAGE_ERROR, "records": b"x"}],
            },
            {"topic": "b", "partitions": [{"partition_index": 0, "error_code": _E.NONE, "records": b""}]},
        ],
    }
    assert downgrade_errors(ApiKey.FETCH, 6, response) is response
    assert downgrade_errors(ApiKey.PRODUCE, 3, response) is response  # no row for Produce
    old = downgrade_errors(ApiKey.FETCH, 5, response)
    assert old["responses"][0]["partitions"][0]["error_code"] == _E.NOT_LEADER_OR_FOLLOWER
    assert old["responses"][1] is response["responses"][1]  # what did not change is shared
    assert response["responses"][0]["partitions"][0]["error_code"] == _E.KAFKA_STORAGE_ERROR  # not in place
