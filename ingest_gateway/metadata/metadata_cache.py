"""This broker's view of the cluster (the role of Kafka's MetadataCache).

The store (ZooKeeper, or the embedded file) is the source of truth; the cache holds a
`MetadataImage` built from it, replaced whole on every refresh (UpdateMetadata from the
controller, an ISR change, a topic this broker created). A request handler reads
`cache.image` once and answers from that one consistent snapshot. A refresh reads the
store on the metadata thread and installs the image on the event loop, in the order of
the refreshes (so after the LeaderAndIsr decided before it).
"""

from __future__ import annotations

from loglake.cluster.metadata_image import MetadataImage
from loglake.coordination.store import MetadataStore

from ingest_gateway.metadata.metadata_thread import MetadataThread


class MetadataCache:
    def __init__(self, store: MetadataStore, cluster_id: str, metadata_thread: MetadataThread) -> None:
        self._store = store
        self._metadata_thread = metadata_thread
        self._cluster_id = cluster_id
        self.image = MetadataImage()

    def refresh(self, controller_epoch: int) -> None:
        """Rebuild the image from the store (call on the metadata thread)."""
        store = self._store
        topics = store.topics()
        controller_id = store.controller_id()
        image = MetadataImage(
            brokers=store.brokers(),
            topics=topics,
            partition_states={t: store.partition_states(t) for t in topics},
            controller_id=-1 if controller_id is None else controller_id,
            controller_epoch=controller_epoch,
            cluster_id=self._cluster_id,
        )
        self._metadata_thread.on_loop(self._install, image)

    def _install(self, image: MetadataImage) -> None:
        self.image = image

    def refresh_from_store(self) -> None:
        """Rebuild the image at the store's current controller epoch (after a change this
        broker made through the controller, so that its answers include it at once)."""
        self.refresh(self._store.controller_epoch())
