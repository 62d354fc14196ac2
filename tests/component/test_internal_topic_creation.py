"""Internal topics (`__consumer_offsets`, `__transaction_state`) are created with their
configured replication factor or not at all, counted against the live brokers registered in
the metadata store, not against this broker's image: an image that does not list a broker
yet still gets RF 3 when three are alive; with too few alive, FindCoordinator's locator
answers COORDINATOR_NOT_AVAILABLE saying why and creates nothing; a standalone broker with
the shipped conf/server.properties (factors 1) is unaffected."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from harness.process import free_port
from ingest_gateway.coordinators.coordinator_locator import CoordinatorLocator
from ingest_gateway.metadata.admin_manager import AdminManager
from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.metadata.metadata_thread import MetadataThread
from ingest_gateway.server.broker import Broker
from loglake.cluster import assignment
from loglake.config import BrokerConfig
from loglake.coordination.controller import Controller
from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.model import BrokerEndpoint, LeaderAndIsrPartition, MetadataUpdate
from loglake.coordination.store import LOOP_GUARD_ENV, instrumented
from loglake.errors import ErrorCode, KafkaError
from loglake.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from loglake.security.client import PLAINTEXT

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
THIS_BROKER = 1


class LaggingImageChannel:
    """The controller's requests to this broker: LeaderAndIsr ignored, UpdateMetadata applied
    to its cache with only `listed` brokers, as an image that has not heard of the others."""

    def __init__(self, cache: MetadataCache, thread: MetadataThread, listed: set[int]) -> None:
        self._cache = cache
        self._thread = thread
        self._listed = listed

    def send_leader_and_isr(self, broker_id: int, controller_epoch: int, partitions: list[LeaderAndIsrPartition]):
        pass

    def send_stop_replica(self, broker_id: int, controller_epoch: int, partitions, delete: bool) -> None:
        pass

    def send_update_metadata(self, update: MetadataUpdate) -> None:
        brokers = {b: e for b, e in update.brokers.items() if b in self._listed}
        self._thread.on_loop(self._cache.apply, replace(update, brokers=brokers))


class Cluster:
    """One broker's locator over a store of `alive` registered brokers; its image lists `listed`."""

    def __init__(self, tmp_path: Path, alive: tuple[int, ...], listed: set[int], factor: int) -> None:
        self.store = EmbeddedMetadataStore(tmp_path / "store")
        for b in alive:
            self.store.register_broker(BrokerEndpoint(b, "127.0.0.1", 9092 + b, "127.0.0.1", 8082 + b))
        self.thread = MetadataThread()
        # Under the loop guard (set by the fixture) a store call on the event loop raises.
        guarded = instrumented(self.store, THIS_BROKER)
        cache = MetadataCache(guarded, "cluster", self.thread)
        controller = Controller(guarded, THIS_BROKER, LaggingImageChannel(cache, self.thread, listed))
        assert controller.startup()  # takes office: a full UpdateMetadata to the cache
        assert set(cache.image.brokers) == listed
        config = BrokerConfig.from_properties(
            {
                "broker.id": str(THIS_BROKER),
                "offsets.topic.num.partitions": str(PARTITIONS),
                "offsets.topic.replication.factor": str(factor),
                "transaction.state.log.num.partitions": str(PARTITIONS),
                "transaction.state.log.replication.factor": str(factor),
                "transaction.state.log.min.isr": "2",
            }
        )
        admin = AdminManager(config, guarded, controller, cache, PLAINTEXT, self.thread)
        self.locator = CoordinatorLocator(config, cache, admin, lambda _: 0, lambda _: 0)

    def replicas(self, topic: str) -> dict[int, tuple[int, ...]]:
        described = self.store.topics_named([topic]).get(topic)
        return {} if described is None else dict(described.assignment)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Cluster]]:
    monkeypatch.setenv(LOOP_GUARD_ENV, "1")
    # Placement from the first broker (it is random): partition 0 leads on broker 1, which
    # every lagging image here lists, so the coordinator lookups can name it.
    monkeypatch.setattr(assignment.random, "randrange", lambda n: 0)
    made: list[Cluster] = []

    def make(alive: tuple[int, ...], listed: set[int], factor: int = 3) -> Cluster:
        made.append(Cluster(tmp_path / str(len(made)), alive, listed, factor))
        return made[-1]

    yield make
    for c in made:
        c.thread.shutdown()
        c.store.close()


