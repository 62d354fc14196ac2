"""`python -m jobs.delta_sink` over a live broker, killed again and again while records keep
coming (gzip, lz4, zstd batches): every (topic, partition, offset) the broker acknowledged
lands in the Delta table exactly once, with its key and value, and nothing else does."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from clients.client_helpers import create_topic
from loglake.spark.delta_sink import FAULT_AFTER_DELTA_COMMIT
from source_helpers import REPO, job_environment, kill_job_at_random

PARTITIONS = 3

pytestmark = pytest.mark.slow


class Records:
    """Numbered records produced in bursts, each burst with the next codec; remembers what
    the broker acknowledged, by (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producers = [
            Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
            for codec in ("gzip", "lz4", "zstd")
        ]
        self.acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.failed = 0
        self._next = 0
        self._lock = threading.Lock()

    def burst(self, count: int = 30) -> None:
        producer = self.producers[(self._next // count) % len(self.producers)]
        for _ in range(count):
            n = self._next
            self._next += 1
            producer.produce(
                self.topic, key=b"k%d" % n, value=b"v%d" % n, partition=n % PARTITIONS, on_delivery=self._report
            )
        assert producer.flush(30) == 0

    def _report(self, err, msg) -> None:
        with self._lock:
            if err is None:
                self.acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
            else:
                self.failed += 1


class SinkJob:
    def __init__(self, root: Path, bootstrap: str, topic: str) -> None:
        self.table, self.checkpoint = root / "table", root / "checkpoint"
        self.argv = [
            sys.executable, "-m", "jobs.delta_sink", "--bootstrap-servers", bootstrap, "--topics", topic,
            "--table", str(self.table), "--checkpoint", str(self.checkpoint), "--starting-offsets", "earliest",
            "--max-offsets-per-trigger", "60", "--trigger", "available-now",
        ]  # fmt: skip

    def run(self, *extra: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [a for a in self.argv if a not in ("--trigger", "available-now")] + list(extra) if extra else self.argv
        try:
            return subprocess.run(
                argv, cwd=REPO, env=job_environment(fault), capture_output=True, text=True, timeout=300
            )
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"")[-3000:], (exc.stderr or b"")[-6000:]
            raise AssertionError(f"the job did not finish ({fault=}): {out}") from None

    def kill_while_producing(self, records: Records, rng: random.Random) -> None:
        """A burst of records every half second (a few thousand in all) until the kill."""
        kill_job_at_random(self.argv, rng, (6.0, 20.0), records.burst)


@pytest.mark.timeout(900)
def test_killed_sink_over_a_live_broker_writes_every_record_once(spark, broker, topic, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"random kill seed {seed}")
    rng = random.Random(seed)
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = Records(broker.bootstrap, topic)
    for _ in range(6):
        records.burst()
    job = SinkJob(tmp_path, broker.bootstrap, topic)

    # Dies right after a Delta commit, before Spark records the batch: the batch is replayed.
    # (test_delta_sink_crashes.py injects this at more batches, without a live broker.)
    crashed = job.run(fault=f"{FAULT_AFTER_DELTA_COMMIT}:0")
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr
    records.burst()
    # One random kill (the exact crash points are injected above): the suite's time.
    job.kill_while_producing(records, rng)
    records.burst()  # so that there is a next batch
    crashed = job.run(fault=FAULT_AFTER_DELTA_COMMIT)  # whichever batch comes next
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr
    records.burst()

    finished = job.run()
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert records.failed == 0

    table = DeltaTable(str(job.table)).to_pyarrow_table()
    stored = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))
    assert len(stored) == len(set(stored)), "a record was written twice"
    assert set(stored) == set(records.acked), "records lost or invented"
    values = dict(zip(stored, zip(table["key"].to_pylist(), table["value"].to_pylist())))
    assert values == records.acked
    assert set(table["topic"].to_pylist()) == {topic}

    # A batch-mode rerun of everything already sunk adds nothing.
    rerun = job.run("--batch")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert DeltaTable(str(job.table)).to_pyarrow_table().num_rows == len(stored)
