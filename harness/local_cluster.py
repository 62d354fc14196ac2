"""A ZooKeeper and N broker processes on loopback: for fault tests and benchmarks.

Each broker is started from `conf/cluster/broker-<id>.properties` with its ports, log dir
and ZooKeeper address overridden, so several clusters can run side by side. Brokers can be
killed (SIGKILL), paused (SIGSTOP), resumed and restarted on the same log dir.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import httpx

from harness.process import BrokerProcess, free_port
from harness.zookeeper_process import ZooKeeperProcess

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_CONF = ROOT / "conf" / "cluster"


class LocalCluster:
    def __init__(
        self,
        base_dir: str | Path,
        size: int = 3,
        overrides: dict[str, str] | None = None,
        zookeeper_connect: str | None = None,
        log_dirs_per_broker: int = 1,
        broker_overrides: dict[int, dict[str, str]] | None = None,
        extra_listeners: tuple[str, ...] = (),
    ) -> None:
        """With `zookeeper_connect` (e.g. a chroot of a shared test ZooKeeper) no ZooKeeper
        of its own is started. Broker n's log dirs are broker-n/logs, then logs2, logs3...
        `broker_overrides` are one broker's own (its `broker.rack`, say); each of
        `extra_listeners` (a listener name, e.g. SASL_SSL) gets a port of its own on every
        broker beside the PLAINTEXT one (`listener_port`)."""
        self.base_dir = Path(base_dir)
        self.size = size
        self.log_dirs_per_broker = log_dirs_per_broker
        self.overrides = overrides or {}
        self.broker_overrides = broker_overrides or {}
        self.extra_listeners = extra_listeners
        self.listener_ports: dict[tuple[int, str], int] = {}
        # A port of its own: on ZooKeeper's default one, clusters started side by side (other
        # worktrees, benchmarks) would join each other's ZooKeeper and fight over broker ids.
        self.zookeeper = None if zookeeper_connect else ZooKeeperProcess(self.base_dir / "zookeeper", port=free_port())
        self.zookeeper_connect = zookeeper_connect or self.zookeeper.connect  # type: ignore[union-attr]
        self.brokers: dict[int, BrokerProcess] = {}

    def start(self, timeout: float = 60.0) -> Self:
        try:
            if self.zookeeper is not None:
                self.zookeeper.start()
            for broker_id in range(1, self.size + 1):
                self._start_broker(broker_id, timeout)
            self.wait_for(
                lambda s: len(s["brokers"]) == self.size and s["controller"]["broker_id"] is not None, timeout
            )
        except BaseException:
            self.__exit__()  # a cluster that failed to start leaves no process behind
            raise
        return self

    def add_broker(self, timeout: float = 60.0) -> int:
        """Start one more broker (conf/cluster has up to four); returns its id once the
        cluster lists it."""
        self.size += 1
        self._start_broker(self.size, timeout)
        self.wait_for(lambda s: self.size in [b["broker_id"] for b in s["brokers"]], timeout)
        return self.size

    def _start_broker(self, broker_id: int, timeout: float) -> None:
        self._broker(broker_id).start(timeout)

    def _broker(self, broker_id: int) -> BrokerProcess:
        """Broker `broker_id`'s process (not started), from conf/cluster/broker-<id>.properties."""
        logs = self.base_dir / f"broker-{broker_id}" / "logs"
        log_dirs = [str(logs), *(f"{logs}{i}" for i in range(2, self.log_dirs_per_broker + 1))]
        broker = BrokerProcess(
            logs,
            config=CLUSTER_CONF / f"broker-{broker_id}.properties",
            overrides={
                "zookeeper.connect": self.zookeeper_connect,
                "log.dirs": ",".join(log_dirs),
                **self.overrides,
                **self.broker_overrides.get(broker_id, {}),
            },
            broker_id=broker_id,
        )
        for name in self.extra_listeners:
            port = self.listener_ports[(broker_id, name)] = free_port()
            broker.overrides["listeners"] += f",{name}://127.0.0.1:{port}"
        self.brokers[broker_id] = broker
        return broker

    def stop(self) -> None:
        """A clean shutdown: SIGTERM every broker (resumed first if paused), then ZooKeeper."""
        for broker_id, broker in self.brokers.items():
            if broker.proc is not None:
                self.resume(broker_id)
                broker.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.__exit__()  # stop the brokers and ZooKeeper it had started
            raise

    def __exit__(self, *exc: object) -> None:
        for broker in self.brokers.values():
            if broker.proc is not None:
                if broker.proc.poll() is None:
                    os.kill(broker.proc.pid, signal.SIGCONT)
                broker.kill()
        if self.zookeeper is not None:
            self.zookeeper.stop()

    # Faults --------------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def restart(self, broker_id: int, timeout: float = 60.0) -> None:
        broker = self.brokers[broker_id]
        if broker.proc is not None:
            broker.kill()
        broker.start(timeout)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker; returns once the kernel reports it stopped."""
        pid = self._pid(broker_id)
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while _process_state(pid) != "T":
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {broker_id} (pid {pid}) did not stop: state {_process_state(pid)!r}")
            time.sleep(0.01)

    def resume(self, broker_id: int) -> None:
        os.kill(self._pid(broker_id), signal.SIGCONT)

    def _pid(self, broker_id: int) -> int:
        proc = self.brokers[broker_id].proc
        if proc is None:
            raise RuntimeError(f"broker {broker_id} is not running")
        return proc.pid

    # Views ---------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def live(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.proc is not None and b.proc.poll() is None]

    def http_url(self, broker_id: int) -> str:
        return self.brokers[broker_id].http_url

    def status(self, via: int | None = None, exclude: tuple[int, ...] = ()) -> dict[str, Any]:
        """/cluster from `via`, or from any live broker not in `exclude` that answers."""
        candidates = [via] if via is not None else [b for b in self.live() if b not in exclude]
        last: Exception | None = None
        for broker_id in candidates:
            try:
                r = httpx.get(f"{self.http_url(broker_id)}/cluster", timeout=5)
                r.raise_for_status()
                return r.json()
            except httpx.HTTPError as exc:
                last = exc
        raise RuntimeError(f"no broker answered /cluster: {last}")

    def partition(self, topic: str, partition: int) -> dict[str, Any]:
        return _entry(self.status(), topic, partition)

    # Roles ---------------------------------------------------------------------------------

    def controller(self, timeout: float = 60.0, exclude: tuple[int, ...] = ()) -> int:
        """The controller's broker id (ZooKeeper's /controller, as /cluster reads it), once
        there is one that is not in `exclude` (e.g. one just killed or paused: its znode
        stays until its session expires)."""
        status = self.wait_for(
            lambda s: s["controller"]["broker_id"] is not None and s["controller"]["broker_id"] not in exclude,
            timeout,
            exclude=exclude,
        )
        return int(status["controller"]["broker_id"])

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 60.0, exclude: tuple[int, ...] = ()) -> int:
        """The partition's leader in ZooKeeper, once it has one that is not in `exclude`."""
        status = self.wait_for(
            lambda s: _entry(s, topic, partition)["leader"] not in (-1, *exclude), timeout, exclude=exclude
        )
        return int(_entry(status, topic, partition)["leader"])

    def followers_of(self, topic: str, partition: int = 0) -> list[int]:
        """The partition's in-sync followers (its ISR but the leader), in replica order."""
        entry = self.partition(topic, partition)
        return [b for b in entry["replicas"] if b in entry["isr"] and b != entry["leader"]]

    def any_follower_of(self, topic: str, partition: int = 0, not_controller: bool = False) -> int:
        """An in-sync follower of the partition; with `not_controller`, one that is not the
        controller (pausing or killing it then leaves the controller alone)."""
        avoid = (self.controller(),) if not_controller else ()
        followers = [b for b in self.followers_of(topic, partition) if b not in avoid]
        if not followers:
            raise RuntimeError(
                f"{topic}-{partition} has no in-sync follower{' but the controller' if avoid else ''}: "
                f"{self.partition(topic, partition)}"
            )
        return followers[-1]

    def a_broker_other_than(self, *broker_ids: int) -> int:
        """A live broker that is none of `broker_ids` (the lowest id)."""
        others = [b for b in sorted(self.live()) if b not in broker_ids]
        if not others:
            raise RuntimeError(f"no live broker other than {broker_ids} (live: {self.live()})")
        return others[0]

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0, exclude: tuple[int, ...] = ()
    ) -> dict[str, Any]:
        """Poll /cluster (from brokers not in `exclude`, e.g. paused ones) until
        `predicate(status)` holds; returns that status."""
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                status = self.status(exclude=exclude)
                if predicate(status):
                    return status
            except (RuntimeError, KeyError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"cluster did not reach the expected state; last status: {status}")


def _entry(status: dict[str, Any], topic: str, partition: int) -> dict[str, Any]:
    """One partition's entry of a /cluster status (KeyError if it has none yet)."""
    for p in status["partitions"]:
        if p["topic"] == topic and p["partition"] == partition:
            return dict(p)
    raise KeyError(f"{topic}-{partition}")


def _process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (T: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]
