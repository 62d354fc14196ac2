"""This broker's view of the cluster (the role of Kafka's MetadataCache).

The image is read whole from the store (ZooKeeper, or the embedded file) once, when the
broker starts. After that the controller keeps it current: its UpdateMetadata requests
carry the live brokers and the changed partition states (everything when the broker
joins or a new controller takes office), and this broker's own ISR changes as leader are
installed at once. A request handler reads `cache.image` once and answers from that one
consistent snapshot; each change installs a new image, on the event loop.

What UpdateMetadata does not carry, a topic's config and reassignment state, is read from
the store for the topics an update names (only those): the work per update is
proportional to what changed, never to the number of topics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from loglake.cluster.metadata_image import MetadataImage
from loglake.coordination.model import MetadataUpdate, PartitionState
from loglake.coordination.store import MetadataStore

from ingest_gateway.metadata.metadata_thread import MetadataThread


class MetadataCache:
    def __init__(self, store: MetadataStore, cluster_id: str, metadata_thread: MetadataThread) -> None:
        self._store = store
        self._metadata_thread = metadata_thread
        self._cluster_id = cluster_id
        self.image = MetadataImage(cluster_id=cluster_id)
        # Futures of `wait_until` calls, woken by every new image.
        self._waiters: list[asyncio.Future[None]] = []

    def load(self) -> None:
        """Read the whole image from the store (on the metadata thread, at start-up)."""
        store = self._store
        topics = store.topics()
        controller_id = store.controller_id()
        states = store.partition_states_of((name, p) for name, topic in topics.items() for p in topic.assignment)
        by_topic: dict[str, dict[int, PartitionState]] = {name: {} for name in topics}
        for (name, p), state in states.items():
            by_topic[name][p] = state
        update = MetadataUpdate(
            controller_id=-1 if controller_id is None else controller_id,
            controller_epoch=store.controller_epoch(),
            brokers=store.brokers(),
            topics=topics,
            states=by_topic,
            full=True,
        )
        self._metadata_thread.on_loop(self.apply, update)

    def apply(self, update: MetadataUpdate) -> None:
        """Install the controller's update (on the event loop), unless it comes from an
        older controller than the image's."""
        if update.controller_epoch < self.image.controller_epoch:
            return
        self._install(self.image.updated(update))

    async def apply_from_controller(self, update: MetadataUpdate) -> None:
        """An UpdateMetadata received over the wire, whose topics hold only what the request
        carries (id and replicas): their documents (config, reassignment state) are read
        from the store for the topics it names, and only for those, before it is applied.
        A full update reads only the topics this broker does not know yet."""
        image = self.image
        wanted = [
            name
            for name, topic in update.topics.items()
            if not update.full or (known := image.topics.get(name)) is None or known.topic_id != topic.topic_id
        ]
        documents = await self._metadata_thread.run(self._store.topics_named, wanted) if wanted else {}
        image = self.image
        topics = {}
        for name, shipped in update.topics.items():
            base = documents.get(name) if name in wanted else image.topics.get(name)
            if base is None:
                continue  # deleted since: the controller's next update says so
            # The replicas shipped are the controller's; a document read later may be newer.
            if name in wanted:
                assignment = {**shipped.assignment, **base.assignment}
            else:
                assignment = {**base.assignment, **shipped.assignment}
            topics[name] = replace(base, assignment=assignment)
        states = {name: s for name, s in update.states.items() if name in topics}
        self.apply(replace(update, topics=topics, states=states))

    def apply_partition_state(self, topic: str, partition: int, state: PartitionState) -> None:
        """This broker's own ISR change as leader, stored a moment ago (on the event loop)."""
        self._install(self.image.with_partition_state(topic, partition, state))

    def _install(self, image: MetadataImage) -> None:
        if image is self.image:
            return
        self.image = image
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_until(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait until the image satisfies `predicate` (a change this broker asked of the
        controller has reached it); False if it did not within `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate(self.image):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return predicate(self.image)
        return True
