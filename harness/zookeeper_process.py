"""Run a standalone ZooKeeper as a child process: for `make cluster` and the cluster tests.

The JVM is started directly (no `zkServer.sh`, whose Debian variant ignores ZOO_LOG_DIR),
in the foreground, with a zoo.cfg written into the data dir from a template
(conf/zoo.cfg) and its console log in <data_dir>/zookeeper.out. It is ready when it
answers the `ruok` and `srvr` four-letter commands.

Where ZooKeeper lives: $ZOOKEEPER_CLASSPATH if set; else $ZOOKEEPER_HOME (a release
tarball: lib/*.jar and conf/); else Debian's `zookeeper` package (/usr/share/java).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEMPLATE = ROOT / "conf/zoo.cfg"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

_DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
_DEBIAN_CONF = Path("/etc/zookeeper/conf")
# Debian's zookeeper.jar names its dependencies in its manifest but no slf4j binding;
# these two give it a log (through log4j.properties in the conf dir).
_DEBIAN_LOGGING = [Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar")]


def java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin/java").exists():
        return str(Path(java_home) / "bin/java")
    return shutil.which("java")


def zookeeper_classpath() -> str | None:
    """The classpath that runs ZooKeeper's server here, or None if none is installed."""
    if os.environ.get("ZOOKEEPER_CLASSPATH"):
        return os.environ["ZOOKEEPER_CLASSPATH"]
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in Path(home).glob("lib/*.jar")) + sorted(str(p) for p in Path(home).glob("*.jar"))
        if jars:
            return os.pathsep.join([str(Path(home) / "conf"), *jars])
    if _DEBIAN_JAR.exists():
        parts = [str(_DEBIAN_CONF), str(_DEBIAN_JAR)]
        if all(p.exists() for p in _DEBIAN_LOGGING):
            parts += [str(p) for p in _DEBIAN_LOGGING]
        return os.pathsep.join(parts)
    return None


def available() -> bool:
    """Whether a JVM and ZooKeeper are installed (tests skip otherwise)."""
    return java_executable() is not None and zookeeper_classpath() is not None


def four_letter_word(host: str, port: int, command: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (ruok, srvr, stat) and return the whole answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(command.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        props[key.strip()] = value.strip()
    return props


class ZooKeeperProcess:
    """A standalone ZooKeeper server on 127.0.0.1:<port>, data and logs under `data_dir`.

    `tick_time_ms` overrides the template's tickTime (500 by default: sessions may then be
    as short as 1 s, and expire within half a second of their timeout); None keeps the
    template's. `overrides` are further zoo.cfg properties.
    """

    def __init__(
        self,
        data_dir: str | Path,
        port: int = 2181,
        config_template: str | Path = DEFAULT_TEMPLATE,
        tick_time_ms: int | None = 500,
        overrides: dict[str, str] | None = None,
        heap: str = "256m",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.config_template = Path(config_template)
        self.tick_time_ms = tick_time_ms
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.config_file = self.data_dir / "zoo.cfg"
        self.log_file = self.data_dir / "zookeeper.out"
        self.proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` string (append "/chroot" for a namespace)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def write_config(self) -> Path:
        props = read_properties(self.config_template) if self.config_template.exists() else {}
        props.update(
            {
                "dataDir": str(self.data_dir / "data"),
                "clientPort": str(self.port),
                "clientPortAddress": self.host,
                "admin.enableServer": "false",
                "4lw.commands.whitelist": "ruok,stat,srvr",
            }
        )
        props.setdefault("maxSessionTimeout", "60000")
        if self.tick_time_ms is not None:
            props["tickTime"] = str(self.tick_time_ms)
        props.update(self.overrides)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        lines = [f"# Written by harness.zookeeper_process from {self.config_template}"]
        lines += [f"{k}={v}" for k, v in props.items()]
        self.config_file.write_text("\n".join(lines) + "\n")
        return self.config_file

    def command(self) -> list[str]:
        java = java_executable()
        classpath = zookeeper_classpath()
        if java is None or classpath is None:
            raise RuntimeError(
                "ZooKeeper needs java and a ZooKeeper install (apt-get install zookeeper, or ZOOKEEPER_HOME)"
            )
        return [
            java,
            f"-Xmx{self.heap}",
            f"-Dzookeeper.log.dir={self.data_dir}",
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-Djava.awt.headless=true",
            "-XX:+UseSerialGC",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(self.config_file),
        ]

    def start(self, timeout: float = 30.0) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.write_config()
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def is_serving(self) -> bool:
        try:
            if four_letter_word(self.host, self.port, "ruok").strip() != "imok":
                return False
            return four_letter_word(self.host, self.port, "srvr").startswith("Zookeeper version")
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.proc.returncode}; see {self.log_file}:\n{self.output()}"
                )
            if self.is_serving():
                return
            time.sleep(0.05)
        raise TimeoutError(f"ZooKeeper not serving on {self.connect} after {timeout}s; see {self.log_file}")

    def output(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:] if self.log_file.exists() else ""

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
        if self.proc is None:
            return 0
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # in case it was paused
            proc.terminate()
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait()

    def kill(self) -> None:
        """SIGKILL: sessions stay in its snapshot/log and expire after a restart."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        """SIGSTOP the server (every client loses its connection until resume())."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a standalone ZooKeeper in the foreground (Ctrl-C stops it).")
    parser.add_argument("--data-dir", default="/tmp/loglake-zookeeper")
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--config", default=str(DEFAULT_TEMPLATE), help="zoo.cfg template")
    parser.add_argument("--tick-time-ms", type=int, default=None, help="override the template's tickTime")
    args = parser.parse_args(argv)
    zk = ZooKeeperProcess(args.data_dir, args.port, args.config, tick_time_ms=args.tick_time_ms)
    stop = False

    def on_signal(signum, frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    zk.start()
    print(f"ZooKeeper serving on {zk.connect} (pid {zk.pid}); data and log in {zk.data_dir}", flush=True)
    try:
        while not stop and zk.proc is not None and zk.proc.poll() is None:
            time.sleep(0.2)
    finally:
        code = zk.stop()
    return 0 if stop else code


if __name__ == "__main__":
    sys.exit(main())
