"""A real ZooKeeper for the cluster tests, one per test session; each test gets its own chroot."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from harness.process import free_port
from harness.zookeeper_process import ZooKeeperProcess, available

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """A standalone ZooKeeper on a free port, tickTime 500 ms (sessions from 1 s)."""
    if not available():
        pytest.skip("ZooKeeper is not installed (apt-get install zookeeper, or set ZOOKEEPER_HOME)")
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"), port=free_port(), tick_time_ms=500)
    zk.start()
    yield zk
    zk.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperProcess) -> str:
    """A connect string with a fresh chroot, so tests see only their own znodes."""
    return f"{zookeeper.connect}/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_store(zk_connect: str) -> Iterator[Callable[..., object]]:
    """Open ZooKeeperMetadataStores on this test's chroot; closed at the end of the test."""
    from loglake.coordination.zookeeper import ZooKeeperMetadataStore

    stores: list[ZooKeeperMetadataStore] = []

    def make(session_timeout_ms: int = 6000) -> ZooKeeperMetadataStore:
        store = ZooKeeperMetadataStore(zk_connect, session_timeout_ms=session_timeout_ms)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[object]:
    """Three broker processes (conf/cluster) on this test's chroot, with FAST settings."""
    from cluster_helpers import FAST

    from harness.local_cluster import LocalCluster

    with LocalCluster(tmp_path, 3, FAST, zookeeper_connect=zk_connect) as c:
        yield c
