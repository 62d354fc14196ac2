"""Key -> latest offset of the dirty part of a log (the role of Kafka's OffsetMap).

Kafka's SkimpyOffsetMap stores a 16-byte hash and an 8-byte offset per key in
`log.cleaner.dedupe.buffer.size` bytes at a 0.9 load factor. Ours holds the keys in an
Arrow table, merged a chunk of records at a time by Arrow's hash aggregation (C++, no
per-record Python); the same budget bounds the number of entries (24 bytes an entry, 0.9
load), so a log with more distinct keys is cleaned in several passes, as in Kafka.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ENTRY_BYTES = 24
LOAD_FACTOR = 0.9


def capacity_for(dedupe_buffer_bytes: int) -> int:
    """Entries a `log.cleaner.dedupe.buffer.size` (per cleaner thread) holds."""
    return max(1, int(dedupe_buffer_bytes // ENTRY_BYTES * LOAD_FACTOR))


class OffsetMap:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._table = pa.table({"key": pa.array([], pa.binary()), "offset": pa.array([], pa.int64())})
        # Every keyed record in [start_offset, end_offset) was offered to the map.
        self.start_offset = 0
        self.end_offset = 0
        # Offsets of the tombstones offered (None: not known, as for a plan made elsewhere).
        self._tombstones: list[np.ndarray] | None = []
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._sorted: tuple[np.ndarray, np.ndarray | None] | None = None

    @classmethod
    def of(cls, keys: pa.Array, offsets: np.ndarray, end_offset: int) -> OffsetMap:
        """A map from a plan made elsewhere (the Spark executor): one latest offset per key."""
        offset_map = cls(max(1, len(keys)))
        offset_map._table = pa.table({"key": keys.cast(pa.binary()), "offset": pa.array(offsets, pa.int64())})
        offset_map.start_offset = offset_map.end_offset = end_offset
        offset_map._tombstones = None
        return offset_map

    def __len__(self) -> int:
        self._merge_pending()
        return self._table.num_rows

    def add_tombstones(self, offsets: np.ndarray) -> None:
        if self._tombstones is not None and len(offsets):
            self._tombstones.append(offsets)

    def sorted_latest_offsets(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The latest offsets, sorted, and those of them that are tombstones (None if unknown)."""
        if self._sorted is None:
            latest = np.sort(self.keys_and_offsets()[1])
            tombstones = None
            if self._tombstones is not None:
                offered = np.concatenate(self._tombstones) if self._tombstones else np.empty(0, np.int64)
                tombstones = np.intersect1d(offered, latest)
            self._sorted = (latest, tombstones)
        return self._sorted

    def _merge_pending(self) -> None:
        if self._pending:
            self._table = _latest(pa.concat_tables([self._table, *self._pending]))
            self._pending, self._pending_rows = [], 0

    @property
    def utilization(self) -> float:
        return len(self) / self.capacity

    def put(self, keys: pa.Array, offsets: np.ndarray) -> int:
        """Take records in offset order until the map is full; returns how many were taken
        (all of them unless the map filled up)."""
        self._sorted = None
        chunk = pa.table({"key": keys, "offset": pa.array(offsets, pa.int64())})
        if self._table.num_rows + self._pending_rows + len(keys) <= self.capacity:
            # Fits even if every key is new: merge later, many chunks at once.
            self._pending.append(chunk)
            self._pending_rows += len(keys)
            return len(keys)
        self._merge_pending()
        merged = _latest(pa.concat_tables([self._table, chunk]))
        if merged.num_rows <= self.capacity:
            self._table = merged
            return len(keys)
        # Cut the chunk just before the first occurrence of the first key that does not fit.
        fresh = pc.unique(pc.filter(keys, pc.invert(pc.is_in(keys, value_set=self._table["key"]))))
        first_seen = np.sort(pc.index_in(fresh, value_set=keys).to_numpy())
        taken = int(first_seen[self.capacity - self._table.num_rows])
        self._table = _latest(pa.concat_tables([self._table, chunk.slice(0, taken)]))
        return taken

    def latest_offsets(self, keys: pa.Array) -> np.ndarray:
        """The latest offset of each key, -1 for keys not in the map (null keys included)."""
        self._merge_pending()
        index = pc.index_in(keys, value_set=self._table["key"])
        found = pc.take(self._table["offset"], index)
        return pc.fill_null(found, -1).to_numpy(zero_copy_only=False)

    def keys_and_offsets(self) -> tuple[pa.Array, np.ndarray]:
        self._merge_pending()
        return self._table["key"].combine_chunks(), self._table["offset"].to_numpy()


def _latest(table: pa.Table) -> pa.Table:
    grouped = table.group_by("key", use_threads=False).aggregate([("offset", "max")])
    return pa.table({"key": grouped["key"], "offset": grouped["offset_max"]})
