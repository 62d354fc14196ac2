"""What the offset and time indexes share: a file of fixed-size big-endian entries.

Entries are appended as they are made (no preallocation), so a healthy file is exactly
`entries * entry_size` bytes and needs no trimming when its segment rolls; a torn or
foreign file fails `sanity_check` and the segment rebuilds it from the .log. Lookups
binary-search an in-memory copy of the file, read on first use, so rolled segments that
are never read cost neither memory nor a file descriptor.

Concurrency: the owning Log serialises writers; readers may search at any time. Appends
only grow the in-memory copy and a truncation replaces it with a shorter copy, so a
reader that took a reference keeps a consistent (possibly slightly stale) view.
"""

from __future__ import annotations

import os
import struct
import threading
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar


class CorruptIndexError(Exception):
    """An index file that cannot belong to its segment; it must be rebuilt from the .log."""


class Index:
    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY.size
        self.existed = path.exists()
        if not self.existed:
            path.touch()
        self._file_size = path.stat().st_size
        self._entries = self._file_size // self.ENTRY.size
        self._data: bytearray | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._last: tuple[int, ...] | None = self._read_entry(self._entries - 1) if self._entries else None

    def __len__(self) -> int:
        return self._entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def _check_whole_entries(self) -> None:
        """Raise CorruptIndexError unless the file holds whole entries; each subclass's
        `sanity_check` calls this and checks more (the offset index needs the .log's size)."""
        if self._file_size % self.ENTRY.size:
            raise CorruptIndexError(
                f"{self.path}: size {self._file_size} is not a multiple of the {self.ENTRY.size}-byte entry"
            )

    def load(self) -> None:
        """Read the entries into memory now (before the file is renamed or deleted)."""
        self._loaded()

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_entries(0)

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    # For subclasses ----------------------------------------------------------------------

    def _entry(self, slot: int) -> tuple[int, ...]:
        return self.ENTRY.unpack_from(self._loaded(), slot * self.ENTRY.size)

    def _search(self, field: int, target: int) -> int:
        """Slot of the last entry whose `field` is <= target, or -1 (fields are sorted)."""
        data = self._loaded()
        size, unpack = self.ENTRY.size, self.ENTRY.unpack_from
        return bisect_right(range(len(data) // size), target, key=lambda i: unpack(data, i * size)[field]) - 1

    def _append(self, *entry: int) -> None:
        packed = self.ENTRY.pack(*entry)
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._fd, packed, self._entries * self.ENTRY.size)
            if self._data is not None:
                self._data += packed
            self._entries += 1
            self._file_size = self._entries * self.ENTRY.size
            self._last = entry

    def _truncate_entries(self, count: int) -> None:
        with self._lock:
            os.truncate(self.path, count * self.ENTRY.size)
            if self._data is not None:
                # A new object, not an in-place shrink: concurrent readers keep their copy.
                self._data = self._data[: count * self.ENTRY.size]
            self._entries = count
            self._file_size = count * self.ENTRY.size
            self._last = self._read_entry(count - 1) if count else None

    def _loaded(self) -> bytearray:
        data = self._data
        if data is None:
            with self._lock:
                if self._data is None:
                    self._data = bytearray(self._read_file(0, self._entries * self.ENTRY.size))
                data = self._data
        return data

    def _read_entry(self, slot: int) -> tuple[int, ...]:
        if self._data is not None:
            return self.ENTRY.unpack_from(self._data, slot * self.ENTRY.size)
        return self.ENTRY.unpack(self._read_file(slot * self.ENTRY.size, self.ENTRY.size))

    def _read_file(self, position: int, size: int) -> bytes:
        with open(self.path, "rb", buffering=0) as f:
            return os.pread(f.fileno(), size, position)
