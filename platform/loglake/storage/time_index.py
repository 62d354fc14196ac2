"""The sparse `.timeindex` file: max timestamp so far -> relative offset.

Entries are 12 bytes (int64 timestamp, int32 offset relative to the segment's base) and
are added only when the segment's max timestamp grows, so both fields increase. The
offset is the last offset of the batch that first reached that timestamp.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from loglake.storage.index import CorruptIndexError, Index

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class TimeIndex(Index):
    ENTRY = struct.Struct(">qi")

    @property
    def last_entry(self) -> TimestampOffset:
        """The newest entry, or (NO_TIMESTAMP, base offset) when the index is empty."""
        if self._last is None:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        timestamp, relative = self._last
        return TimestampOffset(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append when `timestamp` is newer than the last entry (and the index has room).

        `skip_full_check` lets a segment that is becoming inactive record its final max
        timestamp even in a full index.
        """
        last = self.last_entry
        if timestamp <= last.timestamp or (self.is_full and not skip_full_check):
            return False
        if offset < last.offset:
            raise ValueError(f"time index entry for offset {offset} would follow one for {last.offset}")
        self._append(timestamp, offset - self.base_offset)
        return True

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The last entry with a timestamp <= `timestamp`, or (NO_TIMESTAMP, base offset)."""
        slot = self._search(0, timestamp)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        found, relative = self._entry(slot)
        return TimestampOffset(found, self.base_offset + relative)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets >= `offset`."""
        self._truncate_entries(self._search(1, offset - self.base_offset - 1) + 1)

    def sanity_check(self) -> None:
        self._check_whole_entries()
        if self._last is not None:
            timestamp, relative = self._last
            first_timestamp = self._read_entry(0)[0]
            if relative < 0 or timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"{self.path}: last entry (timestamp {timestamp}, offset {self.base_offset + relative}) "
                    f"is out of order for a segment based at {self.base_offset}"
                )
