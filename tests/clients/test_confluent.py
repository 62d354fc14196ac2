"""confluent-kafka (librdkafka) against the broker: the idempotent producer, consumer groups
(exactly-once hand-over on close and on a killed member), offsets by timestamp, fetch
long-polling, DeleteRecords, topic auto-creation."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from client_helpers import create_topic, fetch_batches, kcat, raw_request, read_all, wait_for_topic
from loglake.protocol import ApiKey

SESSION_TIMEOUT_MS = 6000


# Idempotent producer ------------------------------------------------------------------


def test_idempotent_producer_acks_all(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=3)
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 50,  # many batches in flight per partition
        }
    )
    reports: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports[msg.partition()].append((msg.offset(), msg.value()))

    n = 1500
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3, on_delivery=on_delivery)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors

    for part, got in reports.items():
        offsets = [o for o, _ in got]
        # Delivery reports come in order with strictly increasing, gap-free offsets from 0.
        assert offsets == list(range(len(got))), f"partition {part}: {offsets[:20]}..."
        assert [v for _, v in got] == [b"v%d" % i for i in range(part, n, 3)]

    rows = read_all(broker.bootstrap, topic, partitions=3)
    assert len(rows) == n
    values = [r[3] for r in rows]
    assert sorted(Counter(values).values()) == [1] * n, "a record was stored twice"
    for part in range(3):
        assert [r[3] for r in rows if r[0] == part] == [b"v%d" % i for i in range(part, n, 3)]

    # The batches carry the producer id the broker handed out (InitProducerId) and
    # consecutive sequence numbers per partition.
    batches = fetch_batches(broker.bootstrap, topic, 0)
    pids = {h.producer_id for h, _ in batches}
    assert len(pids) == 1 and next(iter(pids)) >= 0
    seq = 0
    for h, records in batches:
        assert h.base_sequence == seq
        seq += len(records)
    assert seq == len(reports[0])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_idempotent_producer_across_broker_kill(tmp_path, topic):
    """The broker is SIGKILLed and restarted while an idempotent producer is sending:
    librdkafka reconnects and resends what was in flight, and the records end up stored
    once each, in order, with no gap. (A kill rarely falls between an append and its
    response; lost responses are tested deterministically with the proxy below.)"""
    from client_helpers import make_broker

    b = make_broker(tmp_path / "logs")
    b.start()
    try:
        create_topic(b.bootstrap, topic)
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 20,
                "message.timeout.ms": 60000,
            }
        )
        acked: list[tuple[int, bytes]] = []
        errors = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
            else:
                acked.append((msg.offset(), msg.value()))

        def kill_and_restart():
            time.sleep(0.4)
            b.kill()
            b.start()

        restarter = threading.Thread(target=kill_and_restart)
        restarter.start()
        n = 5000
        for i in range(n):
            while True:
                try:
                    p.produce(topic, value=b"%06d" % i, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
            if i % 50 == 0:
                time.sleep(0.005)  # spread the sends over the kill
        restarter.join()
        assert p.flush(60) == 0
        assert not errors, errors[:5]
        assert sorted(o for o, _ in acked) == list(range(n)), "acknowledged offsets repeat or skip"
        values = [r[3] for r in read_all(b.bootstrap, topic)]
        assert values == [b"%06d" % i for i in range(n)], "records stored twice, lost or out of order"
    finally:
        if b.proc is not None:
            b.kill()


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_lost_produce_responses(broker, topic, idempotent):
    """A proxy drops three Produce responses (closing the connection after the broker has
    appended): librdkafka resends the batches that were in flight. The idempotent
    producer's copies are recognised by their sequence numbers and stored once; a plain
    producer's are stored again, which shows the responses really were lost after the
    append. How many batches were in flight at each drop is timing: a batch in flight at
    two drops is stored three times, so only the bounds are asserted."""
    from lossy_proxy import LossyProxy

    create_topic(broker.bootstrap, topic)
    proxy = LossyProxy(broker.bootstrap)
    try:
        proxy.drop_produce_responses(3, 10, 25)
        p = Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "enable.idempotence": idempotent,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 20,
                "retries": 10,
            }
        )
        acked: list[int] = []
        errors = []
        n = 2000
        for i in range(n):
            p.produce(
                topic,
                value=b"%05d" % i,
                partition=0,
                on_delivery=lambda err, msg: errors.append(err) if err else acked.append(msg.offset()),
            )
            p.poll(0)
            if i % 40 == 0:
                time.sleep(0.01)  # many requests, so the 3rd, 10th and 25th exist
        assert p.flush(60) == 0
        assert not errors, errors[:5]
        assert proxy.dropped == 3
    finally:
        proxy.close()
    values = [r[3] for r in read_all(broker.bootstrap, topic)]
    counts = Counter(values)
    assert set(counts) == {b"%05d" % i for i in range(n)}, "records were lost"
    if idempotent:
        assert values == [b"%05d" % i for i in range(n)], "stored twice or out of order"
        assert sorted(acked) == list(range(n)), "delivery reports repeat or skip offsets"
    else:
        # Each lost response adds at most one copy of a record.
        assert 2 <= max(counts.values()) <= 1 + 3, "the resent batches should have been stored again"


def test_two_idempotent_producers_get_distinct_ids(broker, topic):
    create_topic(broker.bootstrap, topic)
    for _ in range(2):
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        p.produce(topic, value=b"x")
        assert p.flush(20) == 0
    pids = [h.producer_id for h, _ in fetch_batches(broker.bootstrap, topic)]
    assert len(pids) == 2 and pids[0] != pids[1] and min(pids) >= 0


# Consumer groups ----------------------------------------------------------------------


class Member:
    """One group member in this process: commits what it read, synchronously, after each poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe([topic])
        self.records: list[tuple[int, int, bytes]] = []
        self.closed = False

    def poll(self, timeout: float = 0.05) -> None:
        msgs = self.consumer.consume(num_messages=500, timeout=timeout)
        got = []
        for m in msgs:
            if m.error():
                raise AssertionError(f"{self.name}: {m.error()}")
            got.append((m.partition(), m.offset(), m.value()))
        if got:
            self.consumer.commit(asynchronous=False)
            self.records += got

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def wait_balanced(members, partitions: int, timeout: float = 30.0, settle: float = 1.0) -> dict[str, set[int]]:
    """Poll every member until their assignments are disjoint, non-empty and cover the topic,
    and stay so for `settle` seconds; the assignment per member."""
    deadline = time.monotonic() + timeout
    stable_since = None
    last = None
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        current = {m.name: m.assignment() for m in members}
        sets = list(current.values())
        ok = all(sets) and sum(map(len, sets)) == partitions and set().union(*sets) == set(range(partitions))
        if ok and current == last:
            if stable_since is None:
                stable_since = time.monotonic()
            elif time.monotonic() - stable_since >= settle:
                return current
        else:
            stable_since = None
        last = current
    raise AssertionError(f"group never balanced: {last}")


