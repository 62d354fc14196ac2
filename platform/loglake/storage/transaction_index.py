"""A segment's `.txnindex`: the transactions aborted by markers in that segment (Kafka's
TransactionIndex), so a read_committed fetch can tell the consumer which records to drop.

Each entry is 34 bytes, big-endian, as Kafka writes them:

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64

`lastOffset` is the ABORT marker's offset; entries are in `lastOffset` order. The file is
created with its first entry; it is small (one entry per aborted transaction), so the
entries are kept in memory too.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from loglake.storage.index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # read on first use

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = _read(self.path)
        return self._entries

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset, -1 when empty."""
        entries = self.entries
        return entries[-1].last_offset if entries else -1

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry after the last (an entry at or before the last is a replayed
        marker already indexed, and is ignored)."""
        if txn.last_offset <= self.last_offset:
            return
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        self.entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Transactions overlapping [fetch_offset, upper_bound_offset): aborted at or after
        the fetch offset and begun before the bound; and whether the search is complete:
        an entry whose LSO reached the bound shows every transaction begun below the bound
        had ended by then, so later segments hold none (Kafka's TxnIndexSearchResult)."""
        found = []
        for t in self.entries:
            if t.last_offset >= fetch_offset and t.first_offset < upper_bound_offset:
                found.append(t)
            if t.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (the log was cut there)."""
        kept = [t for t in self.entries if t.last_offset < offset]
        if len(kept) != len(self.entries):
            self._rewrite(kept)

    def reset(self) -> None:
        """Empty it (the segment is being recovered; its markers add the entries back)."""
        self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if entries:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_bytes(b"".join(t.encode() for t in entries))
            os.replace(tmp, self.path)
        else:
            self.path.unlink(missing_ok=True)
        self._entries = entries

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, target: Path) -> None:
        _ = self.entries  # read before the file moves, so a reader never opens a renamed path
        if self.path.exists():
            self.path.rename(target)
        self.path = target

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def _read(path: Path) -> list[AbortedTxn]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{path}: {len(data)} bytes is not a whole number of {ENTRY_SIZE}-byte entries")
    entries = []
    for version, producer_id, first, last, lso in _ENTRY.iter_unpack(data):
        if version != ABORTED_TXN_VERSION:
            raise CorruptIndexError(f"{path}: entry version {version}")
        entries.append(AbortedTxn(producer_id, first, last, lso))
    return entries
