"""Transactions on a single node with confluent-kafka (librdkafka): a transactional
producer across partitions of two topics with offsets sent to the transaction, committed
and aborted transactions seen by read_committed and read_uncommitted consumers, zombie
fencing, and the coordinator's errors for bad requests."""

from __future__ import annotations

import base64
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from client_helpers import create_topic, make_broker, raw_request, serve
from crash_helpers import kill_at_random
from harness.process import BrokerProcess
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.record.batch import encode_batch


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Few __transaction_state partitions keep the first FindCoordinator quick.
    yield from serve(
        make_broker(tmp_path_factory.mktemp("broker") / "logs", **{"transaction.state.log.num.partitions": "4"})
    )


def _producer(bootstrap: str, transactional_id: str) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, "acks": "all"}
    )


def _read(bootstrap: str, tps: list[tuple[str, int]], isolation: str, timeout: float = 30.0) -> list[tuple]:
    """Every record of the partitions up to their end (the LSO for read_committed), as
    (topic, partition, offset, value)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in tps])
        out = []
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(tps):
            assert time.monotonic() < deadline, f"only {sorted(at_end)} reached their end"
            msg = c.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add((msg.topic(), msg.partition()))
                continue
            out.append((msg.topic(), msg.partition(), msg.offset(), msg.value()))
        return out
    finally:
        c.close()


def _committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in tps], timeout=10)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        c.close()


def test_commit_and_abort_across_topics(broker, request):
    name = request.node.name
    a, b, group = f"{name}-a", f"{name}-b", f"{name}-group"
    create_topic(broker.bootstrap, a, partitions=2)
    create_topic(broker.bootstrap, b, partitions=1)
    tps = [(a, 0), (a, 1), (b, 0)]
    p = _producer(broker.bootstrap, f"{name}-txn")
    p.init_transactions(30)

    def transaction(tag: bytes, commit: bool, offset: int) -> None:
        p.begin_transaction()
        for i in range(10):
            for topic, partition in tps:
                p.produce(topic, value=b"%s-%d" % (tag, i), partition=partition)
        # Delivered before the end: abort_transaction() purges what librdkafka has not sent yet,
        # and the read_uncommitted reader below must find every aborted record in the log.
        assert p.flush(30) == 0
        meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}).consumer_group_metadata()
        p.send_offsets_to_transaction([TopicPartition(a, 0, offset)], meta, 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    transaction(b"one", commit=True, offset=10)
    transaction(b"two", commit=False, offset=20)
    transaction(b"three", commit=True, offset=30)

    committed = _read(broker.bootstrap, tps, "read_committed")
    everything = _read(broker.bootstrap, tps, "read_uncommitted")
    for topic, partition in tps:
        mine = [(o, v) for t, p_, o, v in committed if (t, p_) == (topic, partition)]
        assert [v for _, v in mine] == [b"one-%d" % i for i in range(10)] + [b"three-%d" % i for i in range(10)]
        assert [o for o, _ in mine] == sorted(o for o, _ in mine)
        all_here = [(o, v) for t, p_, o, v in everything if (t, p_) == (topic, partition)]
        assert [v for _, v in all_here] == [
            b"%s-%d" % (tag, i) for tag in (b"one", b"two", b"three") for i in range(10)
        ]
        offsets = [o for o, _ in all_here]
        # Each transaction's marker takes one offset that no consumer sees.
        assert offsets == list(range(10)) + list(range(11, 21)) + list(range(22, 32))
    # Only the committed transactions moved the group's offset.
    assert _committed(broker.bootstrap, group, [(a, 0)]) == {(a, 0): 30}


def test_http_reads_by_isolation_level(broker, request):
    """GET .../records and HTTP consumer instances: read_committed by default (up to the LSO,
    no aborted records), read_uncommitted when asked; a bad level is a 422."""
    name = request.node.name
    topic = f"{name}-t"
    create_topic(broker.bootstrap, topic, partitions=1)
    p = _producer(broker.bootstrap, f"{name}-txn")
    p.init_transactions(30)
    for tag, commit in ((b"c1", True), (b"a1", False), (b"c2", True), (b"open", None)):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, value=b"%s-%d" % (tag, i), partition=0)
        p.flush(30)
        if commit is True:
            p.commit_transaction(30)
        elif commit is False:
            p.abort_transaction(30)
    committed = [b"%s-%d" % (tag, i) for tag in (b"c1", b"c2") for i in range(3)]
    every = [b"%s-%d" % (tag, i) for tag in (b"c1", b"a1", b"c2", b"open") for i in range(3)]
    accept = {"accept": "application/vnd.kafka.binary.v2+json"}

    def fetched(**params: str) -> list[bytes]:
        url = f"{broker.http_url}/topics/{topic}/partitions/0/records"
        r = httpx.get(url, params={"offset": 0, **params}, headers=accept, timeout=10)
        r.raise_for_status()
        return [base64.b64decode(rec["value"]) for rec in r.json()]

    assert fetched() == committed
    assert fetched(isolation="read_uncommitted") == every
    bad = httpx.get(f"{broker.http_url}/topics/{topic}/partitions/0/records", params={"isolation": "dirty"})
    assert bad.status_code == 422 and "isolation" in bad.text

    def consumed(level: str | None) -> list[bytes]:
        group = f"{name}-{level}"
        body = {"format": "binary", "auto.offset.reset": "earliest"} | ({"isolation.level": level} if level else {})
        with httpx.Client(base_url=broker.http_url, timeout=30) as http:
            created = http.post(f"/consumers/{group}", json=body).raise_for_status().json()
            base = f"/consumers/{group}/instances/{created['instance_id']}"
            http.post(f"{base}/subscription", json={"topics": [topic]}).raise_for_status()
            out: list[bytes] = []
            deadline = time.monotonic() + 30
            want = len(committed) if level != "read_uncommitted" else len(every)
            while len(out) < want and time.monotonic() < deadline:
                r = http.get(f"{base}/records", params={"timeout": 500}, headers=accept).raise_for_status()
                out += [base64.b64decode(rec["value"]) for rec in r.json()]
            http.delete(base)
            return out

    assert consumed(None) == committed
    assert consumed("read_uncommitted") == every
    p.commit_transaction(30)
    assert fetched() == committed + [b"open-%d" % i for i in range(3)]


def test_zombie_fencing(broker, request):
    name = request.node.name
    topic, txn_id = f"{name}-t", f"{name}-txn"
    create_topic(broker.bootstrap, topic, partitions=1)
    old = _producer(broker.bootstrap, txn_id)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie-1")
    assert old.flush(30) == 0
    new = _producer(broker.bootstrap, txn_id)
    new.init_transactions(30)  # fences `old` and aborts its open transaction
    new.begin_transaction()
    new.produce(topic, value=b"new-1")
    new.commit_transaction(30)
    old.produce(topic, value=b"zombie-2")
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(30)
    assert info.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_committed")] == [b"new-1"]


def _init(broker, txn_id: str) -> dict:
    answer = raw_request(broker.bootstrap, ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
    assert answer["coordinators"][0]["error_code"] == 0
    deadline = time.monotonic() + 30
    while True:
        answer = raw_request(
            broker.bootstrap,
            ApiKey.INIT_PRODUCER_ID,
            4,
            {"transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
        )
        if answer["error_code"] not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR):
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.05)  # the coordinator's partition is loading: poll until it serves


def test_bad_requests_get_kafkas_error_codes(broker, request):
    name = request.node.name
    txn_id = f"{name}-txn"
    init = _init(broker, txn_id)
    assert init["error_code"] == 0
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def end(transactional_id: str, producer_id: int, producer_epoch: int) -> int:
        body = {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "committed": True,
        }
        return raw_request(broker.bootstrap, ApiKey.END_TXN, 3, body)["error_code"]

    # EndTxn without a transaction, with a wrong epoch, and for an unknown id.
    assert end(txn_id, pid, epoch) == ErrorCode.INVALID_TXN_STATE
    assert end(txn_id, pid, epoch - 1 if epoch > 0 else epoch + 5) == ErrorCode.PRODUCER_FENCED
    assert end(txn_id, pid + 1000, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # An id whose partition this broker leads but that was never initialised.
    unknown = raw_request(broker.bootstrap, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [f"{name}-unknown"]})
    assert unknown["transaction_states"][0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    add = raw_request(
        broker.bootstrap,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": txn_id,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": f"{name}-missing", "partitions": [0]}],
        },
    )
    [topic_result] = add["results_by_topic_v3_and_below"]
    assert topic_result["results_by_partition"][0]["partition_error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    described = raw_request(broker.bootstrap, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
    state = described["transaction_states"][0]
    assert (state["error_code"], state["transaction_state"], state["producer_id"]) == (0, "Empty", pid)
    listed = raw_request(
        broker.bootstrap,
        ApiKey.LIST_TRANSACTIONS,
        1,
        {"state_filters": ["Empty", "Bogus"], "producer_id_filters": [pid]},
    )
    assert listed["unknown_state_filters"] == ["Bogus"]
    assert [t["transactional_id"] for t in listed["transaction_states"]] == [txn_id]

    # TxnOffsetCommit before AddOffsetsToTxn put the group in the transaction, and from a
    # producer id the transactional id does not have: refused, nothing stored.
    topic, group = f"{name}-t", f"{name}-g"
    create_topic(broker.bootstrap, topic)

    def txn_offset_commit(producer_id: int) -> int:
        body = {
            "transactional_id": txn_id,
            "group_id": group,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        (t,) = raw_request(broker.bootstrap, ApiKey.TXN_OFFSET_COMMIT, 3, body)["topics"]
        return t["partitions"][0]["error_code"]

    assert txn_offset_commit(pid) == ErrorCode.INVALID_TXN_STATE
    assert txn_offset_commit(pid + 1000) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert _committed(broker.bootstrap, group, [(topic, 0)]) == {(topic, 0): OFFSET_INVALID}
    # The broker keeps serving: the same id still runs a transaction end to end.
    p = _producer(broker.bootstrap, txn_id)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"fine", partition=0)
    p.commit_transaction(30)
    assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_committed")] == [b"fine"]


def _offset_fetch(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    """(committed offset, error) of partition 0 by a raw OffsetFetch v7."""
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}], "require_stable": require_stable}
    response = raw_request(bootstrap, ApiKey.OFFSET_FETCH, 7, body)
    if response["error_code"]:  # e.g. the group's partition still loading
        return -1, response["error_code"]
    (t,) = response["topics"]
    (p,) = t["partitions"]
    return p["committed_offset"], p["error_code"]


@pytest.mark.slow
def test_transactional_offsets_are_durable_across_a_kill(tmp_path):
    """TxnOffsetCommit is written in the transaction: after kill -9 and restart, a committed
    transaction's offsets are the group's and an open one's are held (unstable) until its
    end, here an abort by the producer's next incarnation."""
    broker = make_broker(tmp_path / "logs", **{"transaction.state.log.num.partitions": "4"}).start()
    try:
        topic, group = "durable", "durable-group"
        create_topic(broker.bootstrap, topic, partitions=1)
        meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}).consumer_group_metadata()

        def send_offsets(p: Producer, offset: int) -> None:
            p.begin_transaction()
            p.produce(topic, value=b"x%d" % offset, partition=0)
            assert p.flush(30) == 0
            p.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], meta, 30)

        first = _producer(broker.bootstrap, "durable-txn")
        first.init_transactions(30)
        send_offsets(first, 5)
        first.commit_transaction(30)
        send_offsets(first, 9)  # left open across the kill
        broker.kill()
        broker.start()

        def fetched(require_stable: bool) -> tuple[int, int]:
            deadline = time.monotonic() + 30
            while True:
                offset, error = _offset_fetch(broker.bootstrap, group, topic, require_stable)
                if error not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR):
                    return offset, error
                assert time.monotonic() < deadline, "the group's partition did not load"
                time.sleep(0.1)

        assert fetched(require_stable=False) == (5, ErrorCode.NONE)
        assert fetched(require_stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        second = _producer(broker.bootstrap, "durable-txn")
        second.init_transactions(30)  # fences the first and aborts its open transaction
        assert _committed(broker.bootstrap, group, [(topic, 0)]) == {(topic, 0): 5}
        send_offsets(second, 12)
        second.commit_transaction(30)
        assert _committed(broker.bootstrap, group, [(topic, 0)]) == {(topic, 0): 12}
    finally:
        broker.kill()


def _cli(broker: BrokerProcess, *args: str) -> list[list[str]]:
    """`loglake transactions ...` as a subprocess; its table's rows, header first."""
    proc = subprocess.run(
        [sys.executable, "-m", "loglake.cli", "transactions", *args, "--bootstrap-http", broker.http_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in proc.stdout.splitlines() if line.strip()]


def _hanging_batch(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """A transactional batch from a producer no coordinator knows (an idempotent producer
    id, written with the transactional flag), as a buggy or pre-KIP-890 client leaves one:
    nothing will end it. Returns (producer id, its offset)."""
    init = raw_request(
        broker.bootstrap,
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
    )
    assert init["error_code"] == 0, init
    batch = encode_batch(
        [(None, b"hanging", [], None)],
        int(time.time() * 1000),
        producer_id=init["producer_id"],
        producer_epoch=init["producer_epoch"],
        base_sequence=0,
        transactional=True,
    )
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    (t,) = raw_request(broker.bootstrap, ApiKey.PRODUCE, 9, body)["responses"]
    (part,) = t["partition_responses"]
    assert part["error_code"] == 0, part
    return init["producer_id"], part["base_offset"]


def test_transactions_cli_lists_describes_finds_and_aborts_hanging(broker, request):
    name = request.node.name[:40]
    topic, txn_id = f"{name}-t", f"{name}-txn"
    create_topic(broker.bootstrap, topic, partitions=1)
    p = _producer(broker.bootstrap, txn_id)
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    assert p.flush(30) == 0

    listed = {row[0]: row for row in _cli(broker, "list")[1:]}
    assert listed[txn_id][1:] == ["0", listed[txn_id][2], "Ongoing"]
    header, described = _cli(broker, "describe", "--transactional-id", txn_id)
    assert header[0] == "CoordinatorId" and described[1] == txn_id and described[4] == "Ongoing"
    assert described[-1] == f"{topic}-0"
    header, *producers = _cli(broker, "describe-producers", "--topic", topic, "--partition", "0")
    assert header[0] == "ProducerId" and [row[-1] for row in producers] == ["0"]  # open from offset 0

    # The client's transaction is ongoing at its coordinator: not hanging.
    assert _cli(broker, "find-hanging", "--broker-id", "0")[1:] == []
    p.commit_transaction(30)

    hanging_pid, start = _hanging_batch(broker, topic)
    # DescribeProducers (what kafka-transactions.sh asks) shows it open, like the CLI.
    body = {"topics": [{"name": topic, "partition_indexes": [0, 9]}]}
    (t,) = raw_request(broker.bootstrap, ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"]
    known, missing = t["partitions"]
    assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    open_txns = {p["producer_id"]: p["current_txn_start_offset"] for p in known["active_producers"]}
    assert open_txns[hanging_pid] == start
    found = _cli(broker, "find-hanging", "--broker-id", "0")[1:]
    assert [(row[0], row[2], row[4]) for row in found] == [(topic, str(hanging_pid), str(start))]
    # A read_committed reader is stuck before it: the LSO does not pass an open transaction.
    assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_committed")] == [b"open"]

    (line,) = _cli(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start))[:1]
    assert line[0] == "Aborted"
    assert _cli(broker, "find-hanging", "--broker-id", "0")[1:] == []
    after = _cli(broker, "describe-producers", "--topic", topic, "--partition", "0")[1:]
    assert all(row[-1] == "-" for row in after)
    assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_committed")] == [b"open"]
    # Records after the aborted one are readable by read_committed readers again.
    p.begin_transaction()
    p.produce(topic, value=b"later", partition=0)
    p.commit_transaction(30)
    assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_committed")] == [b"open", b"later"]


def test_transactions_cli_errors(broker):
    proc = subprocess.run(
        [sys.executable, "-m", "loglake.cli", "transactions", "describe", "--transactional-id", "never-seen"]
        + ["--bootstrap-http", broker.http_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in proc.stderr, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "loglake.cli", "transactions", "abort", "--topic", "nope", "--partition", "0"]
        + ["--start-offset", "0", "--bootstrap-http", broker.http_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "no partition nope-0" in proc.stderr, proc.stderr


def test_kafka_python_transactions(broker, request):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    name = request.node.name
    topic, group = f"{name}-t", f"{name}-g"
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{name}-txn")
    try:
        producer.init_transactions()
        for tag, commit, offset in ((b"kept", True, 3), (b"dropped", False, 7)):
            producer.begin_transaction()
            for i in range(5):
                producer.send(topic, value=b"%s-%d" % (tag, i), partition=i % 2)
            producer.flush()
            producer.send_offsets_to_transaction({KTopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)}, group)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()

    def values(isolation: str) -> list[bytes]:
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, isolation_level=isolation, enable_auto_commit=False
        )
        try:
            consumer.assign([KTopicPartition(topic, 0), KTopicPartition(topic, 1)])
            consumer.seek_to_beginning()
            ends = consumer.end_offsets([KTopicPartition(topic, 0), KTopicPartition(topic, 1)])
            out = []
            deadline = time.monotonic() + 30
            while any(consumer.position(tp) < end for tp, end in ends.items()):
                assert time.monotonic() < deadline
                for records in consumer.poll(200).values():
                    out.extend(r.value for r in records)
            return sorted(out)
        finally:
            consumer.close()

    assert values("read_committed") == sorted(b"kept-%d" % i for i in range(5))
    assert values("read_uncommitted") == sorted(
        [b"kept-%d" % i for i in range(5)] + [b"dropped-%d" % i for i in range(5)]
    )
    assert _committed(broker.bootstrap, group, [(topic, 0)]) == {(topic, 0): 3}


@pytest.mark.slow
def test_an_abandoned_transaction_times_out_and_the_lso_moves_on(tmp_path):
    overrides = {
        "transaction.state.log.num.partitions": "4",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }
    broker = make_broker(tmp_path / "logs", **overrides).start()
    try:
        topic = "abandoned"
        create_topic(broker.bootstrap, topic, partitions=1)
        settings = {"bootstrap.servers": broker.bootstrap, "transaction.timeout.ms": 2000, "linger.ms": 5}
        abandoned = Producer({**settings, "transactional.id": "abandoned-txn"})
        abandoned.init_transactions(30)
        abandoned.begin_transaction()
        abandoned.produce(topic, value=b"never", partition=0)
        assert abandoned.flush(30) == 0  # written, then nothing more from this producer

        other = Producer({**settings, "transactional.id": "other-txn"})
        other.init_transactions(30)
        other.begin_transaction()
        other.produce(topic, value=b"after", partition=0)
        other.commit_transaction(30)
        # The coordinator aborts the abandoned transaction once its timeout passes; the LSO
        # then moves past it and a read_committed reader gets the later commit.
        deadline = time.monotonic() + 30
        while httpx.get(f"{broker.http_url}/transactions/abandoned-txn").json()["state"] != "CompleteAbort":
            assert time.monotonic() < deadline, "the abandoned transaction was not aborted"
            time.sleep(0.1)
        assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_committed", timeout=60)] == [b"after"]
        assert [v for *_, v in _read(broker.bootstrap, [(topic, 0)], "read_uncommitted")] == [b"never", b"after"]
        with pytest.raises(KafkaException) as failure:
            abandoned.commit_transaction(30)  # fenced: its epoch was bumped by the abort
        assert failure.value.args[0].code() in (
            KafkaError._FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_TXN_STATE,
        ), failure.value
    finally:
        broker.kill()


@pytest.mark.slow
def test_recovery_rebuilds_txnindex_and_lso(tmp_path):
    """kill -9 with committed, aborted and open transactions in small segments: after the
    restart both isolation levels read what they read before."""
    broker = make_broker(
        tmp_path / "logs", **{"transaction.state.log.num.partitions": "4", "log.segment.bytes": "2048"}
    ).start()
    try:
        topic = "recovered"
        create_topic(broker.bootstrap, topic, partitions=1)
        p = _producer(broker.bootstrap, "recovered-txn")
        p.init_transactions(30)
        for round_number in range(12):
            p.begin_transaction()
            for i in range(20):
                p.produce(topic, value=b"r%d-%02d" % (round_number, i), partition=0)
            assert p.flush(30) == 0
            if round_number % 2:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, value=b"open", partition=0)
        assert p.flush(30) == 0  # left open across the kill
        before = {iso: _read(broker.bootstrap, [(topic, 0)], iso) for iso in ("read_committed", "read_uncommitted")}
        assert len(before["read_committed"]) == 120 and len(before["read_uncommitted"]) == 241
        assert len(list((tmp_path / "logs" / f"{topic}-0").glob("*.log"))) >= 3  # markers in several segments
        broker.kill()
        for index in (tmp_path / "logs" / f"{topic}-0").glob("*.txnindex"):
            index.unlink()  # rebuilt from the log by recovery
        broker.start()
        after = {iso: _read(broker.bootstrap, [(topic, 0)], iso) for iso in ("read_committed", "read_uncommitted")}
        assert after == before
        p.commit_transaction(30)  # the open transaction ends as its producer decides
        assert _read(broker.bootstrap, [(topic, 0)], "read_committed")[-1][3] == b"open"
    finally:
        broker.kill()


@pytest.mark.slow
def test_exactly_once_consume_transform_produce_under_kill_9(broker, request):
    """N input records become exactly N output records and the group's offsets end at the
    input's end, while input keeps arriving and the processing process is kill -9'd at
    random moments and restarted."""
    name = request.node.name[:40]
    source, target, group = f"{name}-in", f"{name}-out", f"{name}-group"
    partitions = 3
    create_topic(broker.bootstrap, source, partitions=partitions)
    create_topic(broker.bootstrap, target, partitions=partitions)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    produced = 0

    def more_input(count: int = 150) -> None:
        nonlocal produced
        for i in range(produced, produced + count):
            p.produce(source, value=b"in-%05d" % i, partition=i % partitions)
        produced += count
        assert p.flush(30) == 0

    more_input(600)
    processor = [sys.executable, str(Path(__file__).with_name("eos_processor.py")), broker.bootstrap, source, target]
    rng = random.Random(20261124)
    killed = 0
    for _ in range(6):
        # Until killed it never finishes: its target is beyond any input.
        exited = kill_at_random([*processor, group, str(10**9)], rng, (1.5, 4.0), meanwhile=more_input)
        killed += exited is None
    assert killed >= 5
    finished = subprocess.run([*processor, group, str(produced)], timeout=180, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]

    out = [v for *_, v in _read(broker.bootstrap, [(target, q) for q in range(partitions)], "read_committed")]
    assert sorted(out) == [b"out-in-%05d" % i for i in range(produced)]  # each once: none lost, none twice
    ends = {(source, q): len(range(q, produced, partitions)) for q in range(partitions)}
    assert _committed(broker.bootstrap, group, list(ends)) == ends
