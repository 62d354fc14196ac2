"""The broker's log cleaner under real clients (confluent-kafka) and real broker processes:
latest value per key at unchanged offsets, tombstones gone after delete.retention.ms,
consumer groups resuming over a cleaned __consumer_offsets, kill -9 at each step of a
swap, and readers and producers running while segments are swapped."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from client_helpers import (
    Record,
    create_topic,
    fetch_batches,
    idempotent_producer,
    make_broker,
    produce_keyed,
    read_all,
    serve,
    unique_name,
)

from harness.process import BrokerProcess

# A cleaner that looks for work every 50 ms and small segments, so that a few hundred
# records make several rolled segments to clean.
CLEANER = {"log.cleaner.backoff.ms": "50"}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "8192",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1500",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    # Few __transaction_state partitions keep the first FindCoordinator quick.
    txn = {"transaction.state.log.num.partitions": "2"}
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **CLEANER, **txn))


def versions_and_tombstones(bootstrap: str, topic: str, keys: int = 100, rounds: int = 6) -> tuple[list[Record], int]:
    """Several versions of each key, then tombstones for a tenth of them, then filler that
    rolls the segment, so that everything before it is cleanable. Returns what was produced
    and the offset where the filler starts."""
    rows = [(b"key-%03d" % k, b"value-%d-%03d" % (r, k) * 4) for r in range(rounds) for k in range(keys)]
    rows += [(b"key-%03d" % k, None) for k in range(0, keys, 10)]
    produced = produce_keyed(bootstrap, topic, rows)
    filler = produce_keyed(bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)])
    return produced, filler[0][0]


def latest_per_key(records: list[Record]) -> dict[bytes, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, key, value in records}


def compaction_state(broker: BrokerProcess, topic: str, partition: int = 0) -> dict:
    r = httpx.get(f"{broker.http_url}/topics/{topic}", timeout=10)
    r.raise_for_status()
    return r.json()["partitions"][partition]["compaction"]


def wait_until(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def cleaned_up_to(broker: BrokerProcess, topic: str, offset: int) -> bool:
    last = compaction_state(broker, topic)["last_cleaning"]
    return last is not None and last["end_offset"] >= offset


def below(records: list[tuple[int, int, bytes | None, bytes | None]], end: int) -> list[Record]:
    return [(o, k, v) for _, o, k, v in records if o < end]


def test_a_cleaning_keeps_the_latest_value_of_each_key_at_its_offset(broker: BrokerProcess) -> None:
    topic = unique_name("compacted")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    produced, end = versions_and_tombstones(broker.bootstrap, topic)
    latest = latest_per_key(produced)
    wait_until(lambda: cleaned_up_to(broker, topic, end), "a cleaning")

    records = below(read_all(broker.bootstrap, topic), end)
    # Exactly one record per key, the latest produced, at the offset it was produced at;
    # tombstones are still there (delete.retention.ms has not passed since the cleaning).
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == records
    assert compaction_state(broker, topic)["dirty_ratio"] is not None

    # After delete.retention.ms the next cleaning drops the tombstones.
    def tombstones_gone() -> bool:
        return all(v is not None for _, _, v in below(read_all(broker.bootstrap, topic), end))

    wait_until(tombstones_gone, "the tombstones to go")
    expected = sorted((o, k, v) for k, (o, v) in latest.items() if v is not None)
    assert below(read_all(broker.bootstrap, topic), end) == expected


def test_keyless_records_are_refused_on_a_compacted_topic(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, Producer

    topic = unique_name("keyless")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0})
    errors = []
    producer.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]
    r = httpx.post(
        f"{broker.http_url}/topics/{topic}",
        json={"records": [{"value": 1}]},
        headers={"content-type": "application/vnd.kafka.json.v2+json"},
        timeout=10,
    )
    assert r.status_code >= 400 and "without key" in r.text


def offsets_dir_size(broker: BrokerProcess) -> int:
    return sum(p.stat().st_size for p in (broker.log_dir / "__consumer_offsets-0").glob("*.log"))


@pytest.mark.slow
def test_consumer_offsets_are_cleaned_and_a_group_resumes_after_restart(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    broker = make_broker(
        tmp_path / "logs", **CLEANER, **{"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "4096"}
    )
    for _ in serve(broker):
        topic = unique_name("plain")
        create_topic(broker.bootstrap, topic)
        produce_keyed(broker.bootstrap, topic, [(b"k%d" % i, b"v%d" % i) for i in range(100)])
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "resuming", "enable.auto.commit": False}
        )
        for i in range(1, 301):  # many commits of one partition: one key, many versions
            consumer.commit(offsets=[TopicPartition(topic, 0, i % 60 + 1)], asynchronous=False)
        consumer.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
        consumer.close()
        written = sum(1 for _ in range(302)) * 60  # at least ~60 bytes a commit record batch
        wait_until(lambda: offsets_dir_size(broker) < written / 4, "__consumer_offsets to shrink")
        assert compaction_state(broker, "__consumer_offsets")["last_cleaning"] is not None

        broker.kill()  # the coordinator reloads the cleaned partition at start-up
        broker.start()
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "resuming", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        try:
            deadline = time.monotonic() + 30
            msg = None
            while msg is None or msg.error():
                assert time.monotonic() < deadline, "no record after the restart"
                msg = consumer.poll(0.2)
            assert msg.offset() == 42
        finally:
            consumer.close()


@pytest.mark.slow
@pytest.mark.parametrize("step", ["after-cleaned", "after-swap", "mid-deleted", "after-deleted", "after-rename"])
def test_kill_9_at_each_swap_step_recovers_old_or_new_segments(
    tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGLAKE_FAULT", f"cleaner-{step}")
    broker = make_broker(tmp_path / "logs", **CLEANER).start()
    try:
        topic = unique_name("crash")
        create_topic(broker.bootstrap, topic, config={**COMPACTED, "cleanup.policy": "delete"})
        produced, end = versions_and_tombstones(broker.bootstrap, topic)
        before = below(read_all(broker.bootstrap, topic), end)
        assert before == produced
        # The cleaner dies at `step` of its first swap, once the topic is compacted.
        httpx.patch(
            f"{broker.http_url}/topics/{topic}", json={"configs": {"cleanup.policy": "compact"}}, timeout=10
        ).raise_for_status()
        assert broker.proc is not None
        assert broker.proc.wait(60) == -9
        broker.proc = None
    finally:
        monkeypatch.delenv("LOGLAKE_FAULT")
        broker.kill()
    latest = latest_per_key(produced)
    broker.overrides["log.cleaner.enable"] = "false"
    broker.start()
    try:
        after = below(read_all(broker.bootstrap, topic), end)
        leftovers = [
            p.name
            for p in (broker.log_dir / f"{topic}-0").iterdir()
            if p.suffix in (".cleaned", ".swap", ".deleted", ".swap-end")
        ]
        assert leftovers == []
        assert set(after) <= set(produced) and [o for o, _, _ in after] == sorted({o for o, _, _ in after})
        assert set(sorted((o, k, v) for k, (o, v) in latest.items())) <= set(after)
        if step == "after-cleaned":
            assert after == produced  # the old segments
        else:
            assert len(after) < len(produced)  # the first group's new segment
    finally:
        assert broker.stop() == 0


@pytest.mark.slow
def test_readers_and_producers_go_on_while_segments_are_swapped(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    topic = unique_name("busy")
    create_topic(broker.bootstrap, topic, config={**COMPACTED, "delete.retention.ms": "600000"})
    stop = threading.Event()
    produced: list[Record] = []

    failures: list[BaseException] = []

    def produce() -> None:
        # One producer throughout: each idempotent producer's last batch outlives cleanings
        # (emptied), and thousands of them would fill a small fetch with no record at all.
        producer = idempotent_producer(broker.bootstrap)
        round_ = 0
        while not stop.is_set():
            try:
                rows = [(b"k%02d" % k, b"r%d" % round_ * 20) for k in range(50)]
                produced.extend(produce_keyed(broker.bootstrap, topic, rows, producer))
            except BaseException as exc:
                failures.append(exc)
                return
            round_ += 1
            # A steady rate (at most 1000 records a second), not as fast as the machine allows:
            # on a loaded machine an unthrottled producer grows the dirty part faster than the
            # cleaner (one thread sharing the broker's CPU) cleans it, and the swaps this test
            # is about come too rarely. Reads and swaps still overlap on every pass.
            stop.wait(0.05)

    producer = threading.Thread(target=produce)
    producer.start()
    cleanings = []
    passes = 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 20,
            "max.partition.fetch.bytes": 16384,  # many fetches a pass: more of them meet a swap
        }
    )
    try:
        deadline = time.monotonic() + 120
        while len(set(cleanings)) < 4 or passes < 4:
            assert time.monotonic() < deadline, f"{passes} passes, cleanings {cleanings}"
            consumer.assign([TopicPartition(topic, 0, 0)])
            last = -1
            while True:
                msg = consumer.poll(1)
                if msg is None:
                    continue
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    break
                assert msg.offset() > last, f"offset {msg.offset()} after {last}"
                last = msg.offset()
            passes += 1
            state = compaction_state(broker, topic)["last_cleaning"]
            if state is not None:
                cleanings.append(state["end_offset"])
    finally:
        stop.set()
        producer.join()
        consumer.close()
    assert not failures, failures
    final = below(read_all(broker.bootstrap, topic), 10**9)
    assert latest_per_key(final) == latest_per_key(produced)


def markers_below(broker: BrokerProcess, topic: str, end: int) -> list[int]:
    """Offsets of the control batches below `end` (a raw read_uncommitted Fetch)."""
    offsets, offset = [], 0
    while offset < end:
        batches = fetch_batches(broker.bootstrap, topic, offset=offset)
        offsets += [h.base_offset for h, _ in batches if h.is_control and h.base_offset < end]
        offset = batches[-1][0].next_offset
    return offsets


def test_transactions_on_a_compacted_topic(broker: BrokerProcess) -> None:
    """A confluent-kafka transactional producer commits and aborts among plain records and
    tombstones; after cleanings both isolation levels read the latest committed value per
    key and never an aborted one, and markers go once their transactions' data is gone."""
    from confluent_kafka import Producer

    topic = unique_name("compacted-txn")
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 5, "acks": "all"})
    txn.init_transactions(30)
    keys = [b"key-%02d" % k for k in range(50)]

    def transaction(rows: list[tuple[bytes, bytes | None]], commit: bool) -> None:
        txn.begin_transaction()
        produce_keyed(broker.bootstrap, topic, rows, producer=txn)  # flushed: abort purges unsent records
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)

    transaction([(k, b"c1-" + k) for k in keys], commit=True)
    produce_keyed(broker.bootstrap, topic, [(b"plain-%d" % i, b"plain") for i in range(10)])
    transaction([(k, b"aborted-" + k) for k in keys], commit=False)
    third = [(k, None if 30 <= i < 35 else b"c3-" + k) for i, k in enumerate(keys)]
    transaction(third, commit=True)
    transaction([(k, b"aborted-again-" + k) for k in keys], commit=False)
    expected = {k: v for k, v in third} | {b"plain-%d" % i: b"plain" for i in range(10)}
    # Filler rolls the segment, so that everything before it is cleanable.
    end = produce_keyed(broker.bootstrap, topic, [(b"filler", bytes(200)) for _ in range(60)])[0][0]
    assert len(markers_below(broker, topic, end)) == 4

    wait_until(lambda: cleaned_up_to(broker, topic, end), "a cleaning")
    for isolation in ("read_committed", "read_uncommitted"):
        records = below(read_all(broker.bootstrap, topic, isolation=isolation), end)
        assert {k: v for _, k, v in records} == expected, isolation
        assert len(records) == len(expected), isolation  # one record per key
        assert not [v for _, _, v in records if v is not None and v.startswith(b"aborted")], isolation

    # Later cleanings drop the tombstones, and the markers of the first two transactions
    # (all their data is gone). The third's commit stays with its data; the last abort
    # stays behind the producer's last batch, kept empty for its sequence.
    def settled() -> bool:
        return len(markers_below(broker, topic, end)) == 2

    wait_until(settled, "the markers of transactions without data to go")
    expected = {k: v for k, v in expected.items() if v is not None}
    for isolation in ("read_committed", "read_uncommitted"):
        assert {k: v for _, k, v in below(read_all(broker.bootstrap, topic, isolation=isolation), end)} == expected
    # The producer still works: its fencing epoch and sequence were kept.
    transaction([(b"key-00", b"after")], commit=True)
