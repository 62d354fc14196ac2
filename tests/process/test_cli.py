"""The `loglake` command against a broker process, as an operator would use it."""

from __future__ import annotations

import subprocess
import sys
import time

from harness.process import BrokerProcess


def loglake(broker: BrokerProcess, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loglake.cli", *args, "--bootstrap-http", broker.http_url],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def test_topics_produce_consume(broker_process: BrokerProcess) -> None:
    broker_process.start()
    r = loglake(
        broker_process, "topics", "create", "--topic", "cli", "--partitions", "2", "--config", "retention.ms=60000"
    )
    assert r.returncode == 0, r.stderr
    assert loglake(broker_process, "topics", "list").stdout.decode().split() == ["cli"]
    described = loglake(broker_process, "topics", "describe", "--topic", "cli").stdout.decode()
    assert "PartitionCount: 2" in described and "retention.ms=60000" in described
    assert "Partition: 1\tLeader: 0\tReplicas: 0\tIsr: 0" in described

    lines = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(30))
    r = loglake(broker_process, "produce", "--topic", "cli", "--parse-key", stdin=lines)
    assert r.returncode == 0, r.stderr
    r = loglake(broker_process, "consume", "--topic", "cli", "--from-beginning", "--print-key")
    assert r.returncode == 0, r.stderr
    got = sorted(r.stdout.decode().splitlines())
    assert got == sorted(f"k{i}\tv{i}" for i in range(30))
    assert "Processed a total of 30 messages" in r.stderr.decode()

    # From the end there is nothing yet; from an offset, the rest of that partition.
    assert loglake(broker_process, "consume", "--topic", "cli").stdout == b""
    r = loglake(broker_process, "consume", "--topic", "cli", "--partition", "0", "--offset", "1", "--max-messages", "2")
    assert len(r.stdout.splitlines()) == 2

    assert loglake(broker_process, "topics", "alter", "--topic", "cli", "--partitions", "4").returncode == 0
    assert "PartitionCount: 4" in loglake(broker_process, "topics", "describe", "--topic", "cli").stdout.decode()
    assert loglake(broker_process, "topics", "delete", "--topic", "cli").returncode == 0
    assert loglake(broker_process, "topics", "list").stdout == b""


def test_cli_errors_are_clear(broker_process: BrokerProcess) -> None:
    broker_process.start()
    r = loglake(broker_process, "topics", "describe", "--topic", "missing")
    assert r.returncode == 1
    assert b"404" in r.stderr and b"missing" in r.stderr
    r = loglake(broker_process, "topics", "create", "--topic", "bad name")
    assert r.returncode == 1 and b"422" in r.stderr


def test_the_broker_freezes_its_start_up_objects(broker_process: BrokerProcess) -> None:
    """A full GC collection in a running broker walks only what came after start-up (one over
    everything stalled every request in flight for 55-145 ms)."""
    broker_process.start()
    # /healthz answers before start-up has finished: wait for the line.
    deadline = time.monotonic() + 30
    while "moved out of the cyclic GC" not in broker_process.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    line = next(line for line in broker_process.output().splitlines() if "moved out of the cyclic GC" in line)
    assert int(line.rsplit(":", 1)[1]) > 10_000, line
