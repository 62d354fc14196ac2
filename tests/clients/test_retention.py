"""Retention on a live broker process, read through by confluent-kafka consumers: by time
(old timestamps, and a quiet topic rolled by segment.ms), by size, a dynamic config
change, and `loglake topics describe` showing the log start, end and size."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from client_helpers import create_topic, make_broker, serve
from harness.process import BrokerProcess

DEADLINE_S = 60
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"log.retention.check.interval.ms": "100", "file.delete.delay.ms": "100"}
    yield from serve(make_broker(tmp_path_factory.mktemp("retention") / "logs", **overrides))


def partition_view(broker: BrokerProcess, topic: str) -> dict:
    return httpx.get(f"{broker.http_url}/topics/{topic}", timeout=10).json()["partitions"][0]


def wait_for(broker: BrokerProcess, topic: str, condition, what: str) -> dict:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        view = partition_view(broker, topic)
        if condition(view):
            return view
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {view}"
        time.sleep(0.05)


def produce(broker: BrokerProcess, topic: str, values: list[bytes], timestamp_ms: int | None = None) -> None:
    # One record per request and linger 0: each batch is small, so segments roll often.
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    errors = []
    for value in values:
        kwargs = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
        p.produce(topic, value=value, on_delivery=lambda err, _: err and errors.append(err), **kwargs)
        p.flush(30)
    assert not errors, errors


def consume_from_zero(broker: BrokerProcess, topic: str, group: str, end: int) -> tuple[int, list[bytes]]:
    """Ask for offset 0 (removed by retention): the broker answers OFFSET_OUT_OF_RANGE and
    the consumer resets by auto.offset.reset=earliest to the log start, then reads up to
    `end`. Returns the offset it reset to and the values read, which have no gap."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not got or got[-1][0] < end - 1:
            assert time.monotonic() < deadline, f"read {len(got)} records up to {got[-1:]}, not to {end}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
    finally:
        c.close()
    offsets = [o for o, _ in got]
    assert offsets == list(range(offsets[0], end))
    return offsets[0], [v for _, v in got]


def test_time_retention_deletes_expired_segments_and_consumers_reset_to_earliest(broker, topic):
    # segment.ms of an hour: the first new record (two hours newer) rolls the segment, so
    # the old records end on a segment boundary and all of them expire.
    config = {"retention.ms": str(HOUR_MS), "segment.ms": str(HOUR_MS), "segment.bytes": "300"}
    create_topic(broker.bootstrap, topic, config=config)
    old = [b"old-%03d" % i for i in range(40)]
    produce(broker, topic, old, timestamp_ms=int(time.time() * 1000) - 2 * HOUR_MS)
    new = [b"new-%03d" % i for i in range(10)]
    produce(broker, topic, new)
    view = wait_for(broker, topic, lambda v: v["log_start_offset"] == 40, "the old segments to go")
    assert view["log_end_offset"] == 50
    assert consume_from_zero(broker, topic, f"{topic}-g", 50) == (40, new)
    lo, hi = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=10
    )
    assert (lo, hi) == (40, 50)


def test_a_quiet_topic_rolls_by_segment_ms_and_expires(broker, topic):
    create_topic(broker.bootstrap, topic, config={"retention.ms": "1000", "segment.ms": "500"})
    produce(broker, topic, [b"quiet-%d" % i for i in range(5)])
    # Nothing more is produced: the retention task rolls the active segment by
    # segment.ms, then deletes it once its newest record is a second old.
    view = wait_for(broker, topic, lambda v: v["log_start_offset"] == 5, "the quiet segment to expire")
    assert (view["log_end_offset"], view["size"]) == (5, 0)
    # Stamped an hour ahead so that retention (a second) keeps it however slowly the consumer starts.
    produce(broker, topic, [b"after"], timestamp_ms=int(time.time() * 1000) + HOUR_MS)
    assert consume_from_zero(broker, topic, f"{topic}-g", 6) == (5, [b"after"])


def test_size_retention_keeps_the_log_near_retention_bytes(broker, topic):
    create_topic(broker.bootstrap, topic, config={"retention.bytes": "2000", "segment.bytes": "500"})
    values = [b"v%04d-" % i + b"x" * 80 for i in range(100)]
    produce(broker, topic, values)
    view = wait_for(broker, topic, lambda v: v["size"] <= 2000 + 500, "the log to shrink")
    assert view["log_start_offset"] > 0 and view["log_end_offset"] == 100
    start, got = consume_from_zero(broker, topic, f"{topic}-g", 100)
    assert start >= view["log_start_offset"] and got == values[start:]


def test_a_dynamic_retention_change_takes_effect(broker, topic):
    create_topic(broker.bootstrap, topic, config={"retention.ms": "-1", "segment.bytes": "300"})
    produce(broker, topic, [b"%d" % i for i in range(30)], timestamp_ms=int(time.time() * 1000) - 2 * HOUR_MS)
    produce(broker, topic, [b"now"])
    assert partition_view(broker, topic)["log_start_offset"] == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("retention.ms", str(HOUR_MS), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    view = wait_for(broker, topic, lambda v: v["log_start_offset"] > 20, "retention under the new config")
    assert view["log_end_offset"] == 31


def test_topics_describe_shows_log_start_end_and_size(broker, topic):
    create_topic(broker.bootstrap, topic, config={"retention.bytes": "1000", "segment.bytes": "400"})
    produce(broker, topic, [b"y" * 100 for _ in range(30)])
    view = wait_for(broker, topic, lambda v: v["log_start_offset"] > 0, "retention")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "loglake.cli",
            "topics",
            "describe",
            "--topic",
            topic,
            "--bootstrap-http",
            broker.http_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if "Partition: 0" in line)
    fields = dict(part.split(": ", 1) for part in line.strip().split("\t"))
    assert int(fields["LogStartOffset"]) >= view["log_start_offset"] > 0
    assert int(fields["LogEndOffset"]) == 30
    assert 0 < int(fields["Size"]) <= 1000 + 400
