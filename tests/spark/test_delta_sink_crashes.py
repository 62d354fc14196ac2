"""`python -m jobs.delta_sink` killed and restarted: every record lands in the table exactly once.

The job reads its test-only Parquet stand-in for the loglake source (files in the Kafka source
schema, one per micro-batch), so the crashes hit the real job, Spark's checkpoint and the Delta
commit; new files arrive between runs as a producer would keep producing.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from kafka_frames import concat, kafka_records
from loglake.spark.delta_sink import FAULT_AFTER_DELTA_COMMIT, committed_version
from source_helpers import REPO, job_environment, kill_job_at_random

TABLE_ORDER = ["topic", "partition", "offset"]
TOPIC = "orders"

pytestmark = pytest.mark.slow


class SinkJob:
    """The job as a child process over one source directory, table and checkpoint."""

    def __init__(self, root: Path) -> None:
        self.source = root / "source"
        self.table = root / "table"
        self.checkpoint = root / "checkpoint"
        self.source.mkdir()
        self.produced: list[pa.Table] = []

    def produce(self, partition: int, offsets: range) -> None:
        records = kafka_records(TOPIC, partition, offsets)
        self.produced.append(records)
        pq.write_table(records, self.source / f"p{partition}-{offsets.start:06d}.parquet")

    def command(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "jobs.delta_sink",
            "--test-only-parquet-source",
            str(self.source),
            "--table",
            str(self.table),
            "--checkpoint",
            str(self.checkpoint),
            *extra,
        ]

    def run(self, *extra: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        env = job_environment(fault)
        return subprocess.run(
            self.command(*extra), check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=240
        )

    def kill_at_random(self, rng: random.Random) -> None:
        kill_job_at_random(self.command(), rng, (5.0, 25.0))

    def last_spark_commit(self) -> int:
        return max(int(name) for name in os.listdir(self.checkpoint / "commits") if name.isdigit())

    def query_id(self) -> str:
        return json.loads((self.checkpoint / "metadata").read_text())["id"]


def skipped_replays(result: subprocess.CompletedProcess[str]) -> int:
    return result.stdout.count("replay skipped")


def test_crashes_and_restarts_write_every_record_once(spark, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"random kill seed {seed}")
    job = SinkJob(tmp_path)
    for partition in range(3):
        job.produce(partition, range(40))

    # Dies after batch 0's Delta commit, before Spark's commit file: Spark replays batch 0.
    crashed = job.run(fault=f"{FAULT_AFTER_DELTA_COMMIT}:0")
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr
    job.produce(0, range(40, 75))

    crashed = job.run(fault=f"{FAULT_AFTER_DELTA_COMMIT}:2")
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr
    assert skipped_replays(crashed) == 1
    job.produce(1, range(40, 60))

    job.kill_at_random(random.Random(seed))
    job.produce(2, range(40, 90))
    crashed = job.run(fault=FAULT_AFTER_DELTA_COMMIT)  # the next batch, whichever it is
    assert crashed.returncode == 137, crashed.stdout + crashed.stderr

    finished = job.run()
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert skipped_replays(finished) == 1

    expected = spark.createDataFrame(concat(*job.produced))
    expected = expected.select(*TABLE_ORDER, "timestamp", "key", "value", "headers").orderBy(*TABLE_ORDER)
    stored = spark.createDataFrame(DeltaTable(str(job.table)).to_pyarrow_table()).orderBy(*TABLE_ORDER)
    assert_df_equality(stored, expected, ignore_nullable=True)
    assert committed_version(str(job.table), job.query_id()) == job.last_spark_commit()

    # A batch-mode rerun of everything already sunk adds nothing.
    rerun = job.run("--batch")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "batch run: 0 new rows" in rerun.stdout
    assert DeltaTable(str(job.table)).to_pyarrow_table().num_rows == expected.count()
