"""Tiering into Delta (jobs/tier.py) against a live broker: the copied segments leave the
broker, the table holds each tiered offset exactly once, a read from `earliest` (batch and
streaming) returns exactly what was produced across the lake/log seam, and a job killed
right after its Delta commit (LOGLAKE_FAULT) leaves nothing duplicated when rerun."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from clients.client_helpers import create_topic, make_broker, serve
from jobs.tier import FAULT_AFTER_DELTA_COMMIT, FAULT_ENV, parse_args, run
from loglake.spark.lake import tier_app_id

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "retention.ms": "-1", "segment.bytes": "2000"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, lake: Path) -> Iterator[object]:
    overrides = {
        "rsm.config.lake.root": str(lake),
        "log.retention.check.interval.ms": "100",
        "file.delete.delay.ms": "100",
    }
    yield from serve(make_broker(tmp_path_factory.mktemp("tier") / "logs", **overrides))


def produce(broker, topic: str, first: int, count: int) -> list[tuple[bytes, bytes]]:
    # Batches of at most 1000 bytes: an append must fit in segment.bytes.
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1000})
    records = [(b"k%d" % i, b"value-%05d" % i) for i in range(first, first + count)]
    errors = []
    for key, value in records:
        p.produce(topic, value, key=key, partition=0, on_delivery=lambda err, _: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors
    return records


def state(broker, topic: str) -> dict:
    return httpx.get(f"{broker.http_url}/topics/{topic}/partitions/0/tiering", timeout=10).json()


def wait_for_local_deletion(broker, topic: str) -> dict:
    """Retention deletes what is tiered (local.retention.ms=0): the log then starts at
    the first segment not wholly tiered."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        s = state(broker, topic)
        if s["tiered_offset"] > 0 and s["log_start_offset"] > 0:
            return s
        assert time.monotonic() < deadline, f"local segments not deleted: {s}"
        time.sleep(0.05)


def lake_offsets(lake: Path, topic: str) -> list[int]:
    return sorted(DeltaTable(str(lake / topic)).to_pyarrow_table(columns=["offset"])["offset"].to_pylist())


def read_earliest(spark, broker, topic: str) -> list[tuple[int, bytes, bytes]]:
    frame = (
        spark.read.format("loglake")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    return as_records(frame.select("offset", "key", "value").collect())


def as_records(rows: list) -> list[tuple[int, bytes, bytes]]:
    return sorted((r.offset, bytes(r.key), bytes(r.value)) for r in rows)


def run_job(broker, topic: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV} | ({FAULT_ENV: fault} if fault else {})
    command = [sys.executable, "-m", "jobs.tier", "--bootstrap-servers", broker.bootstrap, "--topics", topic]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_tiered_segments_leave_the_broker_and_reads_span_lake_and_log(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produced = produce(broker, topic, 0, 400)
    run(loglake_spark, parse_args(["--bootstrap-servers", broker.bootstrap, "--topics", topic]))

    s = wait_for_local_deletion(broker, topic)
    tiered = s["tiered_offset"]
    assert DeltaTable(str(lake / topic)).transaction_version(tier_app_id(topic, 0)) == tiered
    assert lake_offsets(lake, topic) == list(range(tiered))  # each tiered offset exactly once
    assert 0 < s["log_start_offset"] <= tiered  # the log reaches back to the lake: no gap
    log_dir = Path(broker.log_dir) / f"{topic}-0"
    assert min(int(p.name[:20]) for p in log_dir.glob("*.log")) == s["log_start_offset"]

    expected = [(offset, key, value) for offset, (key, value) in enumerate(produced)]
    assert read_earliest(loglake_spark, broker, topic) == expected

    query = (
        loglake_spark.readStream.format("loglake")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("offset", "key", "value")
        .writeStream.format("memory")
        .queryName(f"tier_{topic.replace('-', '_')}")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = loglake_spark.sql(f"select * from tier_{topic.replace('-', '_')}").collect()
    assert as_records(rows) == expected


def test_a_job_killed_after_its_delta_commit_reruns_exactly_once(loglake_spark, broker, lake, topic):
    create_topic(broker.bootstrap, topic, config=TIERED)
    produced = produce(broker, topic, 0, 300)
    killed = run_job(broker, topic, fault=FAULT_AFTER_DELTA_COMMIT)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    committed = lake_offsets(lake, topic)
    assert committed == list(range(len(committed))) and committed
    # The brokers never heard of it: nothing was deleted locally.
    assert state(broker, topic)["tiered_offset"] == 0 and state(broker, topic)["log_start_offset"] == 0

    produced += produce(broker, topic, 300, 200)
    done = run_job(broker, topic)
    assert done.returncode == 0, done.stdout + done.stderr
    s = wait_for_local_deletion(broker, topic)
    assert lake_offsets(lake, topic) == list(range(s["tiered_offset"]))
    assert s["tiered_offset"] > len(committed)  # the rerun copied what came since, once
    expected = [(offset, key, value) for offset, (key, value) in enumerate(produced)]
    assert read_earliest(loglake_spark, broker, topic) == expected
