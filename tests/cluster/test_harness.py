"""The test harness itself: ports no other test run can take, and a cluster whose start
fails leaves nothing running."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.local_cluster import LocalCluster
from harness.process import free_port
from harness.zookeeper_process import available

ROOT = Path(__file__).resolve().parents[2]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_port_reserved_by_one_process_is_not_given_to_another() -> None:
    """Another process (another test run) neither gets our ports from free_port nor can
    take their reservations while we live."""
    ours = {free_port() for _ in range(20)}
    script = (
        "import fcntl, os, sys\n"
        "from harness.process import _RESERVATIONS, free_port\n"
        "ours = set(map(int, sys.argv[1:]))\n"
        "for port in ours:\n"
        "    fd = os.open(_RESERVATIONS / str(port), os.O_RDWR)\n"
        "    try:\n"
        "        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "        sys.exit(f'took reserved port {port}')\n"
        "    except BlockingIOError:\n"
        "        pass\n"
        "theirs = {free_port() for _ in range(500)}\n"
        "sys.exit(f'given {sorted(theirs & ours)}' if theirs & ours else 0)\n"
    )
    run = subprocess.run([sys.executable, "-c", script, *map(str, ours)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr or run.stdout


@pytest.mark.timeout(180)
def test_a_cluster_whose_start_fails_stops_what_it_had_started(tmp_path: Path) -> None:
    if not available():
        pytest.skip("ZooKeeper is not installed")
    # Broker 2 refuses its config and exits; broker 1 and ZooKeeper were up by then.
    cluster = LocalCluster(tmp_path, 2, broker_overrides={2: {"http.authentication.method": "NEITHER"}})
    with pytest.raises(RuntimeError, match="broker exited"), cluster:
        pass
    first = cluster.brokers[1]
    assert first.proc is None and not listening(first.http_port) and not listening(first.kafka_port)
    assert cluster.zookeeper is not None and cluster.zookeeper.proc is None
    assert not listening(int(cluster.zookeeper_connect.rsplit(":", 1)[1].split("/")[0]))
