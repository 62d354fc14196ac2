"""`make cluster` / `scripts/cluster.py up|down|status`: a local 3-broker cluster.

`up` starts ZooKeeper on 127.0.0.1:2181 (conf/zoo.cfg) and the brokers of
conf/cluster/broker-{1,2,3}.properties in the background (extra `--override k=v` apply to
every broker), waits until they registered and a controller is elected, and prints the
cluster status. `down` stops the brokers (SIGTERM: a clean shutdown) and ZooKeeper.
Pid files and logs live in /tmp/loglake-cluster/run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = Path(os.environ.get("LOGLAKE_CLUSTER_RUN", "/tmp/loglake-cluster/run"))
BROKERS = (1, 2, 3)


def _start_background(name: str, argv: list[str]) -> None:
    """Run `argv` detached from this shell, logging to RUN_DIR/<name>.log, pid in <name>.pid."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    pid_file = RUN_DIR / f"{name}.pid"
    if pid_file.exists() and _alive(int(pid_file.read_text())):
        print(f"{name} already running")
        return
    with open(RUN_DIR / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    pid_file.write_text(str(proc.pid))


def _stop_background(name: str) -> None:
    pid_file = RUN_DIR / f"{name}.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    pid_file.unlink()
    print(f"{name} stopped")


def _wait_for_zookeeper() -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", 2181), timeout=1) as s:
                s.sendall(b"ruok")
                if s.recv(4) == b"imok":
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"ZooKeeper did not start; see {RUN_DIR}/zookeeper.log")


def _http_of(broker_id: int) -> str:
    for line in (ROOT / "conf" / "cluster" / f"broker-{broker_id}.properties").read_text().splitlines():
        if line.startswith("http.listeners="):
            return line.split("=", 1)[1].split(",")[0].strip()
    raise ValueError(f"broker {broker_id} has no http.listeners")


def up(overrides: list[str]) -> int:
    _start_background("zookeeper", [sys.executable, "-m", "harness.zookeeper_process", "--port", "2181"])
    _wait_for_zookeeper()
    for broker_id in BROKERS:
        argv = [
            sys.executable,
            "-m",
            "ingest_gateway",
            "--config",
            str(ROOT / f"conf/cluster/broker-{broker_id}.properties"),
        ]
        for item in overrides:
            argv += ["--override", item]
        _start_background(f"broker-{broker_id}", argv)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            status = httpx.get(f"{_http_of(1)}/cluster", timeout=2).json()
            if len(status["brokers"]) == len(BROKERS) and status["controller"]["broker_id"] is not None:
                return subprocess.call(
                    [sys.executable, "-m", "loglake.cli", "cluster", "status", "--bootstrap-http", _http_of(1)]
                )
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    print(f"the cluster did not come up; see {RUN_DIR}/broker-*.log", file=sys.stderr)
    return 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def down() -> int:
    for broker_id in BROKERS:
        _stop_background(f"broker-{broker_id}")
    _stop_background("zookeeper")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.action == "up":
        return up(args.override)
    if args.action == "down":
        return down()
    return subprocess.call([sys.executable, "-m", "loglake.cli", "cluster", "status", "--bootstrap-http", _http_of(1)])


if __name__ == "__main__":
    sys.exit(main())
