"""Bounded memory of the lake writer: `python -m jobs.delta_sink` sinks a topic of more than
2 GB (keys and values) while the RSS of its driver and of every Spark Python worker is
sampled; each stays under a bound far below the topic's size (files roll at 128 MB, a task
holds one fetch answer and one row group at a time)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from clients.client_helpers import create_topic
from confluent_kafka import Producer
from deltalake import DeltaTable
from source_helpers import REPO, job_environment

from bench.events import rss_bytes

PARTITIONS = 6
VALUE_BYTES = 1000
TOPIC_BYTES = 2 * 1024**3 + 64 * 1024**2
# The bounds: the job's Python driver, and each Spark Python worker.
DRIVER_RSS_BOUND = 512 * 1024**2
WORKER_RSS_BOUND = 640 * 1024**2

pytestmark = pytest.mark.slow


def produce_unique(bootstrap: str, topic: str, total_bytes: int) -> int:
    """Records of 12-byte keys and unique 1000-byte values until `total_bytes`; how many."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "none",
        }
    )
    pool = os.urandom(VALUE_BYTES * 64)
    n = 0
    while n * (VALUE_BYTES + 12) < total_bytes:
        at = (n * 7919) % (len(pool) - VALUE_BYTES)
        value = b"%016d" % n + pool[at : at + VALUE_BYTES - 16]  # unique by its prefix
        while True:
            try:
                producer.produce(topic, value=value, key=b"k-%010d" % n, partition=n % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
    assert producer.flush(300) == 0
    return n


def python_workers_of(root: int) -> list[int]:
    """Spark's Python workers (pyspark daemon and workers) descending from process `root`."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                commands[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    out = []
    for pid, command in commands.items():
        at = pid
        while at in parents and at not in (root, 1):
            at = parents[at]
        if at == root and b"pyspark" in command:
            out.append(pid)
    return out


@pytest.mark.timeout(1800)
def test_sinking_a_2_gb_topic_stays_under_the_memory_bounds(spark, broker, topic, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    started = time.monotonic()
    records = produce_unique(broker.bootstrap, topic, TOPIC_BYTES)
    print(
        f"produced {records} records ({records * (VALUE_BYTES + 12) / 1024**3:.2f} GiB) in {time.monotonic() - started:.0f} s"
    )
    table = tmp_path / "table"
    argv = [
        sys.executable, "-m", "jobs.delta_sink", "--bootstrap-servers", broker.bootstrap, "--topics", topic,
        "--table", str(table), "--max-records-per-task", "300000",
    ]  # fmt: skip
    started = time.monotonic()
    job = subprocess.Popen(argv, cwd=REPO, env=job_environment(None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    driver_peak = worker_peak = 0
    while job.poll() is None:
        driver_peak = max(driver_peak, rss_bytes(job.pid))
        worker_peak = max([worker_peak] + [rss_bytes(pid) for pid in python_workers_of(job.pid)])
        time.sleep(0.1)
    out = job.stdout.read().decode() if job.stdout else ""
    assert job.returncode == 0, out[-5000:]
    print(
        f"sunk in {time.monotonic() - started:.0f} s; peak RSS: driver {driver_peak / 2**20:.0f} MiB, "
        f"largest Python worker {worker_peak / 2**20:.0f} MiB"
    )
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    assert sum(actions["num_records"].to_pylist()) == records
    assert max(actions["size_bytes"].to_pylist()) < 200 * 1024**2  # files rolled at 128 MB
    assert 0 < driver_peak < DRIVER_RSS_BOUND
    assert 0 < worker_peak < WORKER_RSS_BOUND
