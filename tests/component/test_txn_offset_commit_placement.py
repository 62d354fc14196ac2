"""TxnOffsetCommit gets the same answer wherever the transactional id's coordinator is
(issue 35, item 5): two brokers on loopback sockets, the group's coordinator on broker 0,
the transaction's on broker 0 itself or on broker 1 (asked with AddPartitionsToTxn's
verify-only form, as Kafka 3.9's group coordinator asks)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from loglake.errors import ErrorCode
from loglake.groups import TopicPartition
from loglake.protocol import ApiKey
from txn_helpers import (
    GROUP,
    TxnBroker,
    add_offsets_body,
    add_partitions_body,
    cluster_image,
    init_producer,
    txn_offset_commit_body,
    txn_offset_commit_error,
)

from ingest_gateway.network.kafka_server import KafkaServer


async def _answers(txn_coordinator: int) -> dict[str, int]:
    """The TxnOffsetCommit answers of broker 0 (the group's coordinator) through one
    transaction's life, with the transactional id's coordinator on `txn_coordinator`."""
    cache = SimpleNamespace()
    brokers = {b: TxnBroker(b, cache) for b in (0, 1)}
    servers = {b: KafkaServer("127.0.0.1", 0, broker.router.handle, 1 << 20) for b, broker in brokers.items()}
    for server in servers.values():
        await server.start()
    cache.image = cluster_image(txn_coordinator, {b: server.port for b, server in servers.items()})
    await brokers[0].start(txn_coordinator=txn_coordinator == 0, group_coordinator=True)
    await brokers[1].start(txn_coordinator=txn_coordinator == 1, group_coordinator=False)
    group_broker, txn_broker = brokers[0], brokers[txn_coordinator]

    async def commit(producer: tuple[int, int], version: int = 3, offset: int = 5) -> int:
        body = txn_offset_commit_body(producer, offset=offset)
        return txn_offset_commit_error(await group_broker.call(ApiKey.TXN_OFFSET_COMMIT, version, body))

    answers = {}
    try:
        await init_producer(txn_broker)
        producer = await init_producer(txn_broker)  # epoch 1: an older one exists
        await txn_broker.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions_body(producer, 0))
        answers["before AddOffsetsToTxn, v3"] = await commit(producer, 3)
        answers["before AddOffsetsToTxn, v4"] = await commit(producer, 4)
        added = await txn_broker.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, add_offsets_body(producer))
        assert added["error_code"] == 0, added
        answers["an unknown producer id"] = await commit((producer[0] + 1, producer[1]))
        answers["an older epoch"] = await commit((producer[0], producer[1] - 1))
        answers["the producer, v0"] = await commit(producer, 0, offset=6)
        answers["the producer, v3"] = await commit(producer, 3, offset=7)
        held = await group_broker.groups.fetch_offsets(GROUP, [TopicPartition("t", 0)], require_stable=True)
        answers["held until the marker"] = held.partitions[TopicPartition("t", 0)].error
        if txn_coordinator == 1:
            # Broker 1 stops answering: Kafka's NETWORK_EXCEPTION, which the group's clients
            # are told as COORDINATOR_LOAD_IN_PROGRESS (to retry; COORDINATOR_NOT_AVAILABLE below v2).
            await servers[1].stop()
            answers["coordinator unreachable, v3"] = await commit(producer, 3)
            answers["coordinator unreachable, v1"] = await commit(producer, 1)
    finally:
        for broker in brokers.values():
            await broker.stop()
        for server in servers.values():
            await server.stop()
    return {k: ErrorCode(v).name for k, v in answers.items()}


EXPECTED = {
    "before AddOffsetsToTxn, v3": "INVALID_TXN_STATE",
    "before AddOffsetsToTxn, v4": "TRANSACTION_ABORTABLE",
    "an unknown producer id": "INVALID_PRODUCER_ID_MAPPING",
    "an older epoch": "INVALID_PRODUCER_EPOCH",
    "the producer, v0": "NONE",
    "the producer, v3": "NONE",
    "held until the marker": "UNSTABLE_OFFSET_COMMIT",
}


@pytest.mark.parametrize("txn_coordinator", [0, 1], ids=["same-broker", "other-broker"])
def test_txn_offset_commit_does_not_depend_on_placement(txn_coordinator: int) -> None:
    answers = asyncio.run(asyncio.wait_for(_answers(txn_coordinator), 30))
    unreachable = {
        "coordinator unreachable, v3": "COORDINATOR_LOAD_IN_PROGRESS",
        "coordinator unreachable, v1": "COORDINATOR_NOT_AVAILABLE",
    }
    assert answers == EXPECTED | (unreachable if txn_coordinator == 1 else {})