def consume_until(members, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(m.records) for m in members) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {sum(len(m.records) for m in members)} of {count} records consumed")
        for m in members:
            m.poll()
    # A little longer: anything beyond `count` would be a duplicate.
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        for m in members:
            m.poll()


def produce_round_robin(bootstrap: str, topic: str, partitions: int, prefix: str, n: int) -> set[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    values = [f"{prefix}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(30) == 0
    return set(values)


@pytest.mark.timeout(120)
def test_group_of_three_exactly_once_and_handover_on_close(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=6)
    group = f"{topic}-g"
    members = [Member(broker.bootstrap, group, topic, f"m{i}") for i in range(3)]
    try:
        assignment = wait_balanced(members, 6)
        assert all(len(a) == 2 for a in assignment.values()), assignment

        first = produce_round_robin(broker.bootstrap, topic, 6, "first", 600)
        consume_until(members, 600)
        seen = [r[2] for m in members for r in m.records]
        assert Counter(seen) == Counter(first), "each record exactly once across the group"
        for m in members:
            assert {r[0] for r in m.records} <= assignment[m.name], f"{m.name} read outside its assignment"

        # A member leaves cleanly: its partitions move to the other two at once.
        leaving = members[2]
        leaving_partitions = assignment[leaving.name]
        leaving.close()
        before = {m.name: len(m.records) for m in members[:2]}
        started = time.monotonic()
        assignment2 = wait_balanced(members[:2], 6, settle=0.5)
        assert time.monotonic() - started < SESSION_TIMEOUT_MS / 1000, (
            "a LeaveGroup should not wait for the session timeout"
        )
        assert set().union(*assignment2.values()) == set(range(6))

        second = produce_round_robin(broker.bootstrap, topic, 6, "second", 600)
        consume_until(members[:2], 600 + sum(before.values()))
        new = [r for m in members[:2] for r in m.records[before[m.name] :]]
        # Nothing of the first round was read again (the leaver's commits were honoured) ...
        assert Counter(r[2] for r in new) == Counter(second)
        # ... and the leaver's partitions are consumed by the others.
        assert leaving_partitions <= {r[0] for r in new}
    finally:
        for m in members:
            m.close()


_KILLED_MEMBER = r"""
import json, sys
from confluent_kafka import Consumer
bootstrap, group, topic, session_ms = sys.argv[1:5]
def show(kind):
    def cb(consumer, partitions):
        print(json.dumps({kind: sorted(p.partition for p in partitions)}), flush=True)
    return cb
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "doomed",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 300,
              "partition.assignment.strategy": "range"})
c.subscribe([topic], on_assign=show("assigned"), on_revoke=show("revoked"))
while True:
    msgs = c.consume(num_messages=500, timeout=0.05)
    msgs = [m for m in msgs if not m.error()]
    if msgs:
        c.commit(asynchronous=False)  # committed before reported: what it reports is safe
        for m in msgs:
            print(json.dumps({"msg": [m.partition(), m.offset(), m.value().decode()]}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_killed_member_partitions_move_after_session_timeout(broker, topic):
    """A member SIGKILLed (no LeaveGroup) keeps its partitions until its session expires;
    then the survivors take them over and resume from its commits."""
    create_topic(broker.bootstrap, topic, partitions=6)
    group = f"{topic}-g"
    doomed = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MEMBER, broker.bootstrap, group, topic, str(SESSION_TIMEOUT_MS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[dict] = queue.Queue()

    def pump() -> None:
        for line in doomed.stdout:
            lines.put(json.loads(line))

    threading.Thread(target=pump, daemon=True).start()
    doomed_assignment: set[int] = set()
    doomed_records: list[tuple[int, int, bytes]] = []

    def drain() -> None:
        nonlocal doomed_assignment
        while True:
            try:
                event = lines.get_nowait()
            except queue.Empty:
                return
            if "assigned" in event:
                doomed_assignment = set(event["assigned"])
            elif "revoked" in event:
                doomed_assignment = set()
            else:
                p, o, v = event["msg"]
                doomed_records.append((p, o, v.encode()))

    members = [Member(broker.bootstrap, group, topic, f"m{i}") for i in range(2)]
    try:
        # Wait for a stable three-way split.
        deadline = time.monotonic() + 40
        stable = 0
        while True:
            assert time.monotonic() < deadline, (
                f"never balanced: {doomed_assignment}, {[m.assignment() for m in members]}"
            )
            assert doomed.poll() is None, doomed.stderr.read()
            for m in members:
                m.poll()
            drain()
            sets = [doomed_assignment] + [m.assignment() for m in members]
            if all(sets) and sum(map(len, sets)) == 6 and set().union(*sets) == set(range(6)):
                stable += 1
                if stable >= 20:
                    break
            else:
                stable = 0
        doomed_partitions = set(doomed_assignment)

        first = produce_round_robin(broker.bootstrap, topic, 6, "first", 300)
        deadline = time.monotonic() + 30
        while sum(len(m.records) for m in members) + len(doomed_records) < 300:
            assert time.monotonic() < deadline, "first round not consumed"
            for m in members:
                m.poll()
            drain()
        assert Counter([r[2] for r in doomed_records] + [r[2] for m in members for r in m.records]) == Counter(first)
        assert {r[0] for r in doomed_records} == doomed_partitions

        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
        killed_at = time.monotonic()
        before = {m.name: len(m.records) for m in members}
        assignment = wait_balanced(members, 6, timeout=SESSION_TIMEOUT_MS / 1000 + 30, settle=0.5)
        took = time.monotonic() - killed_at
        assert set().union(*assignment.values()) == set(range(6))
        # The session had to expire first (a little slack for the heartbeat that noticed).
        assert took >= SESSION_TIMEOUT_MS / 1000 - 2.0, f"partitions moved after {took:.1f}s"

        second = produce_round_robin(broker.bootstrap, topic, 6, "second", 300)
        consume_until(members, 300 + sum(before.values()))
        new = [r for m in members for r in m.records[before[m.name] :]]
        assert Counter(r[2] for r in new) == Counter(second), "the survivors re-read or missed records"
        assert doomed_partitions <= {r[0] for r in new}
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait()
        for m in members:
            m.close()


def test_committed_offsets_and_describe_via_admin(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_round_robin(broker.bootstrap, topic, 2, "x", 10)
    group = f"{topic}-g"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False)
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in got] == [(0, 3), (1, 5)]
    finally:
        c.close()
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    result = fut.result(timeout=20)
    assert sorted((tp.partition, tp.offset) for tp in result.topic_partitions if tp.topic == topic) == [(0, 3), (1, 5)]
    listed = admin.list_consumer_groups().result(timeout=20)
    assert group in {g.group_id for g in listed.valid}


def test_commit_for_unknown_partitions_is_refused(broker, topic):
    """As Kafka: offsets for topics or partitions the cluster lacks are answered
    UNKNOWN_TOPIC_OR_PARTITION and not kept; the others in the request are committed."""
    create_topic(broker.bootstrap, topic, partitions=2)
    group = f"{topic}-g"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as e:
            c.commit(
                offsets=[
                    TopicPartition(f"{topic}-missing", 0, 5),
                    TopicPartition(topic, 7, 3),
                    TopicPartition(topic, 1, 4),
                ],
                asynchronous=False,
            )
        assert e.value.args[0].code() == 3  # UNKNOWN_TOPIC_OR_PART
        got = c.committed(
            [TopicPartition(f"{topic}-missing", 0), TopicPartition(topic, 7), TopicPartition(topic, 1)], timeout=10
        )
        assert [tp.offset for tp in got] == [-1001, -1001, 4]  # OFFSET_INVALID: nothing kept
    finally:
        c.close()
    # The per-partition codes of a raw OffsetCommit v6 (a simple commit: no generation).
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1},
                    {"partition_index": 2, "committed_offset": 1},
                ],
            },
            {"name": f"{topic}-missing", "partitions": [{"partition_index": 0, "committed_offset": 1}]},
        ],
    }
    response = raw_request(broker.bootstrap, ApiKey.OFFSET_COMMIT, 6, body)
    codes = {(t["name"], p["partition_index"]): p["error_code"] for t in response["topics"] for p in t["partitions"]}
    assert codes == {(topic, 0): 0, (topic, 2): 3, (f"{topic}-missing", 0): 3}


# Offsets by timestamp, long-poll, DeleteRecords, auto-creation --------------------------


def test_offsets_for_times(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=1)
    base = int(time.time() * 1000) - 100_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=b"t%d" % i, partition=0, timestamp=base + i * 1000)
        p.flush(10)  # one batch per record: the time index sees each
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-g"})
    try:

        def lookup(ts: int) -> int:
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None, tp.error
            return tp.offset

        assert lookup(base - 5000) == 0
        assert lookup(base) == 0
        assert lookup(base + 3000) == 3
        assert lookup(base + 3500) == 4
        assert lookup(base + 9000) == 9
        assert lookup(base + 9001) == OFFSET_END  # none that late: -1
        # And a consumer seeking there reads from that record.
        (tp,) = c.offsets_for_times([TopicPartition(topic, 0, base + 6500)], timeout=10)
        c.assign([tp])
        msg = None
        deadline = time.monotonic() + 10
        while msg is None and time.monotonic() < deadline:
            msg = c.poll(0.5)
        assert msg is not None and msg.offset() == 7 and msg.value() == b"t7" and msg.timestamp()[1] == base + 7000
    finally:
        c.close()


def test_list_offsets_max_timestamp(broker, topic):
    """KIP-734 (ListOffsets v7, timestamp -3): the record with the largest timestamp, not
    the first record at or after the timestamp -3."""
    from confluent_kafka.admin import OffsetSpec

    create_topic(broker.bootstrap, topic, partitions=2)
    base = int(time.time() * 1000) - 100_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    # Partition 0: out-of-order timestamps, the largest at offset 2 (in a later batch than
    # the first record). Partition 1: empty.
    for i, delta in enumerate([5000, 1000, 9000, 3000]):
        p.produce(topic, value=b"%d" % i, partition=0, timestamp=base + delta)
        p.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def offsets(spec):
        futures = admin.list_offsets(
            {TopicPartition(topic, 0): spec, TopicPartition(topic, 1): spec}, request_timeout=10
        )
        return {tp.partition: (r.offset, r.timestamp) for tp, f in futures.items() for r in [f.result(timeout=20)]}

    assert offsets(OffsetSpec.max_timestamp()) == {0: (2, base + 9000), 1: (-1, -1)}
    assert offsets(OffsetSpec.latest())[0][0] == 4
    assert offsets(OffsetSpec.earliest())[0][0] == 0
    # By timestamp: the earliest offset whose timestamp is at least the one asked for.
    assert offsets(OffsetSpec.for_timestamp(base + 4000))[0] == (0, base + 5000)
    assert offsets(OffsetSpec.for_timestamp(base + 6000))[0] == (2, base + 9000)
    assert offsets(OffsetSpec.for_timestamp(base + 9001))[0] == (-1, -1)
    # The same as a raw ListOffsets v7.
    body = {
        "replica_id": -1,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -3}]}],
    }
    (part,) = raw_request(broker.bootstrap, ApiKey.LIST_OFFSETS, 7, body)["topics"][0]["partitions"]
    assert (part["error_code"], part["offset"], part["timestamp"]) == (0, 2, base + 9000)


def test_clients_cannot_write_to_consumer_offsets(broker, topic):
    """Only the broker appends to __consumer_offsets (as Kafka): a client's record there that
    the coordinator cannot decode would stop it loading the partition after a restart."""
    # Make sure the internal topic exists: a group lookup creates it.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-g"})
    c.committed([TopicPartition("anything", 0)], timeout=20)
    c.close()
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 10000})
    p.produce(
        "__consumer_offsets",
        key=b"\x00\x01\x00\x05gde",
        value=b"x",
        partition=0,
        on_delivery=lambda e, m: errors.append(e),
    )
    p.flush(20)
    assert len(errors) == 1 and errors[0] is not None and errors[0].code() == 17, errors  # INVALID_TOPIC_EXCEPTION
    # kcat -P fails too.
    proc = kcat(broker.bootstrap, "-P", "-t", "__consumer_offsets", "-p", "1", input=b"junk\n", check=False)
    assert b"Broker: Invalid topic" in proc.stderr, proc.stderr
    # And a raw Produce gets the error for every partition named.
    from loglake.record.batch import encode_batch

    records = encode_batch([(b"\x00\x01\x00", b"x", [], None)], int(time.time() * 1000))
    body = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": "__consumer_offsets", "partition_data": [{"index": i, "records": records} for i in range(4)]}
        ],
    }
    (t,) = raw_request(broker.bootstrap, ApiKey.PRODUCE, 9, body)["responses"]
    assert sorted((r["index"], r["error_code"]) for r in t["partition_responses"]) == [(i, 17) for i in range(4)]
    # Group offsets are unaffected.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-g", "enable.auto.commit": False})
    create_topic(broker.bootstrap, topic)
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 0
    c.close()


def test_fetch_long_poll_returns_promptly_when_data_arrives(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_round_robin(broker.bootstrap, topic, 1, "old", 3)
    # With fetch.wait.max.ms at 8 s, a record must arrive by the broker waking the parked
    # fetch, not by the fetch timing out.
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"{topic}-g",
            "fetch.wait.max.ms": 8000,
            "socket.timeout.ms": 30000,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_END)])
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            assert c.poll(0.2) is None  # settles at the end, fetch parked on the broker
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        p.produce(topic, value=b"new", partition=0)
        assert p.flush(10) == 0
        sent = time.monotonic()
        msg = None
        while msg is None and time.monotonic() - sent < 15:
            msg = c.poll(0.05)
        latency = time.monotonic() - sent
        assert msg is not None and msg.value() == b"new" and msg.offset() == 3
        assert latency < 2.0, f"record arrived after {latency:.2f}s: the fetch was not woken"
    finally:
        c.close()


def test_fetch_min_bytes_waits_for_max_wait(broker, topic):
    """A raw Fetch at the end of the log with min_bytes=1 waits about max_wait_ms."""
    create_topic(broker.bootstrap, topic, partitions=1)
    body = {
        "max_wait_ms": 700,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
        ],
    }
    started = time.monotonic()
    response = raw_request(broker.bootstrap, ApiKey.FETCH, 12, body)
    took = time.monotonic() - started
    (part,) = response["responses"][0]["partitions"]
    assert part["error_code"] == 0 and part["high_watermark"] == 0 and not part["records"]
    assert 0.6 <= took < 3.0, took


def test_delete_records(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_round_robin(broker.bootstrap, topic, 2, "d", 20)  # 10 per partition
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records(
        [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, OFFSET_END)], operation_timeout=10
    )
    results = {tp.partition: f.result(timeout=20) for tp, f in futures.items()}
    # The result is the new low watermark (OFFSET_END: up to the high watermark).
    assert results[0].low_watermark == 4
    assert results[1].low_watermark == 10
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-g"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (10, 10)
    finally:
        c.close()
    rows = read_all(broker.bootstrap, topic, partitions=2)
    assert [(r[0], r[1]) for r in rows] == [(0, o) for o in range(4, 10)]
    # kcat -o beginning starts at the new log start too.
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o\n").stdout.decode()
    assert out.split() == [str(o) for o in range(4, 10)]
    # Deleting beyond the high watermark is refused.
    futures = admin.delete_records([TopicPartition(topic, 0, 11)], operation_timeout=10)
    with pytest.raises(KafkaException) as e:
        next(iter(futures.values())).result(timeout=20)
    assert "OFFSET_OUT_OF_RANGE" in str(e.value) or "out of range" in str(e.value).lower()


def test_producing_to_unknown_topic_auto_creates_it(broker, topic):
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    delivered = []
    p.produce(
        topic, value=b"first", on_delivery=lambda err, msg: delivered.append((err, msg.partition(), msg.offset()))
    )
    assert p.flush(20) == 0
    assert delivered == [(None, 0, 0)]
    wait_for_topic(broker.bootstrap, topic, 1)  # num.partitions=1
    assert [r[3] for r in read_all(broker.bootstrap, topic)] == [b"first"]


def _created(bootstrap: str, name: str, timeout_s: float = 15.0) -> dict:
    """The topic's Metadata (asked without creating it) once it exists with a leader."""
    body = {"topics": [{"name": name}], "allow_auto_topic_creation": False}
    deadline = time.monotonic() + timeout_s
    while True:
        (t,) = raw_request(bootstrap, ApiKey.METADATA, 9, body)["topics"]
        if t["error_code"] == 0 and all(p["leader_id"] >= 0 for p in t["partitions"]):
            return t
        assert time.monotonic() < deadline, t
        time.sleep(0.05)


def test_metadata_for_unknown_topic_auto_creates_it(broker, topic):
    # allow_auto_topic_creation=false: an error and no topic ...
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    (t,) = raw_request(broker.bootstrap, ApiKey.METADATA, 9, body)["topics"]
    assert t["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics
    # ... true (and v0-v3, which always allow it): created with the broker defaults, in the
    # background; the answer is LEADER_NOT_AVAILABLE at once, as Kafka's.
    body["allow_auto_topic_creation"] = True
    (t,) = raw_request(broker.bootstrap, ApiKey.METADATA, 9, body)["topics"]
    assert (t["error_code"], t["name"]) == (5, topic)  # LEADER_NOT_AVAILABLE
    assert len(_created(broker.bootstrap, topic)["partitions"]) == 1
    other = topic + "-v1"
    (t,) = raw_request(broker.bootstrap, ApiKey.METADATA, 1, {"topics": [{"name": other}]})["topics"]
    assert (t["error_code"], t["name"]) == (5, other)
    assert len(_created(broker.bootstrap, other)["partitions"]) == 1
    listed = admin.list_topics(timeout=10).topics
    assert topic in listed and other in listed
    # A librdkafka producer asking for the topic's metadata creates it as well.
    third = topic + "-rd"
    md = Producer({"bootstrap.servers": broker.bootstrap}).list_topics(third, timeout=10)
    wait_for_topic(broker.bootstrap, third, 1)
    assert third in admin.list_topics(timeout=10).topics, md.topics


# Broker restart ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_committed_offsets_survive_broker_restart(tmp_path, topic):
    from client_helpers import make_broker

    b = make_broker(tmp_path / "logs")
    b.start()
    try:
        create_topic(b.bootstrap, topic, partitions=3)
        first = produce_round_robin(b.bootstrap, topic, 3, "before", 30)
        group = f"{topic}-g"
        m = Member(b.bootstrap, group, topic, "first")
        consume_until([m], 30)
        assert Counter(r[2] for r in m.records) == Counter(first)
        m.close()
        # Not yet consumed by the group, produced before the restart.
        pending = produce_round_robin(b.bootstrap, topic, 3, "pending", 15)

        assert b.stop() == 0, b.output()
        b.start()
        wait_for_topic(b.bootstrap, topic, 3)

        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        committed = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=20)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 10), (1, 10), (2, 10)]
        c.close()

        after = produce_round_robin(b.bootstrap, topic, 3, "after", 15)
        m2 = Member(b.bootstrap, group, topic, "second")
        consume_until([m2], 30)
        assert Counter(r[2] for r in m2.records) == Counter(pending | after), "re-read or missed records"
        assert min(r[1] for r in m2.records) == 10
        m2.close()
        # Every record is still stored.
        assert len(read_all(b.bootstrap, topic, partitions=3)) == 60
    finally:
        if b.proc is not None:
            b.stop()
