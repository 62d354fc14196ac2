"""kafka.isolation.level: by default (read_committed) the source reads up to the last stable
offset and leaves out the records of aborted transactions; read_uncommitted reads every data
record up to the high watermark. Control batches never show. Written by confluent-kafka's
transactional producer, interleaved with a plain producer's records."""

from __future__ import annotations

from confluent_kafka import Producer
from source_helpers import with_options

from clients.client_helpers import create_topic


def _transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def _values(spark, broker, topic: str, options: dict[str, str]) -> list[tuple[int, bytes]]:
    frame = with_options(spark.read, broker, {"subscribe": topic, **options}).load()
    return [(r.offset, bytes(r.value)) for r in frame.orderBy("offset").collect()]


def test_read_committed_skips_aborted_and_open_transactions(loglake_spark, broker, topic) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 5})
    txn.init_transactions(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})

    _transaction(txn, topic, [b"c1-%d" % i for i in range(5)], commit=True)
    _transaction(txn, topic, [b"a1-%d" % i for i in range(5)], commit=False)
    plain.produce(topic, b"plain-1", partition=0)
    plain.flush(30)
    _transaction(txn, topic, [b"c2-%d" % i for i in range(3)], commit=True)
    # Left open: above the last stable offset until it ends.
    txn.begin_transaction()
    for i in range(4):
        txn.produce(topic, b"open-%d" % i, partition=0)
    txn.flush(30)
    plain.produce(topic, b"plain-2", partition=0)  # after the open transaction's first record
    plain.flush(30)

    uncommitted = _values(loglake_spark, broker, topic, {"kafka.isolation.level": "read_uncommitted"})
    every = [v for _, v in uncommitted]
    assert sorted(every) == sorted(
        [b"c1-%d" % i for i in range(5)] + [b"a1-%d" % i for i in range(5)] + [b"plain-1"]
        + [b"c2-%d" % i for i in range(3)] + [b"open-%d" % i for i in range(4)] + [b"plain-2"]
    )  # fmt: skip
    assert [o for o, _ in uncommitted] == sorted(o for o, _ in uncommitted)

    committed = [v for _, v in _values(loglake_spark, broker, topic, {})]
    assert committed == [b"c1-%d" % i for i in range(5)] + [b"plain-1"] + [b"c2-%d" % i for i in range(3)]

    txn.commit_transaction(30)
    committed = [v for _, v in _values(loglake_spark, broker, topic, {"kafka.isolation.level": "read_committed"})]
    assert committed == (
        [b"c1-%d" % i for i in range(5)] + [b"plain-1"] + [b"c2-%d" % i for i in range(3)]
        + [b"open-%d" % i for i in range(4)] + [b"plain-2"]
    )  # fmt: skip
