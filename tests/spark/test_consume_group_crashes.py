"""`python -m jobs.consume_group` killed between writing and committing, half-way through producing
to a topic, and with SIGKILL at random moments while records keep coming: rerun, the Delta table
or the target topic holds every record of the source exactly once, and the group is at the end."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from test_group_commits import committed

from clients.client_helpers import create_topic, unique_name
from jobs.consume_group import FAULT_AFTER_TARGET_WRITE
from loglake.spark.run_targets import RUN_HEADER
from loglake.spark.sink import FAULT_AFTER_TASK_WRITE
from source_helpers import REPO, job_environment, kill_job_at_random

PARTITIONS = 3

pytestmark = pytest.mark.slow


class Source:
    """Numbered records; remembers what the broker acknowledged, by (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5})
        self.acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self._next = 0

    def burst(self, count: int = 30) -> None:
        for _ in range(count):
            n, self._next = self._next, self._next + 1
            self.producer.produce(self.topic, b"v%d" % n, b"k%d" % n, partition=n % PARTITIONS, on_delivery=self._ack)
        assert self.producer.flush(30) == 0

    def _ack(self, err, msg) -> None:
        assert err is None, err
        self.acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    def ends(self) -> dict[int, int]:
        return {p: 1 + max(o for q, o in self.acked if q == p) for p in range(PARTITIONS)}


class Job:
    def __init__(self, bootstrap: str, group: str, topic: str, *target: str) -> None:
        self.argv = [
            sys.executable, "-m", "jobs.consume_group", "--bootstrap-servers", bootstrap, "--group", group,
            "--topics", topic, *target,
        ]  # fmt: skip

    def run(self, fault: str | None = None, expect: int | None = 0) -> None:
        """Run to the end; `expect`: the exit code (None: any but 0, for a killed JVM)."""
        done = subprocess.run(
            self.argv, cwd=REPO, env=job_environment(fault), capture_output=True, text=True, timeout=300
        )
        ok = done.returncode != 0 if expect is None else done.returncode == expect
        assert ok, done.stdout[-3000:] + done.stderr[-6000:]

    def kill_while_producing(self, source: Source, rng: random.Random) -> None:
        kill_job_at_random(self.argv, rng, (4.0, 16.0), source.burst)


@pytest.mark.timeout(900)
def test_delta_target_killed_between_write_and_commit_and_at_random(broker, tmp_path, monkeypatch) -> None:
    seed = random.randrange(1 << 30)
    print(f"random kill seed {seed}")
    rng = random.Random(seed)
    topic, group = unique_name("cg-delta-src"), unique_name("cg-delta")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    source = Source(broker.bootstrap, topic)
    for _ in range(4):
        source.burst()
    (tmp_path / "etl_functions.py").write_text(
        "def tagged(df):\n"
        "    return df.selectExpr('topic', 'partition', 'offset', 'key', 'value', 'length(value) AS size')\n"
    )
    table = tmp_path / "table"
    job = Job(broker.bootstrap, group, topic, "--function", "etl_functions:tagged", "--delta", str(table))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))

    job.run(fault=f"{FAULT_AFTER_TARGET_WRITE}:1", expect=137)
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == len(source.acked)  # written, not committed
    assert committed(broker, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 0)
    source.burst()
    job.run(fault=FAULT_AFTER_TARGET_WRITE, expect=137)  # run 1 again (already there), killed after it
    # One random kill (the exact crash points are injected above): the suite's time.
    job.kill_while_producing(source, rng)
    source.burst()
    job.run()

    rows = DeltaTable(str(table)).to_pyarrow_table()
    stored = list(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist()))
    assert len(stored) == len(set(stored)), "a record was written twice"
    assert dict(zip(stored, zip(rows["key"].to_pylist(), rows["value"].to_pylist()))) == source.acked
    assert committed(broker, group, topic, PARTITIONS) == source.ends()


@pytest.mark.timeout(900)
def test_topic_target_killed_half_way_and_between_write_and_commit(loglake_spark, broker, tmp_path) -> None:
    topic, target, group = unique_name("cg-topic-src"), unique_name("cg-topic-dst"), unique_name("cg-topic")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    create_topic(broker.bootstrap, target, 2)
    source = Source(broker.bootstrap, topic)
    for _ in range(4):
        source.burst()
    # The source's coordinates in the value: the target is checked record by record.
    select = "key, concat(cast(value AS string), '@', cast(partition AS string), '/', cast(offset AS string)) AS value"
    job = Job(broker.bootstrap, group, topic, "--select", select, "--topic", target)

    # Killed (its JVM) once a task has produced its share in its transaction, left open.
    job.run(fault=f"{FAULT_AFTER_TASK_WRITE}:1", expect=None)
    assert read_target(loglake_spark, broker, target, "read_uncommitted")
    assert committed(broker, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 0)
    source.burst()
    job.run(fault=FAULT_AFTER_TARGET_WRITE, expect=137)  # the rest of run 1, then killed
    assert len(read_target(loglake_spark, broker, target)) == 4 * 30
    source.burst()
    job.run()

    produced = read_target(loglake_spark, broker, target)
    values = [value for value, _ in produced]
    assert len(values) == len(set(values)), "a record was written twice"
    # The killed attempt's records are there, aborted: only read_uncommitted readers see them.
    assert len(read_target(loglake_spark, broker, target, "read_uncommitted")) > len(values)
    expected = {b"%s@%d/%d" % (value, p, o) for (p, o), (_, value) in source.acked.items()}
    assert set(values) == expected
    assert {run for _, run in produced} == {f"{group}:1".encode(), f"{group}:2".encode()}
    assert committed(broker, group, topic, PARTITIONS) == source.ends()


def read_target(spark, broker, target: str, isolation: str = "read_committed") -> list[tuple[bytes, bytes]]:
    """(value, run header) of every record of the target topic."""
    rows = (
        spark.read.format("loglake")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("kafka.isolation.level", isolation)
        .option("subscribe", target)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    for row in rows:
        assert [h.key for h in row.headers] == [RUN_HEADER]
    return [(bytes(row.value), bytes(row.headers[0].value)) for row in rows]


@pytest.mark.timeout(300)
def test_runs_under_spark_submit(loglake_spark, broker, tmp_path) -> None:
    topic, group = unique_name("cg-submit-src"), unique_name("cg-submit")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    source = Source(broker.bootstrap, topic)
    source.burst()
    venv_bin = Path(sys.executable).parent
    # As in an activated virtual environment: spark-submit runs the driver with its python3.
    env = job_environment(None) | {"PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "out"
    argv = [str(venv_bin / "spark-submit"), "--master", "local[2]", "jobs/consume_group.py"]
    argv += ["--bootstrap-servers", broker.bootstrap, "--group", group, "--topics", topic, "--parquet", str(out)]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert loglake_spark.read.parquet(str(out)).count() == 30
    assert committed(broker, group, topic, PARTITIONS) == source.ends()