def test_an_image_listing_two_of_three_live_brokers_still_creates_rf_3(cluster) -> None:
    c = cluster(alive=(1, 2, 3), listed={1, 2})

    async def main() -> None:
        group = await c.locator.group_coordinator("g")
        txn = await c.locator.transaction_coordinator("t")
        assert group.broker_id in (1, 2, 3) and txn.broker_id in (1, 2, 3)

    asyncio.run(main())
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        replicas = c.replicas(topic)
        assert len(replicas) == PARTITIONS
        assert all(sorted(r) == [1, 2, 3] for r in replicas.values()), (topic, replicas)
    # transaction.state.log.min.isr is the topic's min.insync.replicas, as configured.
    assert c.store.topics_named([TRANSACTION_STATE_TOPIC])[TRANSACTION_STATE_TOPIC].config["min.insync.replicas"] == "2"


@pytest.mark.parametrize(
    ("find", "topic", "setting"),
    [
        ("group_coordinator", OFFSETS_TOPIC, "offsets.topic.replication.factor"),
        ("transaction_coordinator", TRANSACTION_STATE_TOPIC, "transaction.state.log.replication.factor"),
    ],
)
def test_too_few_live_brokers_answer_coordinator_not_available_and_create_nothing(
    cluster, find: str, topic: str, setting: str
) -> None:
    c = cluster(alive=(1, 2), listed={1, 2})

    async def main() -> None:
        for _ in range(2):  # asked again, still nothing
            with pytest.raises(KafkaError) as refused:
                await getattr(c.locator, find)("key")
            assert refused.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert f"{setting} is 3 but only 2 brokers are alive" in refused.value.message

    asyncio.run(main())
    assert c.store.topics_named([OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC]) == {}


def test_a_third_broker_registering_lets_the_next_request_create_the_topic(cluster) -> None:
    c = cluster(alive=(1, 2), listed={1, 2})

    async def main() -> None:
        with pytest.raises(KafkaError):
            await c.locator.group_coordinator("g")
        await asyncio.to_thread(
            c.store.register_broker, BrokerEndpoint(3, "127.0.0.1", 9095, "127.0.0.1", 8085)
        )  # the image still lists 1 and 2 only
        await c.locator.group_coordinator("g")

    asyncio.run(main())
    assert all(sorted(r) == [1, 2, 3] for r in c.replicas(OFFSETS_TOPIC).values())


def test_a_single_live_broker_is_named_so(cluster) -> None:
    c = cluster(alive=(1,), listed={1}, factor=2)

    async def main() -> None:
        with pytest.raises(KafkaError, match="offsets.topic.replication.factor is 2 but only 1 broker is alive"):
            await c.locator.group_coordinator("g")

    asyncio.run(main())


@pytest.fixture
def standalone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """An in-process broker from the shipped standalone config (embedded store)."""
    monkeypatch.setenv(LOOP_GUARD_ENV, "1")
    config = BrokerConfig.load(
        ROOT / "conf/server.properties",
        {
            "log.dirs": str(tmp_path / "logs"),
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "http.listeners": f"http://127.0.0.1:{free_port()}",
            "offsets.topic.num.partitions": str(PARTITIONS),
            "transaction.state.log.num.partitions": str(PARTITIONS),
        },
    )
    broker = Broker(config)
    broker.startup()
    yield broker
    broker.shutdown()


def test_a_standalone_broker_creates_both_internal_topics_with_factor_1(standalone: Broker) -> None:
    async def main() -> None:
        assert (await standalone.coordinators.group_coordinator("g")).broker_id == 0
        assert (await standalone.coordinators.transaction_coordinator("t")).broker_id == 0

    asyncio.run(main())
    topics = standalone.store.topics_named([OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC])
    for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
        assert set(topics[topic].assignment.values()) == {(0,)}
    assert topics[TRANSACTION_STATE_TOPIC].config["min.insync.replicas"] == "1"
