"""Producer ids for idempotent producers (InitProducerId), unique across the cluster.

Like Kafka's ProducerIdManager, a broker reserves a block of ids in the metadata store
and hands them out locally; the store remembers the reservation, so ids are never reused
after a restart (an unused remainder of a block is simply skipped). As Kafka's, it reserves
the next block in the background once 90% of the current one is handed out, so a caller
on the event loop does not wait for the store (unless ids run out faster than that).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from loglake.coordination.store import MetadataStore

PRODUCER_ID_BLOCK_SIZE = 1000
# Epochs are int16; Kafka bumps to a new producer id before the epoch would overflow.
MAX_PRODUCER_EPOCH = 0x7FFF - 1
# Reserve the next block when this many ids of the current one are left.
PREFETCH_AT_REMAINING = PRODUCER_ID_BLOCK_SIZE // 10


class ProducerIdManager:
    def __init__(self, store: MetadataStore, broker_id: int) -> None:
        self._store = store
        self._broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="loglake-producer-ids")
        self._prefetched: Future[int] | None = None

    def prefetch(self) -> None:
        """Reserve the next block now, in the background (at start-up)."""
        with self._lock:
            self._prefetch()

    def _prefetch(self) -> None:
        if self._prefetched is None:
            self._prefetched = self._executor.submit(
                self._store.allocate_producer_id_block, self._broker_id, PRODUCER_ID_BLOCK_SIZE
            )

    def generate_producer_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                prefetched, self._prefetched = self._prefetched, None
                if prefetched is not None and prefetched.exception() is None:
                    self._next = prefetched.result()
                else:  # none reserved, or its reservation failed: reserve one here
                    self._next = self._store.allocate_producer_id_block(self._broker_id, PRODUCER_ID_BLOCK_SIZE)
                self._end = self._next + PRODUCER_ID_BLOCK_SIZE
            producer_id = self._next
            self._next += 1
            if self._end - self._next <= PREFETCH_AT_REMAINING:
                self._prefetch()
            return producer_id

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def init_producer_id(self, producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        """A new (id, epoch 0); or, for a producer that gives its id and epoch (KIP-360, v3+),
        the same id with the next epoch so it can reset its sequences."""
        if producer_id >= 0 and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
            return producer_id, producer_epoch + 1
        return self.generate_producer_id(), 0
