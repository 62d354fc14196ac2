"""A Spark standalone cluster on loopback, from pyspark's own launcher (nothing downloaded):
one master and workers of one core each, every one a JVM in a session of its own with its own
work dir. Executors run this interpreter with the checkout on PYTHONPATH. Used by the tests'
session-wide `spark_cluster` fixture (tests/conftest.py) and by the benchmarks."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from loglake.spark.class_archive import java_options

START_TIMEOUT_S = 120
REPO = Path(__file__).resolve().parents[1]
# Small JVMs: the machine has two cores and little memory to spare.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
EXECUTOR_MEMORY = "512m"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_environment() -> dict[str, str]:
    """The daemons' (and so the executors') environment: loopback, this interpreter, this tree."""
    path = [str(REPO / "platform"), str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.environ | {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": f"{DAEMON_JAVA_OPTS} {java_options()}",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(path)),
    }


@dataclass
class StandaloneCluster:
    base_dir: Path
    workers: int = 2
    master_url: str = ""
    processes: list[subprocess.Popen] = field(default_factory=list)

    def _launch(self, name: str, args: list[str]) -> Path:
        log = self.base_dir / f"{name}.log"
        with log.open("wb") as out:
            self.processes.append(
                subprocess.Popen(
                    [str(spark_home() / "bin" / "spark-class"), *args],
                    env=cluster_environment(),
                    cwd=self.base_dir,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return log

    def _wait_for(self, log: Path, pattern: str, count: int = 1) -> re.Match[str]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            matches = list(re.finditer(pattern, log.read_text(errors="replace")))
            if len(matches) >= count:
                return matches[-1]
            exited = [p.args for p in self.processes if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                raise RuntimeError(f"Spark standalone cluster did not start ({exited or 'timeout'}): {log.read_text()}")
            time.sleep(0.1)

    def start(self) -> None:
        master_log = self._launch(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
        )
        self.master_url = self._wait_for(master_log, r"Starting Spark master at (spark://\S+)").group(1)
        for n in range(self.workers):
            work_dir = self.base_dir / f"worker-{n}"
            work_dir.mkdir()
            self._launch(
                f"worker-{n}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(work_dir),
                ],
            )
        self._wait_for(master_log, r"Registering worker", self.workers)

    def stop(self) -> None:
        """Workers first (each stops its executors), then the master; SIGKILL what lingers."""
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            _reap(process)

    def executor_dirs(self) -> list[Path]:
        """The executors the workers have run (work dir / app id / executor id)."""
        return sorted(p for n in range(self.workers) for p in (self.base_dir / f"worker-{n}").glob("app-*/*"))

    def submit_args(self) -> list[str]:
        """spark-submit's arguments for an application on this cluster (client deploy mode)."""
        return [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            self.master_url,
            "--conf",
            f"spark.executor.memory={EXECUTOR_MEMORY}",
            "--conf",
            "spark.executor.cores=1",
            "--conf",
            f"spark.executor.extraJavaOptions={DAEMON_JAVA_OPTS} {java_options()}",
            "--conf",
            f"spark.driver.defaultJavaOptions={java_options()}",
            "--conf",
            "spark.driver.memory=512m",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
        ]

    def submit(
        self, script: Path | str, *args: str, timeout: float = 300, conf: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a Python application on the cluster with spark-submit (with the Spark configs
        `conf` besides the cluster's); its output, checked."""
        confs = [arg for name, value in (conf or {}).items() for arg in ("--conf", f"{name}={value}")]
        result = subprocess.run(
            [*self.submit_args(), *confs, str(script), *args],
            env=cluster_environment(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, f"spark-submit {script} failed:\n{result.stdout}\n{result.stderr[-6000:]}"
        return result


def _reap(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """Wait for a process told to stop; SIGKILL its session if it lingers."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def standalone_cluster(base_dir: Path, workers: int = 2) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(base_dir, workers)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def connect_server(cluster: StandaloneCluster, log: Path) -> Iterator[str]:
    """A Spark Connect server (pyspark's own jar) whose session runs on `cluster`; its sc:// URL."""
    (jar,) = (spark_home() / "jars").glob("spark-connect_*.jar")
    port = _free_port()
    argv = [
        *cluster.submit_args(),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        str(jar),
    ]
    with log.open("wb") as out:
        # spark-submit starts this server as a daemon: SPARK_DAEMON_MEMORY is its driver's heap.
        env = cluster_environment() | {"SPARK_DAEMON_MEMORY": "512m"}
        server = subprocess.Popen(
            argv, env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Spark Connect server did not start: {log.read_text()}")
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        _reap(server)
