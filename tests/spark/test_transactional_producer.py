"""The sink's transactions over loglake's protocol client, against a broker process: a task's
transaction left open and ended by another client, fencing of an earlier attempt, the
progress recorded in a group only when the transaction commits."""

from __future__ import annotations

import pytest
from clients.client_helpers import create_topic
from txn_sink_helpers import latest_offsets, sink_progress, wait_until_stable

from loglake.protocol import IsolationLevel
from loglake.spark.protocol_client import ProtocolClient, TopicPartition
from loglake.spark.transactional_producer import (
    SinkProgress,
    TransactionalProducer,
    TransactionError,
    end_transaction,
)


def _rows(topic: str, partition: int, values: list[bytes]) -> dict[TopicPartition, list]:
    return {TopicPartition(topic, partition): [(None, v, [], None) for v in values]}


def _producer(client: ProtocolClient, transactional_id: str) -> TransactionalProducer:
    client.metadata(None)
    producer = TransactionalProducer(client, transactional_id, 60_000)
    producer.begin()
    return producer


def test_transaction_ended_by_another_client_and_progress_seen_on_commit(broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    tid = f"{topic}-task-0"
    with ProtocolClient(broker.bootstrap) as task:
        producer = _producer(task, tid)
        assert producer.last_progress(tid) is None
        producer.send(_rows(topic, 0, [b"a", b"b"]) | _rows(topic, 1, [b"c"]))
        producer.send(_rows(topic, 0, [b"d"]))
        producer.record_progress(tid, SinkProgress(7))
        open_transaction = producer.producer
    assert producer.end_offsets == {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 1}
    # Open: read_committed readers see nothing yet, the group no progress.
    assert latest_offsets(broker, topic, 2, IsolationLevel.READ_COMMITTED) == [0, 0]
    assert sink_progress(broker, tid) == (None, {})

    with ProtocolClient(broker.bootstrap) as driver:
        end_transaction(driver, open_transaction, commit=True)
        end_transaction(driver, open_transaction, commit=True)  # a retried commit is a no-op
    assert wait_until_stable(broker, topic, 2) == [4, 2]  # the records and a marker on each
    assert sink_progress(broker, tid) == (SinkProgress(7), {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 1})

    with ProtocolClient(broker.bootstrap) as again:
        assert _producer(again, tid).last_progress(tid) == SinkProgress(7)


def test_a_new_attempt_fences_the_earlier_one_and_aborts_its_transaction(broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    tid = f"{topic}-task-0"
    with ProtocolClient(broker.bootstrap) as first_client, ProtocolClient(broker.bootstrap) as second_client:
        first = _producer(first_client, tid)
        first.send(_rows(topic, 0, [b"zombie-1"]))
        first.record_progress(tid, SinkProgress(3))

        second = _producer(second_client, tid)  # aborts the first attempt's transaction
        assert second.producer.producer_epoch > first.producer.producer_epoch
        assert second.last_progress(tid) is None
        with pytest.raises(TransactionError, match="PRODUCER_FENCED|INVALID_PRODUCER_EPOCH"):
            first.send(_rows(topic, 0, [b"zombie-2"]))
        with pytest.raises(TransactionError, match="PRODUCER_FENCED"):
            end_transaction(first_client, first.producer, commit=True)

        second.send(_rows(topic, 0, [b"kept"]))
        second.record_progress(tid, SinkProgress(3))
        end_transaction(second_client, second.producer, commit=True)
    wait_until_stable(broker, topic, 1)
    with ProtocolClient(broker.bootstrap, isolation_level=IsolationLevel.READ_COMMITTED) as reader:
        reader.metadata([topic])
        fetched = reader.fetch_from(
            reader.leader_address(TopicPartition(topic, 0)), TopicPartition(topic, 0), 0, 1 << 20
        )
    assert [producer_id for producer_id, _ in fetched.aborted] == [first.producer.producer_id]
    assert sink_progress(broker, tid)[0] == SinkProgress(3)
