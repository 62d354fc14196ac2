"""The ZooKeeper store's batched reads and writes the controller's work per change rests
on: pipelined reads of the named topics and partitions only, and compare-and-sets in
multi-ops that fall back to one by one when a version moved."""

from __future__ import annotations

from typing import Callable

import pytest

from loglake.coordination import zookeeper
from loglake.coordination.model import PartitionState, TopicDescription
from loglake.coordination.zookeeper import ZooKeeperMetadataStore

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]


def _topics(store: ZooKeeperMetadataStore, count: int) -> None:
    for i in range(count):
        store.create_topic(
            TopicDescription(f"t{i}", "", {0: (1, 2), 1: (2, 1)}, {"retention.ms": str(i)}),
            {p: PartitionState(1 + p, 0, (1, 2), 1) for p in (0, 1)},
        )


def test_reads_of_named_topics_and_partitions(make_store: Callable[..., ZooKeeperMetadataStore]) -> None:
    store = make_store()
    _topics(store, 5)
    named = store.topics_named(["t1", "t3", "missing"])
    assert set(named) == {"t1", "t3"} and named["t3"].config == {"retention.ms": "3"}
    assert named["t1"].assignment == {0: (1, 2), 1: (2, 1)}
    states = store.partition_states_of([("t2", 1), ("t4", 0), ("missing", 0), ("t2", 7)])
    assert states == {("t2", 1): PartitionState(2, 0, (1, 2), 1, 0), ("t4", 0): PartitionState(1, 0, (1, 2), 1, 0)}


def test_batched_compare_and_sets(
    make_store: Callable[..., ZooKeeperMetadataStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    _topics(store, 6)
    monkeypatch.setattr(zookeeper, "MULTI_OP_SIZE", 4)  # 12 partitions: three multi-ops
    # A leader moved one partition's state on meanwhile: its chunk falls back to one by one.
    store.update_partition_state("t4", 0, PartitionState(1, 0, (1,), 1), 0)
    updates = {(f"t{i}", p): (PartitionState(2, 1, (2,), 2), 0) for i in range(6) for p in (0, 1)}
    stored = store.update_partition_states(updates)
    assert set(stored) == set(updates) - {("t4", 0)}
    assert all(s == PartitionState(2, 1, (2,), 2, version=1) for s in stored.values())
    read = store.partition_states_of(list(updates))
    assert {tp: s for tp, s in read.items() if tp != ("t4", 0)} == stored
    assert read[("t4", 0)] == PartitionState(1, 0, (1,), 1, version=1), "the moved one is left as it was"
