"""The embedded store's side of the cluster interface: controller, deletion requests, watches."""

from __future__ import annotations

from pathlib import Path

import pytest

from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.model import BrokerEndpoint, PartitionState, TopicDescription
from loglake.errors import ErrorCode, KafkaError


def topic(name: str) -> TopicDescription:
    return TopicDescription(name, f"id-{name}", {0: (0,)})


STATE = {0: PartitionState(0, 0, (0,), 1)}


def test_the_single_node_is_the_controller_once_elected(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    assert store.controller_id() is None and store.controller_epoch() == 0
    seen: list[int | None] = []
    store.watch_controller(seen.append)
    assert store.elect_controller(0) == 1
    assert store.elect_controller(0) == 2  # every startup is a new election
    assert store.controller_id() == 0 and store.controller_epoch() == 2
    assert seen == [None, 0, 0]
    reopened = EmbeddedMetadataStore(tmp_path)
    assert reopened.controller_epoch() == 2 and reopened.controller_id() is None


def test_deletion_requests_persist_until_the_topic_is_deleted(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    with pytest.raises(KafkaError) as e:
        store.request_topic_deletion("t")
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    store.create_topic(topic("t"), STATE)
    store.create_topic(topic("a"), STATE)
    store.request_topic_deletion("t")
    store.request_topic_deletion("t")
    store.request_topic_deletion("a")
    assert store.pending_topic_deletions() == ["a", "t"]
    assert EmbeddedMetadataStore(tmp_path).pending_topic_deletions() == ["a", "t"]
    store.delete_topic("t")
    assert store.pending_topic_deletions() == ["a"]
    assert EmbeddedMetadataStore(tmp_path).pending_topic_deletions() == ["a"]


def test_watches_fire_at_once_and_on_changes(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    brokers: list[dict[int, int]] = []
    topics: list[set[str]] = []
    deletions: list[list[str]] = []
    store.watch_brokers(brokers.append)
    store.watch_topics(topics.append)
    store.watch_topic_deletions(deletions.append)
    store.register_broker(BrokerEndpoint(0, "127.0.0.1", 9092, "127.0.0.1", 8082))
    store.register_broker(BrokerEndpoint(0, "127.0.0.1", 9092, "127.0.0.1", 8082))  # no change
    store.create_topic(topic("t"), STATE)
    store.update_topic(topic("t"), {})
    store.request_topic_deletion("t")
    store.delete_topic("t")
    assert brokers == [{}, {0: -1}]
    assert topics == [set(), {"t"}, set()]
    assert deletions == [[], ["t"], []]
    store.on_session_expired(lambda: pytest.fail("the embedded store has no session"))
    store.close()
    store.create_topic(topic("u"), STATE)
    assert topics == [set(), {"t"}, set()]


def test_a_callback_may_change_the_store(tmp_path: Path) -> None:
    """A controller reacting to a deletion request deletes the topic from within the callback."""
    store = EmbeddedMetadataStore(tmp_path)
    store.create_topic(topic("t"), STATE)
    seen: list[list[str]] = []

    def on_deletions(names: list[str]) -> None:
        seen.append(names)
        for name in names:
            store.delete_topic(name)

    store.watch_topic_deletions(on_deletions)
    store.request_topic_deletion("t")
    assert store.topics() == {} and seen == [[], ["t"], []]


def test_the_cluster_id_is_set_once_and_kept(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path / "new-dir")
    assert store.get_or_create_cluster_id("first") == "first"
    assert store.get_or_create_cluster_id("second") == "first"
    assert EmbeddedMetadataStore(tmp_path / "new-dir").get_or_create_cluster_id("third") == "first"


def test_tiered_offsets_only_rise_survive_a_reload_and_go_with_the_topic(tmp_path) -> None:
    from loglake.coordination.embedded import EmbeddedMetadataStore
    from loglake.coordination.model import PartitionState, TopicDescription
    from loglake.errors import ErrorCode, KafkaError

    store = EmbeddedMetadataStore(tmp_path)
    states = {p: PartitionState(0, 0, (0,), 0) for p in (0, 1)}
    store.create_topic(TopicDescription("t", "id", {0: (0,), 1: (0,)}), states)
    assert store.tiered_offset("t", 0) is None and store.tiered_offset("t", 1) is None
    assert store.record_tiered_offset("t", 0, 100) == 100
    assert store.record_tiered_offset("t", 0, 50) == 100  # never lowered
    reread = EmbeddedMetadataStore(tmp_path)
    assert (reread.tiered_offset("t", 0), reread.tiered_offset("t", 1)) == (100, None)
    try:
        store.record_tiered_offset("t", 7, 1)
        raise AssertionError("a missing partition was accepted")
    except KafkaError as exc:
        assert exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    store.delete_topic("t")
    assert store.tiered_offset("t", 0) is None
