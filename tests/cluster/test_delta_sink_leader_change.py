"""`python -m jobs.delta_sink` over a 3-broker cluster (topic RF=3) while records keep coming and
a partition's leader is killed and restarted: a final available-now run leaves every acknowledged
(partition, offset) in the table exactly once, with its key and value."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cluster_helpers import create_topic, partition_of
from confluent_kafka import Producer
from deltalake import DeltaTable

from harness.local_cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
TOPIC = "sunk"
PARTITIONS = 3

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


class Producing:
    """A thread producing numbered records (acks=all, idempotent) until stopped; remembers what
    the cluster acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
            | {"compression.type": "zstd", "message.timeout.ms": 60_000}
        )
        self.acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for _ in range(10):
                self.producer.produce(TOPIC, b"v%d" % n, b"k%d" % n, partition=n % PARTITIONS, on_delivery=self._report)
                n += 1
            self.producer.poll(0.25)  # about 40 records a second: the sink keeps up on a loaded machine

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(90) == 0


def table_rows(table: Path) -> int:
    return DeltaTable(str(table)).to_pyarrow_table().num_rows if DeltaTable.is_deltatable(str(table)) else 0


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def move_leader(cluster: LocalCluster, partition: int) -> None:
    """Kill -9 the partition's leader, wait for another to take over, restart the old one and wait
    for it to be back in the ISR."""
    old = partition_of(cluster.status(), TOPIC, partition)["leader"]
    cluster.kill(old)
    cluster.wait_for(lambda s: partition_of(s, TOPIC, partition)["leader"] not in (-1, old), exclude=(old,))
    cluster.restart(old)
    cluster.wait_for(lambda s: all(len(p["isr"]) == 3 for p in s["partitions"] if p["topic"] == TOPIC))


@pytest.mark.timeout(900)
def test_delta_sink_across_leader_changes(cluster: LocalCluster, tmp_path: Path) -> None:
    create_topic(cluster, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    argv = [
        sys.executable, "-m", "jobs.delta_sink", "--bootstrap-servers", cluster.bootstrap, "--topics", TOPIC,
        "--table", str(table), "--checkpoint", str(checkpoint), "--starting-offsets", "earliest",
        "--max-offsets-per-trigger", "1000",
    ]  # fmt: skip
    log = (tmp_path / "streaming.log").open("w")
    with Producing(cluster.bootstrap) as producing:
        job = subprocess.Popen(
            [*argv, "--trigger", "processing-time=1 second"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            wait_until(lambda: table_rows(table) > 0, 180, "the first micro-batch in the table")
            move_leader(cluster, 0)
            rows = table_rows(table)
            wait_until(lambda: table_rows(table) > rows, 120, "a micro-batch after the leader moved")
            assert job.poll() is None, (tmp_path / "streaming.log").read_text()[-5000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert not producing.failed, producing.failed[:3]

    print(f"{len(producing.acked)} records acknowledged; {table_rows(table)} in the table before the final run")
    final_log = tmp_path / "final.log"
    with final_log.open("w") as out:
        final = subprocess.Popen([*argv, "--trigger", "available-now"], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            code = final.wait(timeout=300)
        except subprocess.TimeoutExpired:
            final.kill()
            code = None
    assert code == 0, final_log.read_text()[-8000:]
    data = DeltaTable(str(table)).to_pyarrow_table()
    stored = list(zip(data["partition"].to_pylist(), data["offset"].to_pylist()))
    assert len(stored) == len(set(stored)), "a record was written twice"
    assert dict(zip(stored, zip(data["key"].to_pylist(), data["value"].to_pylist()))) == producing.acked
