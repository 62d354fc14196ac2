"""Run a broker as a child process: for the demo, `cluster up`, and process-level tests."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

import httpx

# Listening ports come from below Linux's ephemeral range (32768-60999): a broker restarted
# on its port must not find it taken by some client's outgoing connection meanwhile.
_LISTEN_PORTS = range(20000, 32768)
# A port found free by bind alone may be taken by another test run's broker before ours
# binds it (two runs on one machine, under load): a port is reserved by an flock on its
# file here, held until this process exits, and every run takes its ports through here.
_RESERVATIONS = Path(tempfile.gettempdir()) / "loglake-test-ports"
_reserved: dict[int, int] = {}  # port -> the descriptor holding its lock


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range, that no other
    process using this function holds: reserved for this process's lifetime."""
    _RESERVATIONS.mkdir(exist_ok=True)
    while True:
        port = random.choice(_LISTEN_PORTS)
        if port in _reserved:
            continue
        fd = os.open(_RESERVATIONS / str(port), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                os.close(fd)  # releases the lock
                continue
        _reserved[port] = fd
        return port


class BrokerProcess:
    """A `python -m ingest_gateway` child on loopback ports of its own."""

    def __init__(
        self,
        log_dir: str | Path,
        config: str | Path | None = None,
        overrides: dict[str, str] | None = None,
        broker_id: int = 0,
        kafka_port: int | None = None,
        http_port: int | None = None,
        log_file: str | Path | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.config = config
        self.kafka_port = kafka_port or free_port()
        self.http_port = http_port or free_port()
        self.overrides = {
            "broker.id": str(broker_id),
            "log.dirs": str(self.log_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.kafka_port}",
            "http.listeners": f"http://127.0.0.1:{self.http_port}",
            **(overrides or {}),
        }
        self.log_file = Path(log_file) if log_file else self.log_dir.parent / f"broker-{broker_id}.out"
        self.proc: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self, timeout: float = 30.0) -> Self:
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()  # a broker that did not come up is not left running
            raise
        return self

    def spawn(self) -> None:
        """Start the process without waiting for it (`wait_ready` waits): several brokers
        start side by side."""
        argv = [sys.executable, "-m", "ingest_gateway"]
        if self.config:
            argv += ["--config", str(self.config)]
        for k, v in self.overrides.items():
            argv += ["--override", f"{k}={v}"]
        self.log_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; see {self.log_file}:\n{self.output()}")
            try:
                if httpx.get(f"{self.http_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"broker not ready after {timeout}s; see {self.log_file}")

    def output(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: a clean shutdown that flushes and writes checkpoints."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.proc = None

    def kill(self) -> None:
        """kill -9: no flush, no checkpoints, no clean-shutdown marker."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
