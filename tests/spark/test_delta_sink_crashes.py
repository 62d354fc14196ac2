"""`python -m jobs.delta_sink` (the lake writer) killed again and again over a live broker while
records keep arriving, some in aborted transactions: killed after its Parquet files are written
(before the commit), after a commit, five times at random (SIGKILL of the job's process group),
and two jobs run at once on the table (the last run). Afterwards the table holds every committed
(topic, partition, offset) exactly once and nothing else, and no file of a failed attempt is
in the table."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from clients.client_helpers import create_topic
from confluent_kafka import Producer
from deltalake import DeltaTable
from loglake.spark.lake_writer import FAULT_AFTER_COMMIT, FAULT_AFTER_FILES
from source_helpers import REPO, job_environment, kill_job_at_random

PARTITIONS = 3
RANDOM_KILLS = 5

pytestmark = pytest.mark.slow


class Records:
    """Numbered records in bursts; every third burst in a transaction, every other one of
    those aborted. Remembers what should be in the table ((partition, offset) -> (key, value))
    and the offsets of aborted records, which must not be."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic, "linger.ms": 5})
        self.txn.init_transactions(30)
        self.expected: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.aborted: set[tuple[int, int]] = set()
        self.bursts = 0
        self._lock = threading.Lock()

    def burst(self, count: int = 30) -> None:
        self.bursts += 1
        kind = "plain" if self.bursts % 3 else ("aborted" if self.bursts % 6 == 0 else "committed")
        delivered: dict[tuple[int, int], tuple[bytes, bytes]] = {}

        def report(err, msg) -> None:
            assert err is None, err
            with self._lock:
                delivered[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

        producer = self.plain if kind == "plain" else self.txn
        if kind != "plain":
            producer.begin_transaction()
        for i in range(count):
            n = self.bursts * 1000 + i
            producer.produce(self.topic, key=b"k%d" % n, value=b"v%d" % n, partition=n % PARTITIONS, on_delivery=report)
        assert producer.flush(30) == 0
        if kind == "committed":
            producer.commit_transaction(30)
        elif kind == "aborted":
            producer.abort_transaction(30)
        with self._lock:
            if kind == "aborted":
                self.aborted |= set(delivered)
            else:
                self.expected |= delivered


class SinkJob:
    def __init__(self, root: Path, bootstrap: str, topic: str) -> None:
        self.table = root / "table"
        self.argv = [
            sys.executable, "-m", "jobs.delta_sink", "--bootstrap-servers", bootstrap, "--topics", topic,
            "--table", str(self.table), "--max-offsets-per-trigger", "150", "--max-records-per-task", "40",
        ]  # fmt: skip

    def run(self, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv, cwd=REPO, env=job_environment(fault), capture_output=True, text=True, timeout=300, check=False
        )

    def files_on_disk(self) -> set[str]:
        return {str(p.relative_to(self.table)) for p in self.table.rglob("*.parquet")}

    def files_in_table(self) -> set[str]:
        return set(pa.table(DeltaTable(str(self.table)).get_add_actions(flatten=True))["path"].to_pylist())


@pytest.mark.timeout(1200)
def test_killed_and_concurrent_sinks_write_every_record_once(spark, broker, topic, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"random kill seed {seed}")
    rng = random.Random(seed)
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = Records(broker.bootstrap, topic)
    for _ in range(6):
        records.burst()
    job = SinkJob(tmp_path, broker.bootstrap, topic)

    # Killed after round 0's files are written, before its commit: they never enter the table.
    crashed = job.run(fault=f"{FAULT_AFTER_FILES}:0")
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr
    orphans = job.files_on_disk()
    assert orphans and not DeltaTable.is_deltatable(str(job.table))
    records.burst()

    # Killed right after round 1's commit: the rerun plans from the table and goes on.
    crashed = job.run(fault=f"{FAULT_AFTER_COMMIT}:1")
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr
    records.burst()

    for _ in range(RANDOM_KILLS):
        kill_job_at_random(job.argv, rng, (5.0, 18.0), records.burst)
    records.burst()

    # Two jobs at once on the table: one commit of each round wins, the other plans again;
    # each runs to the end it found when it started, so together they sink everything.
    both = [
        subprocess.Popen(
            job.argv, cwd=REPO, env=job_environment(None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for _ in range(2)
    ]
    for process in both:
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out.decode()[-5000:]

    table = DeltaTable(str(job.table)).to_pyarrow_table(columns=["topic", "partition", "offset", "key", "value"])
    stored = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))
    assert len(stored) == len(set(stored)), "a record was written twice"
    assert not set(stored) & records.aborted, "records of aborted transactions in the table"
    assert set(stored) == set(records.expected), "records lost or invented"
    assert dict(zip(stored, zip(table["key"].to_pylist(), table["value"].to_pylist()))) == records.expected
    assert set(table["topic"].to_pylist()) == {topic}
    in_table = job.files_in_table()
    assert in_table <= job.files_on_disk() and not in_table & orphans
