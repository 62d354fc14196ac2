"""Producer id blocks: ids unique across blocks and restarts, the next block reserved in
the background before the current one runs out (so the caller does not wait for the store)."""

from __future__ import annotations

import threading
from pathlib import Path

from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.coordination.producer_ids import PREFETCH_AT_REMAINING, PRODUCER_ID_BLOCK_SIZE, ProducerIdManager


class RecordingStore(EmbeddedMetadataStore):
    """The embedded store, noting the thread of each block reservation."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reserved_on: list[str] = []

    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        self.reserved_on.append(threading.current_thread().name)
        return super().allocate_producer_id_block(broker_id, size)


def test_blocks_are_reserved_in_the_background_before_they_are_needed(tmp_path: Path) -> None:
    store = RecordingStore(tmp_path)
    ids = ProducerIdManager(store, 0)
    try:
        ids.prefetch()
        first = [ids.generate_producer_id() for _ in range(PRODUCER_ID_BLOCK_SIZE - PREFETCH_AT_REMAINING)]
        # 90% handed out: the next block is being reserved, not on this thread; the first
        # id past the current block comes from it.
        rest = [ids.generate_producer_id() for _ in range(PREFETCH_AT_REMAINING + 1)]
    finally:
        ids.close()
    handed_out = first + rest
    assert len(set(handed_out)) == len(handed_out)
    assert len(store.reserved_on) == 2
    assert all(name.startswith("loglake-producer-ids") for name in store.reserved_on)
    # A restart continues after every reserved block, the unused remainder skipped.
    again = ProducerIdManager(RecordingStore(tmp_path), 0)
    try:
        assert again.generate_producer_id() > max(handed_out)
    finally:
        again.close()
