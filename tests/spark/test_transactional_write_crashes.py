"""A streaming query topic → topic through the exactly-once sink, its driver killed and
restarted on its checkpoint: read_committed readers of the output see every input record
exactly once; read_uncommitted ones may also see the aborted records of killed attempts.

A task's transaction left open by a killed driver is made to happen by
`LOGLAKE_FAULT=after-task-write`. The crash between the sink's commit (every task's transaction committed) and Spark's commit
log is made to happen by `LOGLAKE_FAULT=after-sink-commit:<batch>`, which kills the driver's
JVM right there: Spark then replays a batch whose records are already committed, and the
tasks must recognise it from their groups rather than write it again.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from clients.client_helpers import create_topic
from source_helpers import REPO, job_environment, kill_job_at_random, produce
from txn_sink_helpers import topic_values, wait_until_stable

from loglake.spark.sink import FAULT_AFTER_SINK_COMMIT, FAULT_AFTER_TASK_WRITE

pytestmark = pytest.mark.slow

PARTITIONS_IN = 3
PARTITIONS_OUT = 2


class CopyJob:
    def __init__(self, broker, topic: str, checkpoint: Path) -> None:
        self.broker = broker
        self.source = f"{topic}-in"
        self.target = f"{topic}-out"
        self.checkpoint = checkpoint
        self.produced: list[bytes] = []

    def produce(self, count: int) -> None:
        start = len(self.produced)
        values = [b"r%06d" % i for i in range(start, start + count)]
        produce(self.broker, self.source, [{"key": v, "value": v} for v in values])
        self.produced += values

    def command(self, trigger: str) -> list[str]:
        script = str(REPO / "tests/spark/topic_copy_job.py")
        return [sys.executable, script, self.broker.bootstrap, self.source, self.target, str(self.checkpoint), trigger]

    def run(self, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command("available-now"), cwd=REPO, env=job_environment(fault), capture_output=True, text=True,
            timeout=300, start_new_session=True,
        )  # fmt: skip


def test_killed_driver_restarted_on_its_checkpoint_writes_each_record_once(loglake_spark, broker, topic, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"random kill seed {seed}")
    rng = random.Random(seed)
    create_topic(broker.bootstrap, f"{topic}-in", partitions=PARTITIONS_IN)
    create_topic(broker.bootstrap, f"{topic}-out", partitions=PARTITIONS_OUT)
    job = CopyJob(broker, topic, tmp_path / "checkpoint")
    job.produce(120)  # three micro-batches of MAX_OFFSETS_PER_TRIGGER

    # The driver dies after batch 1's transactions are committed, before Spark's commit log.
    crashed = job.run(fault=f"{FAULT_AFTER_SINK_COMMIT}:1")
    assert crashed.returncode != 0, crashed.stdout + crashed.stderr
    assert (job.checkpoint / "offsets/1").exists() and not (job.checkpoint / "commits/1").exists()
    wait_until_stable(broker, job.target, PARTITIONS_OUT)
    written = topic_values(loglake_spark, broker, job.target)
    assert 0 < len(written) <= 80 and len(set(written)) == len(written)  # batches 0 and 1, up to 40 records each

    # The restart replays batch 1 (every task finds it in its group and writes nothing), then
    # dies with a task's transaction of batch 2 open: the next restart aborts it, writes again.
    crashed = job.run(fault=FAULT_AFTER_TASK_WRITE)
    assert crashed.returncode != 0, crashed.stdout + crashed.stderr
    finished = job.run()
    assert finished.returncode == 0, finished.stdout + finished.stderr
    wait_until_stable(broker, job.target, PARTITIONS_OUT)
    assert topic_values(loglake_spark, broker, job.target) == sorted(job.produced)
    aborted = Counter(topic_values(loglake_spark, broker, job.target, "read_uncommitted")) - Counter(job.produced)
    assert aborted and aborted.keys() <= set(job.produced)
    # Not even an aborted copy of batches 0 and 1: the replay was recognised before anything was produced.
    assert not aborted.keys() & set(written)

    # A random kill adds what the injected faults do not reach; one keeps the suite's time in bounds.
    kill_job_at_random(job.command("processing-time"), rng, (4.0, 20.0), meanwhile=lambda: job.produce(15))
    job.produce(30)
    finished = job.run()
    assert finished.returncode == 0, finished.stdout + finished.stderr

    wait_until_stable(broker, job.target, PARTITIONS_OUT)
    committed = topic_values(loglake_spark, broker, job.target)
    assert Counter(committed) == Counter(job.produced)  # each record exactly once
    uncommitted = Counter(topic_values(loglake_spark, broker, job.target, "read_uncommitted"))
    assert uncommitted.keys() == set(job.produced)  # aborted attempts may repeat some
    print(f"{sum(uncommitted.values()) - len(committed)} aborted records of killed attempts")
